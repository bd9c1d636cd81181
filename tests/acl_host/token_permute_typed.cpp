// The expected output of token_permute.cpp: the same cases through mpg's typed
// API, printed in the same format. Built against mpg::mpg alone.
#include <cstdint>
#include <vector>

#include "cases.h"
#include "typed_program.h"

int main() {
  {
    using C = token_permute_cases::KeepAll;
    const auto tokens = from_bits<mpg::bfloat16>(C::tokens());
    const auto ids = C::expert_ids();
    auto permuted = from_bits<mpg::bfloat16>(C::permuted());
    auto sorted = C::sorted_indices();
    if (!report("keep_all_bf16_int32",
                mpg::token_permute(mpg::MatrixView(tokens.data(), C::kTokens, C::kHidden), ids,
                                   C::kTopk, C::kOutTokens,
                                   mpg::MatrixView(permuted.data(), C::kRows, C::kHidden),
                                   {sorted.data(), static_cast<int64_t>(sorted.size())}))) {
      return 1;
    }
    PrintBits("keep_all_bf16_int32 permute_tokens_out", permuted);
    PrintBits("keep_all_bf16_int32 sorted_indices_out", sorted);
  }
  {
    using C = token_permute_cases::Int8Dropping;
    const auto tokens = C::tokens();
    const auto ids = C::expert_ids();
    auto permuted = C::permuted();
    auto sorted = C::sorted_indices();
    if (!report("dropping_int8_int64",
                mpg::token_permute(mpg::MatrixView(tokens.data(), C::kTokens, C::kHidden), ids,
                                   C::kTopk, C::kOutTokens,
                                   mpg::MatrixView(permuted.data(), C::kRows, C::kHidden),
                                   {sorted.data(), static_cast<int64_t>(sorted.size())}))) {
      return 1;
    }
    PrintBits("dropping_int8_int64 permute_tokens_out", permuted);
    PrintBits("dropping_int8_int64 sorted_indices_out", sorted);
  }
  return 0;
}
