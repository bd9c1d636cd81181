// The expected output of permute_grad.cpp: the same cases through mpg's typed API, printed in
// the same format. Built against mpg::mpg alone.
#include <cstdint>
#include <vector>

#include "cases.h"
#include "typed_program.h"

int main() {
  {
    using C = permute_grad_cases::Padded;
    const auto grad = from_bits<mpg::bfloat16>(C::grad());
    auto out = from_bits<mpg::bfloat16>(C::out());
    const auto indices = C::sorted_indices();
    const mpg::Status s = mpg::permute_grad(
        mpg::MatrixView(grad.data(), C::kExperts * C::kCapacity, C::kHidden, C::kRowStride),
        indices, C::kTopk, mpg::Mode::kPadded,
        mpg::MatrixView(out.data() + C::kOutOffset, C::kTokens, C::kHidden, C::kOutRowStride));
    if (!report("padded_bf16_int64", s)) return 1;
    PrintBits("padded_bf16_int64 out", out);
  }
  {
    using C = permute_grad_cases::Dropless;
    const auto grad = from_bits<mpg::half>(C::grad());
    auto out = from_bits<mpg::half>(C::out());
    const auto indices = C::sorted_indices();
    const mpg::Status s = mpg::permute_grad(mpg::MatrixView(grad.data(), C::kRows, C::kHidden),
                                            indices, C::kTopk, mpg::Mode::kDropless,
                                            mpg::MatrixView(out.data(), C::kTokens, C::kHidden));
    if (!report("dropless_f16_int32", s)) return 1;
    PrintBits("dropless_f16_int32 out", out);
  }
  {
    using C = permute_grad_cases::Hand;
    const auto grad = C::grad();
    auto out = C::out();
    const auto indices = C::sorted_indices();
    const mpg::Status s = mpg::permute_grad(mpg::MatrixView(grad.data(), C::kRows, C::kHidden),
                                            indices, C::kTopk, mpg::Mode::kDropless,
                                            mpg::MatrixView(out.data(), C::kTokens, C::kHidden));
    if (!report("hand_f32", s)) return 1;
    PrintBits("hand_f32 out", out);
  }
  return 0;
}
