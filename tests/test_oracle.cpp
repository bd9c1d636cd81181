// The oracle itself is checked, not assumed: (1) the reference is the adjoint of the forward
// permute, exactly; (2) its widening and narrowing agree with IEEE round-to-nearest-even
// written out here at the bit level, on every half and bfloat16 value and the sums around them.
#include "test_util.hpp"

#include <tuple>

namespace {

using mpg::DType;
using mpg::Mode;
using mpg_test::GuardedMatrix;

mpg::Options reference_options() {
  const mpg::Options o = mpg_test::path_options(mpg_test::kReferencePath);
  return o;
}

// ---------------------------------------------------------------------------------------------
// Adjoint: <permute(x), g> == <x, permute_grad(g)>.
//
// Why equality is exact: x and g hold integers in [-8, 8] and K <= 8, so every out element of
// permute_grad is an integer of magnitude <= 64, exact in fp32 and in all three dtypes (bfloat16
// holds integers up to 256 exactly). Every product in either inner product is an integer <= 512
// in magnitude and there are far fewer than 2^43 of them, so both fp64 sums stay exact integers
// below 2^53. Both sides then equal the same integer, sum over kept copies (t, k) of
// x[t] . g[S[t*K+k]], whatever order the terms are added in.

class Adjoint : public ::testing::TestWithParam<std::tuple<DType, Mode, int64_t>> {};

TEST_P(Adjoint, ForwardAndBackwardAreTransposes) {
  const auto [dtype, mode, topk] = GetParam();
  mpg_test::with_element_type(dtype, [&, mode = mode, topk = topk](auto tag) {
    using T = typename decltype(tag)::type;
    std::mt19937_64 rng(1000 + topk);
    for (int trial = 0; trial < 5; ++trial) {
      const int64_t tokens = 50 + 17 * trial;
      const int64_t hidden = 1 + 9 * trial;
      const auto routing = mpg_test::make_routing<int32_t>(rng, mode, tokens, topk, topk + 3);
      GuardedMatrix<T> x(tokens, hidden);
      GuardedMatrix<T> g(routing.grad_rows, hidden);
      mpg_test::fill_random(x, rng, mpg_test::Values::kSmallIntegers);
      mpg_test::fill_random(g, rng, mpg_test::Values::kSmallIntegers);
      GuardedMatrix<T> px(routing.grad_rows, hidden);
      GuardedMatrix<T> grad_x(tokens, hidden);
      const mpg::Status forward_status =
          mpg::permute(x.const_view(), routing.sorted_indices, topk, mode, px.view());
      ASSERT_TRUE(forward_status.ok()) << forward_status.message();
      ASSERT_TRUE(mpg_test::run_permute_grad(g, routing.sorted_indices, topk, mode, grad_x,
                                             reference_options())
                      .ok());
      double forward = 0.0;  // <permute(x), g> over G's rows (padding rows of px are zero)
      for (int64_t r = 0; r < routing.grad_rows; ++r) {
        for (int64_t h = 0; h < hidden; ++h) {
          forward += static_cast<double>(px.at(r, h)) * static_cast<double>(g.at(r, h));
        }
      }
      double backward = 0.0;  // <x, permute_grad(g)>
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t h = 0; h < hidden; ++h) {
          backward += static_cast<double>(x.at(t, h)) * static_cast<double>(grad_x.at(t, h));
        }
      }
      EXPECT_EQ(forward, backward) << "trial " << trial << ", R = " << routing.grad_rows
                                   << ", kept " << routing.num_kept() << " of " << tokens * topk;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Reference, Adjoint,
                         ::testing::Combine(::testing::ValuesIn(mpg_test::kElementDTypes),
                                            ::testing::Values(Mode::kDropless, Mode::kPadded),
                                            ::testing::Values(int64_t{1}, int64_t{3}, int64_t{8})),
                         [](const auto& info) {
                           return mpg_test::short_name(std::get<0>(info.param)) + "_" +
                                  mpg_test::short_name(std::get<1>(info.param)) + "_K" +
                                  std::to_string(std::get<2>(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// IEEE conversions written from the definitions, on bit patterns only (no Eigen, no casts).

float float_from_bits(uint32_t b) {
  return mpg_test::from_bits<float>(b);
}

// binary16 -> binary32 is exact: rebias the exponent, normalize subnormals, keep NaN a NaN.
uint32_t half_to_float_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return sign | 0x7F800000u | (mantissa << 13);  // inf / NaN
  if (exponent != 0) return sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  if (mantissa == 0) return sign;  // +-0
  // Subnormal: mantissa * 2^-24. Shift until the leading 1 reaches the implicit bit.
  int e = -14;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return sign | (static_cast<uint32_t>(e + 127) << 23) | ((mantissa & 0x3FFu) << 13);
}

// bfloat16 is the top half of a binary32.
uint32_t bfloat16_to_float_bits(uint16_t b) {
  return static_cast<uint32_t>(b) << 16;
}

// binary32 -> bfloat16, round to nearest, ties to even. Same exponent range, so rounding is on
// the dropped low 16 bits of the sign-magnitude pattern; a carry out of the mantissa moves to
// the next binade, and out of the largest finite value into infinity, as IEEE requires.
uint16_t float_to_bfloat16_bits(uint32_t f) {
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // NaN
  uint32_t upper = f >> 16;
  const uint32_t dropped = f & 0xFFFFu;
  if (dropped > 0x8000u || (dropped == 0x8000u && (upper & 1u))) ++upper;
  return static_cast<uint16_t>(upper);
}

// binary32 -> binary16, round to nearest, ties to even. The magnitude is M * 2^e exactly
// (M < 2^24 an integer). Its binary16 quantum is 2^q with q = max(floor(log2 |x|), -14) - 10
// (normal: 11 significant bits; subnormal: fixed 2^-24). Round M * 2^(e-q) to an integer n,
// then encode n * 2^q; n = 2048 is the next binade and an exponent past 15 is infinity.
uint16_t float_to_half_bits(uint32_t f) {
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t exponent = (f >> 23) & 0xFFu;
  const uint32_t fraction = f & 0x7FFFFFu;
  if (exponent == 0xFF) return sign | (fraction ? 0x7E00u : 0x7C00u);  // NaN / inf
  if (exponent == 0 && fraction == 0) return sign;                     // +-0
  const uint64_t m = exponent ? (fraction | 0x800000u) : fraction;
  const int e = exponent ? static_cast<int>(exponent) - 127 - 23 : -149;
  int bit_length = 0;
  while ((m >> bit_length) != 0) ++bit_length;
  const int floor_log2 = e + bit_length - 1;
  int q = std::max(floor_log2, -14) - 10;
  const int shift = q - e;  // > 0: drop `shift` low bits of m
  uint64_t n;
  if (shift <= 0) {
    n = m << -shift;
  } else if (shift > 40) {
    n = 0;  // far below half the smallest subnormal
  } else {
    n = m >> shift;
    const uint64_t dropped = m & ((uint64_t{1} << shift) - 1);
    const uint64_t half_quantum = uint64_t{1} << (shift - 1);
    if (dropped > half_quantum || (dropped == half_quantum && (n & 1u))) ++n;
  }
  if (n >= 2048) {  // rounded up to the next binade (n is exactly 2048 here)
    n >>= 1;
    ++q;
  }
  if (n < 1024) return static_cast<uint16_t>(sign | n);  // subnormal (q = -24), or zero
  const int biased = q + 10 + 15;
  if (biased >= 31) return sign | 0x7C00u;  // overflow: infinity
  return static_cast<uint16_t>(sign | (biased << 10) | (n - 1024));
}

// The rules must hold on known values before they can judge the library.
TEST(IeeeRules, KnownValues) {
  EXPECT_EQ(float_to_half_bits(mpg_test::bits_of(1.0f)), 0x3C00u);
  EXPECT_EQ(float_to_half_bits(mpg_test::bits_of(65504.0f)), 0x7BFFu);
  EXPECT_EQ(float_to_half_bits(mpg_test::bits_of(65519.0f)), 0x7BFFu);  // below the tie
  EXPECT_EQ(float_to_half_bits(mpg_test::bits_of(65520.0f)), 0x7C00u);  // tie, to even: inf
  EXPECT_EQ(float_to_half_bits(mpg_test::bits_of(5.9604644775390625e-8f)), 0x0001u);   // 2^-24
  EXPECT_EQ(float_to_half_bits(mpg_test::bits_of(2.98023223876953125e-8f)), 0x0000u);  // tie->0
  EXPECT_EQ(float_to_half_bits(mpg_test::bits_of(8.94069671630859375e-8f)), 0x0002u);  // 1.5->2
  EXPECT_EQ(float_to_half_bits(mpg_test::bits_of(-0.0f)), 0x8000u);
  EXPECT_EQ(float_to_half_bits(mpg_test::bits_of(1.0f + 1.0f / 2048)), 0x3C00u);  // tie, even
  EXPECT_EQ(float_to_half_bits(mpg_test::bits_of(1.0f + 3.0f / 2048)), 0x3C02u);  // tie, up
  EXPECT_EQ(float_to_bfloat16_bits(mpg_test::bits_of(1.0f + 1.0f / 256)), 0x3F80u);
  EXPECT_EQ(float_to_bfloat16_bits(mpg_test::bits_of(1.0f + 3.0f / 256)), 0x3F82u);
  EXPECT_EQ(float_to_bfloat16_bits(0x7F7FFFFFu), 0x7F80u);  // FLT_MAX rounds to inf
  EXPECT_EQ(half_to_float_bits(0x0001u), mpg_test::bits_of(5.9604644775390625e-8f));
  EXPECT_EQ(half_to_float_bits(0xFBFFu), mpg_test::bits_of(-65504.0f));
  EXPECT_EQ(half_to_float_bits(0x03FFu), mpg_test::bits_of(6.09755516052246094e-5f));
}

template <class T>
struct Rules;
template <>
struct Rules<mpg::half> {
  static uint32_t widen(uint16_t b) { return half_to_float_bits(b); }
  static uint16_t narrow(uint32_t f) { return float_to_half_bits(f); }
  static constexpr int kMantissaBits = 10;
};
template <>
struct Rules<mpg::bfloat16> {
  static uint32_t widen(uint16_t b) { return bfloat16_to_float_bits(b); }
  static uint16_t narrow(uint32_t f) { return float_to_bfloat16_bits(f); }
  static constexpr int kMantissaBits = 7;
};

// Offsets b added to a: 0, -0, a itself (doubling: overflow at the top), -a (+0, and inf-inf),
// and ulp(a) times 1/2 (a tie), 1/4, 3/4 (below/above the tie), 1, both signs. Offsets that are
// not representable in T are skipped (checked with the independent rules, not with Eigen).
template <class T>
std::vector<uint16_t> offsets_for(uint16_t a) {
  const float fa = float_from_bits(Rules<T>::widen(a));
  std::vector<float> candidates = {0.0f, -0.0f, fa, -fa};
  if (std::isfinite(fa)) {
    const int e =
        std::max(std::ilogb(fa == 0.0f ? 1.0f : fa), std::numeric_limits<T>::min_exponent - 1);
    const float ulp = std::ldexp(1.0f, e - Rules<T>::kMantissaBits);
    for (const float f : {0.5f, 0.25f, 0.75f, 1.0f}) {
      candidates.push_back(f * ulp);
      candidates.push_back(-f * ulp);
    }
  }
  std::vector<uint16_t> out;
  for (const float c : candidates) {
    const uint16_t b = Rules<T>::narrow(mpg_test::bits_of(c));
    if (float_from_bits(Rules<T>::widen(b)) == c || std::isnan(c)) out.push_back(b);
  }
  return out;
}

template <class T>
class Narrowing : public ::testing::Test {};
using HalfTypes = ::testing::Types<mpg::half, mpg::bfloat16>;
class HalfTypeNames {
 public:
  template <class T>
  static std::string GetName(int) {
    return mpg_test::short_name(mpg::dtype_of<T>());
  }
};
TYPED_TEST_SUITE(Narrowing, HalfTypes, HalfTypeNames);

// For every bit pattern a of T and the offsets around it, the reference's out = T(a + b) must
// be what the rules predict: narrow(widen(a) + widen(b)), the add being the test's own fp32 add.
// One token per pair, K = 2, H = 64, so the reference runs its ordinary vectorized widening.
TYPED_TEST(Narrowing, ReferenceMatchesIeeeRulesOnEveryValue) {
  using T = TypeParam;
  std::vector<uint16_t> a_bits;
  std::vector<uint16_t> b_bits;
  for (uint32_t a = 0; a <= 0xFFFFu; ++a) {
    for (const uint16_t b : offsets_for<T>(static_cast<uint16_t>(a))) {
      a_bits.push_back(static_cast<uint16_t>(a));
      b_bits.push_back(b);
    }
  }
  constexpr int64_t kHidden = 64;
  const int64_t pairs = static_cast<int64_t>(a_bits.size());
  const int64_t tokens = (pairs + kHidden - 1) / kHidden;
  GuardedMatrix<T> grad(2 * tokens, kHidden);
  for (int64_t i = 0; i < tokens * kHidden; ++i) {
    const size_t p = static_cast<size_t>(std::min(i, pairs - 1));  // pad with the last pair
    grad.at(2 * (i / kHidden), i % kHidden) = mpg_test::from_bits<T>(a_bits[p]);
    grad.at(2 * (i / kHidden) + 1, i % kHidden) = mpg_test::from_bits<T>(b_bits[p]);
  }
  std::vector<int32_t> identity(static_cast<size_t>(2 * tokens));
  std::iota(identity.begin(), identity.end(), 0);
  GuardedMatrix<T> out(tokens, kHidden);
  ASSERT_TRUE(
      mpg_test::run_permute_grad(grad, identity, 2, Mode::kDropless, out, reference_options())
          .ok());
  int64_t failures = 0;
  int64_t nans = 0;
  for (int64_t i = 0; i < pairs && failures < 10; ++i) {
    const size_t p = static_cast<size_t>(i);
    const float sum =
        float_from_bits(Rules<T>::widen(a_bits[p])) + float_from_bits(Rules<T>::widen(b_bits[p]));
    const uint16_t want = Rules<T>::narrow(mpg_test::bits_of(sum));
    const T got = out.at(i / kHidden, i % kHidden);
    if (std::isnan(sum)) {
      ++nans;
      if (!mpg_test::is_nan(got)) ++failures;
      EXPECT_TRUE(mpg_test::is_nan(got))
          << "a = 0x" << std::hex << a_bits[p] << ", b = 0x" << b_bits[p];
      continue;
    }
    if (mpg_test::bits_of(got) != want) ++failures;
    EXPECT_EQ(mpg_test::bits_of(got), want)
        << std::hex << "a = 0x" << a_bits[p] << ", b = 0x" << b_bits[p] << ", fp32 sum " << sum;
  }
  EXPECT_GT(pairs, 400000);  // 65536 patterns with most of their 12 offsets
  EXPECT_GT(nans, 1000);     // NaN inputs and inf + -inf were among them
}

// float: the narrowing is the identity, so out = a + b in fp32, on random and special values.
TEST(Narrowing, FloatIsTheFp32Sum) {
  std::mt19937_64 rng(5);
  constexpr int64_t kTokens = 4096, kHidden = 33;
  GuardedMatrix<float> grad(2 * kTokens, kHidden);
  mpg_test::fill_random(grad, rng, mpg_test::Values::kWithSpecials);
  std::vector<int64_t> identity(2 * kTokens);
  std::iota(identity.begin(), identity.end(), 0);
  GuardedMatrix<float> out(kTokens, kHidden);
  ASSERT_TRUE(
      mpg_test::run_permute_grad(grad, identity, 2, Mode::kDropless, out, reference_options())
          .ok());
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t h = 0; h < kHidden; ++h) {
      const float sum = grad.at(2 * t, h) + grad.at(2 * t + 1, h);
      if (std::isnan(sum)) {
        ASSERT_TRUE(std::isnan(out.at(t, h)));
      } else {
        ASSERT_EQ(mpg_test::bits_of(out.at(t, h)), mpg_test::bits_of(sum)) << t << ", " << h;
      }
    }
  }
}

}  // namespace
