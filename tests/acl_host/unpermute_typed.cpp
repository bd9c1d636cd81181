// The expected output of unpermute.cpp: the same cases through mpg's typed API,
// printed in the same format. Built against mpg::mpg alone.
#include <cstdint>
#include <vector>

#include "cases.h"
#include "typed_program.h"

int main() {
  {
    using C = unpermute_cases::Weighted;
    const auto tokens = from_bits<mpg::bfloat16>(C::permuted_tokens());
    const auto indices = C::sorted_indices();
    const auto probs = C::probs();
    auto out = from_bits<mpg::bfloat16>(C::out());
    if (!report("weighted_bf16_int32",
                mpg::unpermute(mpg::MatrixView(tokens.data(), C::kRows, C::kHidden), indices,
                               mpg::MatrixView(probs.data(), C::kTokens, C::kTopk),
                               mpg::Mode::kDropless,
                               mpg::MatrixView(out.data(), C::kTokens, C::kHidden)))) {
      return 1;
    }
    PrintBits("weighted_bf16_int32 out", out);
  }
  {
    using C = unpermute_cases::Unweighted;
    const auto tokens = from_bits<mpg::half>(C::permuted_tokens());
    const auto indices = C::sorted_indices();
    auto out = from_bits<mpg::half>(C::out());
    if (!report("unweighted_f16_int64",
                mpg::unpermute(mpg::MatrixView(tokens.data(), C::kRows, C::kHidden), indices,
                               mpg::Mode::kDropless,
                               mpg::MatrixView(out.data(), C::kCopies, C::kHidden)))) {
      return 1;
    }
    PrintBits("unweighted_f16_int64 out", out);
  }
  return 0;
}
