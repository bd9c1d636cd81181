// The expected output of init_routing_v2_grad.cpp: the same cases through mpg's
// typed API, printed in the same format. Built against mpg::mpg alone.
#include <cstdint>
#include <vector>

#include "cases.h"
#include "typed_program.h"

int main() {
  {
    using C = init_routing_v2_grad_cases::Dropless;
    const auto grad = C::grad();
    auto out = C::out();
    const auto indices = C::expanded_row_idx();
    if (!report("dropless_f32_int32",
                mpg::init_routing_v2_grad(mpg::MatrixView(grad.data(), C::kRows, C::kHidden),
                                          indices, C::kTopk, mpg::Mode::kDropless,
                                          mpg::MatrixView(out.data(), C::kTokens, C::kHidden)))) {
      return 1;
    }
    PrintBits("dropless_f32_int32 out", out);
  }
  {
    using C = init_routing_v2_grad_cases::Active;
    const auto grad = from_bits<mpg::half>(C::grad());
    auto out = from_bits<mpg::half>(C::out());
    const auto indices = C::expanded_row_idx();
    if (!report("active_f16_int64",
                mpg::init_routing_v2_grad(mpg::MatrixView(grad.data(), C::kActive, C::kHidden),
                                          indices, C::kTopk, mpg::Mode::kDropless,
                                          mpg::MatrixView(out.data(), C::kTokens, C::kHidden)))) {
      return 1;
    }
    PrintBits("active_f16_int64 out", out);
  }
  {
    using C = init_routing_v2_grad_cases::Padded;
    const auto grad = from_bits<mpg::bfloat16>(C::grad());
    auto out = from_bits<mpg::bfloat16>(C::out());
    const auto indices = C::expanded_row_idx();
    if (!report("padded_bf16_int32",
                mpg::init_routing_v2_grad(
                    mpg::MatrixView(grad.data(), C::kExperts * C::kCapacity, C::kHidden), indices,
                    C::kTopk, mpg::Mode::kPadded,
                    mpg::MatrixView(out.data(), C::kTokens, C::kHidden)))) {
      return 1;
    }
    PrintBits("padded_bf16_int32 out", out);
  }
  return 0;
}
