// The weighted kernels and the oracle compiled as a consumer with FMA might compile them:
// -ffp-contract=fast (GCC's default in GNU modes) plus FMA in the target (-mfma on x86-64,
// always on AArch64). The contract rounds x * p to fp32 before adding it; a fused multiply-add
// would not. Values are chosen so that the two differ: x1 * p1 is exactly a tie below fp32
// precision, so the rounded product cancels x0 * p0 to +0.0 while a fused one leaves 2^-24.
// Also built with -fno-math-errno -fno-trapping-math -freciprocal-math, the parts of -ffast-math
// that mpg accepts (include/mpg/detail/fp_flags.hpp refuses the others). A binary of its own:
// linked with other translation units, another copy of the same template instantiations, compiled
// without these flags, could be the one that runs.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mpg/mpg.hpp"

namespace {

using mpg::bfloat16;
using mpg::half;
using mpg::Isa;
using mpg::Mode;
using mpg::detail::Order;
using mpg::detail::WeightsView;

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Plain a * b + c: what the flags turn into an FMA when optimizing (the inputs come through
// volatile so nothing is folded at compile time).
float plain_multiply_add(float a, float b, float c) {
  return a * b + c;
}

TEST(FpContract, TheseFlagsFusePlainCode) {
  volatile float a = 1.0f + 0x1p-20f, b = 1.0f + 0x1p-4f, c = -(1.0f + 0x1p-4f + 0x1p-20f);
  if (plain_multiply_add(a, b, c) == 0.0f) {
    GTEST_SKIP() << "this build does not contract a * b + c (not optimizing?), so the tests "
                    "below cannot tell a fused kernel from a correct one";
  }
  EXPECT_EQ(plain_multiply_add(a, b, c), 0x1p-24f);
}

// Token 0: copies {row 0 with weight p0, row 1 with weight p1}; every column the same.
template <class T, class W, Order O>
void expect_rounded_products(Isa isa, float x0, float p0, float x1, float p1) {
  const int64_t hidden = 150;  // blocks, whole vectors and a partial one on every vector ISA
  std::vector<T> grad(2 * hidden);
  for (int64_t h = 0; h < hidden; ++h) {
    grad[h] = T(x0);
    grad[hidden + h] = T(x1);
  }
  ASSERT_EQ(static_cast<float>(grad[0]), x0);
  ASSERT_EQ(static_cast<float>(grad[hidden]), x1);
  const std::vector<W> p = {W(p0), W(p1)};
  ASSERT_EQ(static_cast<float>(p[1]), p1);
  const std::vector<int32_t> indices = {0, 1};
  WeightsView w;
  w.data = p.data();
  w.dtype = mpg::dtype_of<W>();
  w.row_stride = 2;
  std::vector<T> out(hidden, T(1.0f));
  const mpg::ConstMatrixView<T> g(grad.data(), 2, hidden);
  const mpg::MatrixView<T> o(out.data(), 1, hidden);
  if (isa == Isa::kAuto) {
    mpg::detail::reference_gather_sum<T, int32_t, Mode::kDropless, O, true>(g, indices, 2, w, o);
  } else {
    mpg::Options options;
    options.isa = isa;
    mpg::detail::fast_gather_sum<T, int32_t, Mode::kDropless, O, true>(g, indices, 2, w, o,
                                                                       options);
  }
  for (int64_t h = 0; h < hidden; ++h) {
    ASSERT_EQ(bits_of(static_cast<float>(out[h])), 0u)
        << (isa == Isa::kAuto ? "reference" : mpg::name_of(isa)) << " column " << h;
  }
}

template <Order O>
void expect_all_dtypes(Isa isa) {
  // fp32 tokens, any weight dtype: x1 = 1 + 2^-20, p1 = 1 + 2^-4.
  const float a = 1.0f + 0x1p-20f, b = 1.0f + 0x1p-4f, ab = -(1.0f + 0x1p-4f + 0x1p-20f);
  expect_rounded_products<float, float, O>(isa, ab, 1.0f, a, b);
  expect_rounded_products<float, half, O>(isa, ab, 1.0f, a, b);
  expect_rounded_products<float, bfloat16, O>(isa, ab, 1.0f, a, b);
  // 16-bit tokens with fp32 weights (two 16-bit operands always multiply exactly in fp32):
  // x1 = 1 + 2^-7, p1 = 1 + 2^-17, x0 = -1, p0 = 1 + 2^-7 + 2^-17.
  const float c = 1.0f + 0x1p-7f, d = 1.0f + 0x1p-17f, cd = 1.0f + 0x1p-7f + 0x1p-17f;
  expect_rounded_products<bfloat16, float, O>(isa, -1.0f, cd, c, d);
  expect_rounded_products<half, float, O>(isa, -1.0f, cd, c, d);
}

TEST(FpContract, ReferenceRoundsProducts) {
  expect_all_dtypes<Order::kSequential>(Isa::kAuto);
  expect_all_dtypes<Order::kBinaryBins>(Isa::kAuto);
}

TEST(FpContract, EveryKernelSetRoundsProducts) {
  mpg::detail::find_kernel_set([&](auto set) {
    if (!mpg::detail::cpu_supports(set.kIsa)) return false;
    SCOPED_TRACE(mpg::name_of(set.kIsa));
    expect_all_dtypes<Order::kSequential>(set.kIsa);
    expect_all_dtypes<Order::kBinaryBins>(set.kIsa);
    return false;
  });
}

// MoeTokenUnpermuteGrad's dP: e = x * g then the tree, whose first pair is e0 + e1. With
// e0 = -(a * b) exactly and e1 = a * b rounded, the sum is +0.0 only if the product was rounded.
void expect_rounded_dp(const mpg::Options& options) {
  const float a = 1.0f + 0x1p-20f, b = 1.0f + 0x1p-4f, ab = -(1.0f + 0x1p-4f + 0x1p-20f);
  const std::vector<float> x = {ab, a};
  const std::vector<float> g = {1.0f, b};
  const std::vector<float> probs = {1.0f};
  const std::vector<int32_t> indices = {0};
  std::vector<float> dx(2, 1.0f), dp(1, 1.0f);
  ASSERT_TRUE(
      mpg::unpermute_grad(
          mpg::ConstMatrixView<float>(x.data(), 1, 2), mpg::ConstMatrixView<float>(g.data(), 1, 2),
          mpg::IndexView<int32_t>(indices), mpg::ConstMatrixView<float>(probs.data(), 1, 1),
          mpg::MatrixView<float>(dx.data(), 1, 2), mpg::MatrixView<float>(dp.data(), 1, 1), options)
          .ok());
  EXPECT_EQ(bits_of(dp[0]), 0u) << (options.path == mpg::Path::kReference
                                        ? "reference"
                                        : mpg::name_of(options.isa));
}

TEST(FpContract, UnpermuteGradRoundsProductsOnEveryPath) {
  mpg::Options reference;
  reference.path = mpg::Path::kReference;
  expect_rounded_dp(reference);
  mpg::detail::find_kernel_set([&](auto set) {
    if (!mpg::detail::cpu_supports(set.kIsa)) return false;
    mpg::Options fast;
    fast.path = mpg::Path::kFast;
    fast.isa = set.kIsa;
    expect_rounded_dp(fast);
    return false;
  });
}

}  // namespace
