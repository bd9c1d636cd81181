// The expected output of unpermute_grad.cpp: the same cases through mpg's typed
// API, printed in the same format. Built against mpg::mpg alone.
#include <cstdint>
#include <vector>

#include "cases.h"
#include "typed_program.h"

int main() {
  {
    using C = unpermute_grad_cases::Weighted;
    const auto tokens = from_bits<mpg::bfloat16>(C::permuted_tokens());
    const auto grad = from_bits<mpg::bfloat16>(C::unpermuted_tokens_grad());
    const auto indices = C::sorted_indices();
    const auto probs = from_bits<mpg::bfloat16>(C::probs());
    auto tokens_grad = from_bits<mpg::bfloat16>(C::permuted_tokens_grad());
    auto probs_grad = from_bits<mpg::bfloat16>(C::probs_grad());
    if (!report("weighted_bf16_int32",
                mpg::unpermute_grad(
                    mpg::MatrixView(tokens.data(), C::kRows, C::kHidden),
                    mpg::MatrixView(grad.data(), C::kTokens, C::kHidden), indices,
                    mpg::MatrixView(probs.data(), C::kTokens, C::kTopk),
                    mpg::MatrixView(tokens_grad.data(), C::kTokens * C::kTopk, C::kHidden),
                    mpg::MatrixView(probs_grad.data(), C::kTokens, C::kTopk)))) {
      return 1;
    }
    PrintBits("weighted_bf16_int32 permuted_tokens_grad_out", tokens_grad);
    PrintBits("weighted_bf16_int32 probs_grad_out", probs_grad);
  }
  {
    using C = unpermute_grad_cases::Unweighted;
    const auto tokens = C::permuted_tokens();
    const auto grad = C::unpermuted_tokens_grad();
    const auto indices = C::sorted_indices();
    auto tokens_grad = C::permuted_tokens_grad();
    if (!report("unweighted_f32_int64",
                mpg::unpermute_grad(mpg::MatrixView(tokens.data(), C::kRows, C::kHidden),
                                    mpg::MatrixView(grad.data(), C::kCopies, C::kHidden), indices,
                                    mpg::MatrixView(tokens_grad.data(), C::kCopies, C::kHidden)))) {
      return 1;
    }
    PrintBits("unweighted_f32_int64 permuted_tokens_grad_out", tokens_grad);
  }
  return 0;
}
