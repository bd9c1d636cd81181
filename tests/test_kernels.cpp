// The SIMD kernels one by one: each ISA's conversion helpers against scalar definitions over
// every 16-bit pattern and a dense set of float patterns (rounding boundaries, ties, subnormals,
// overflow, inf, NaN), and each kernel called directly (streaming stores forced on and off) on
// ragged widths, misaligned bases and row strides, bit for bit against the reference path.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mpg/mpg.hpp"
#include "test_util.hpp"

namespace {

using mpg::bfloat16;
using mpg::half;
using mpg::Isa;
using mpg::Mode;
using mpg_test::bits_of;
using mpg_test::GuardedMatrix;

// ---------------------------------------------------------------------------------------------
// Scalar definitions the vector conversions must match.

// IEEE binary16 -> binary32 from the format's definition (not through any library conversion).
[[maybe_unused]] float half_bits_to_float(uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa == 0 ? sign * INFINITY : std::copysign(NAN, sign);
  return sign * std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
}

// Float bit patterns where narrowing can go wrong: for every sign and exponent, mantissas at and
// around each power of two (each bit position is the rounding point for some exponent of fp16
// subnormals, and bit 15 is bf16's), with the kept lsb odd and even; plus a fixed-seed sample.
[[maybe_unused]] std::vector<uint32_t> narrowing_patterns() {
  std::vector<uint32_t> patterns;
  for (uint32_t sign_exp = 0; sign_exp < 512; ++sign_exp) {
    const uint32_t high = sign_exp << 23;
    for (int b = 0; b < 23; ++b) {
      const uint32_t p = uint32_t{1} << b;
      for (uint32_t m : {p, p - 1, p + 1, p | (p << 1), (p | (p << 1)) - 1, (p | (p << 1)) + 1}) {
        patterns.push_back(high | (m & 0x7FFFFF));
      }
    }
    patterns.push_back(high | 0x7FFFFF);
  }
  std::mt19937 rng(20261202);
  for (int i = 0; i < 200000; ++i) patterns.push_back(static_cast<uint32_t>(rng()));
  // Whole vectors only: pad to a multiple of 16 lanes.
  while (patterns.size() % 16 != 0) patterns.push_back(0);
  return patterns;
}

template <class T>
T from_bits(uint16_t b) {
  return Eigen::numext::bit_cast<T>(b);
}

[[maybe_unused]] float float_from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// ---------------------------------------------------------------------------------------------
// The vector helpers, wrapped in functions of their own target so the intrinsics inline.

#if MPG_HAVE_X86_KERNELS
namespace avx512 = mpg::detail::avx512;
namespace avx2 = mpg::detail::avx2;

template <class T>
MPG_TARGET_AVX512 void widen_avx512(const T* in, float* out, size_t n) {
  for (size_t i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, avx512::load16(in + i));
}
template <class T>
MPG_TARGET_AVX512 void narrow_avx512(const float* in, T* out, size_t n) {
  for (size_t i = 0; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        avx512::narrow16<T>(_mm512_loadu_ps(in + i)));
  }
}
template <class T>
MPG_TARGET_AVX2 void widen_avx2(const T* in, float* out, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, avx2::load8(in + i));
}
template <class T>
MPG_TARGET_AVX2 void narrow_avx2(const float* in, T* out, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     avx2::narrow8<T>(_mm256_loadu_ps(in + i)));
  }
}

template <class T>
void widen(Isa isa, const std::vector<T>& in, std::vector<float>& out) {
  out.assign(in.size(), 0.0f);
  if (isa == Isa::kAvx512) {
    widen_avx512(in.data(), out.data(), in.size());
  } else {
    widen_avx2(in.data(), out.data(), in.size());
  }
}
template <class T>
void narrow(Isa isa, const std::vector<float>& in, std::vector<T>& out) {
  out.assign(in.size(), T(0.0f));
  if (isa == Isa::kAvx512) {
    narrow_avx512(in.data(), out.data(), in.size());
  } else {
    narrow_avx2(in.data(), out.data(), in.size());
  }
}

class Conversions : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!mpg::detail::cpu_supports(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << mpg::name_of(GetParam());
    }
  }
};

TEST_P(Conversions, WidenEveryBFloat16Pattern) {
  std::vector<bfloat16> in;
  for (uint32_t b = 0; b < 65536; ++b) in.push_back(from_bits<bfloat16>(static_cast<uint16_t>(b)));
  std::vector<float> got;
  widen(GetParam(), in, got);
  for (uint32_t b = 0; b < 65536; ++b) {
    ASSERT_EQ(bits_of(got[b]), b << 16) << "bfloat16 bits " << b;  // bf16 is fp32's top half
  }
}

TEST_P(Conversions, WidenEveryFloat16Pattern) {
  std::vector<half> in;
  for (uint32_t b = 0; b < 65536; ++b) in.push_back(from_bits<half>(static_cast<uint16_t>(b)));
  std::vector<float> got;
  widen(GetParam(), in, got);
  for (uint32_t b = 0; b < 65536; ++b) {
    const float want = half_bits_to_float(static_cast<uint16_t>(b));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got[b])) << "float16 bits " << b;
      ASSERT_EQ(std::signbit(got[b]), std::signbit(want)) << "float16 bits " << b;
    } else {
      ASSERT_EQ(bits_of(got[b]), bits_of(want)) << "float16 bits " << b;
    }
  }
}

// The scalar conversions of Eigen (what the reference path stores with) round to nearest even
// and keep subnormals; the vector narrowing must give the same bits. NaN must stay NaN of the
// same sign (bf16 even matches Eigen's quiet NaN exactly).
template <class T>
void expect_narrowing_matches_scalar(Isa isa) {
  const std::vector<uint32_t> patterns = narrowing_patterns();
  std::vector<float> in;
  for (uint32_t b : patterns) in.push_back(float_from_bits(b));
  std::vector<T> got;
  narrow(isa, in, got);
  for (size_t i = 0; i < in.size(); ++i) {
    const T want = static_cast<T>(in[i]);
    if (std::isnan(in[i]) && !std::is_same_v<T, bfloat16>) {
      ASSERT_TRUE(mpg_test::is_nan(got[i])) << "float bits " << patterns[i];
      ASSERT_EQ(bits_of(got[i]) >> 15, bits_of(want) >> 15) << "float bits " << patterns[i];
    } else {
      ASSERT_EQ(bits_of(got[i]), bits_of(want)) << "float bits " << patterns[i];
    }
  }
}

TEST_P(Conversions, NarrowToBFloat16RoundsToNearestEven) {
  expect_narrowing_matches_scalar<bfloat16>(GetParam());
}

TEST_P(Conversions, NarrowToFloat16RoundsToNearestEven) {
  expect_narrowing_matches_scalar<half>(GetParam());
}

// Worked by hand: the cases a DAZ/FTZ conversion (VCVTNEPS2BF16) or a truncation gets wrong.
TEST_P(Conversions, NarrowToBFloat16HandWorked) {
  const std::vector<std::pair<uint32_t, uint16_t>> cases = {
      {0x3F808000, 0x3F80},  // tie, kept lsb even: down
      {0x3F818000, 0x3F82},  // tie, kept lsb odd: up
      {0x3F808001, 0x3F81},  // above the tie: up
      {0x00008000, 0x0000},  // subnormal tie to even zero
      {0x00018000, 0x0002},  // subnormal tie up to even
      {0x0000C000, 0x0001},  // subnormal rounds up to the smallest bf16 subnormal
      {0x80010000, 0x8001},  // negative subnormal kept exactly
      {0x7F7FFFFF, 0x7F80},  // FLT_MAX overflows to +inf
      {0xFF7F8000, 0xFF80},  // tie at the top rounds to even: -inf
      {0x7F800000, 0x7F80},  // +inf
      {0xFF800001, 0xFFC0},  // signalling -NaN: quiet -NaN, not -inf
      {0x7FFFFFFF, 0x7FC0},  // NaN whose rounding would carry into the sign
  };
  std::vector<float> in;
  for (const auto& c : cases) in.push_back(float_from_bits(c.first));
  while (in.size() % 16 != 0) in.push_back(0.0f);
  std::vector<bfloat16> got;
  narrow(GetParam(), in, got);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(bits_of(got[i]), cases[i].second) << "float bits " << cases[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, Conversions, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         [](const auto& info) { return std::string(mpg::name_of(info.param)); });
#endif  // MPG_HAVE_X86_KERNELS

// ---------------------------------------------------------------------------------------------
// Whole kernels, called directly so that streaming stores can be forced on small outputs.

template <class T, class I, Mode M>
void run_kernel(Isa isa, const GuardedMatrix<T>& grad, const std::vector<I>& indices, int64_t topk,
                GuardedMatrix<T>& out, bool streaming_stores) {
  mpg::detail::GatherSumArgs<T, I> args;
  args.grad = grad.data();
  args.grad_rows = grad.rows();
  args.grad_stride = grad.row_stride();
  args.indices = indices.data();
  args.topk = topk;
  args.out = out.data();
  args.out_stride = out.row_stride();
  args.hidden = out.cols();
  args.streaming_stores = streaming_stores;
  mpg::detail::select_kernel<T, I, M>(isa)(args, 0, out.rows());
}

// "" when got has want's bits everywhere, NaN only needing to be NaN: when both operands of an
// add are NaN, which payload survives depends on the operand order the compiler picked, and
// docs/contract.md section 3 leaves NaN bits unspecified.
template <class T>
std::string first_difference_nan_as_nan(const GuardedMatrix<T>& got, const GuardedMatrix<T>& want) {
  for (int64_t r = 0; r < want.rows(); ++r) {
    for (int64_t c = 0; c < want.cols(); ++c) {
      const T g = got.at(r, c);
      const T w = want.at(r, c);
      if (bits_of(g) == bits_of(w) || (mpg_test::is_nan(g) && mpg_test::is_nan(w))) continue;
      return "at [" + std::to_string(r) + ", " + std::to_string(c) + "]: got bits " +
             std::to_string(bits_of(g)) + ", want bits " + std::to_string(bits_of(w));
    }
  }
  return "";
}

struct Layout {
  bool misaligned;  // bases one element past a 64-byte boundary
  int64_t padding;  // row stride = hidden + padding
};

// Random routing and values (specials included) for one shape; the kernel's out must have the
// reference's bits and leave the guards and row gaps alone.
template <class T, class I, Mode M>
void expect_kernel_matches_reference(Isa isa, int64_t tokens, int64_t topk, int64_t experts,
                                     int64_t hidden, Layout layout, bool streaming,
                                     std::mt19937_64& rng) {
  const auto routing = mpg_test::make_routing<I>(rng, M, tokens, topk, experts);
  GuardedMatrix<T> grad(routing.grad_rows, hidden, hidden + layout.padding, layout.misaligned);
  mpg_test::fill_random(grad, rng, mpg_test::Values::kWithSpecials);
  GuardedMatrix<T> want(tokens, hidden, hidden + layout.padding, layout.misaligned);
  GuardedMatrix<T> got(tokens, hidden, hidden + layout.padding, layout.misaligned);
  mpg::detail::reference_permute_grad<T, I, M>(grad.const_view(), routing.sorted_indices, topk,
                                               want.view());
  run_kernel<T, I, M>(isa, grad, routing.sorted_indices, topk, got, streaming);
  const std::string where = std::string(mpg::name_of(M)) + " hidden " + std::to_string(hidden) +
                            " topk " + std::to_string(topk) +
                            (layout.misaligned ? " misaligned" : " aligned") + " padding " +
                            std::to_string(layout.padding) + (streaming ? " streaming" : "");
  ASSERT_EQ(first_difference_nan_as_nan(got, want), "") << where;
  ASSERT_TRUE(got.guards_intact()) << where;
  ASSERT_TRUE(got.row_gaps_untouched()) << where;
}

class Kernels : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!mpg::detail::cpu_supports(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << mpg::name_of(GetParam());
    }
  }

  // Every width 1..70 (around each vector width and the AVX2 block), then around the AVX-512
  // block of 128 columns and a few multiples, where whole lines are stored (streamed or not).
  static std::vector<int64_t> widths() {
    std::vector<int64_t> w;
    for (int64_t h = 1; h <= 70; ++h) w.push_back(h);
    for (int64_t h : {127, 128, 129, 160, 255, 256, 257, 400, 1031}) w.push_back(h);
    return w;
  }
};

TEST_P(Kernels, RaggedWidthsLayoutsAndStreamingMatchReference) {
  std::mt19937_64 rng(7);
  for (mpg::DType dtype : mpg_test::kElementDTypes) {
    mpg_test::with_element_type(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t hidden : widths()) {
        for (Layout layout : {Layout{false, 0}, Layout{true, 5}}) {
          for (bool streaming : {false, true}) {
            SCOPED_TRACE(mpg_test::short_name(dtype));
            expect_kernel_matches_reference<T, int32_t, Mode::kDropless>(
                GetParam(), 3, 3, 5, hidden, layout, streaming, rng);
            expect_kernel_matches_reference<T, int64_t, Mode::kPadded>(GetParam(), 3, 3, 5, hidden,
                                                                       layout, streaming, rng);
          }
        }
      }
    });
  }
}

// More copies per token than KeptRows holds inline (32): the heap-backed list.
TEST_P(Kernels, LargeTopKMatchesReference) {
  std::mt19937_64 rng(11);
  for (int64_t hidden : {1, 17, 130}) {
    expect_kernel_matches_reference<bfloat16, int32_t, Mode::kDropless>(
        GetParam(), 4, 40, 48, hidden, Layout{false, 0}, false, rng);
    expect_kernel_matches_reference<float, int32_t, Mode::kPadded>(GetParam(), 4, 40, 48, hidden,
                                                                   Layout{true, 3}, true, rng);
  }
}

// Worked by hand: a lone -0.0 in copy 0 stays -0.0 (assigned, not added to +0); a token whose
// copies were all dropped gets +0.0; kept copies after a dropped one are summed in order; a
// lone -0.0 after a dropped copy 0 is added to +0.0 and gives +0.0.
TEST_P(Kernels, DroppedCopiesHandWorked) {
  const int64_t hidden = 131;  // a full AVX-512 block plus a masked tail
  GuardedMatrix<float> grad(3, hidden);
  for (int64_t h = 0; h < hidden; ++h) {
    grad.at(0, h) = -0.0f;
    grad.at(1, h) = 1.5f;
    grad.at(2, h) = 0.25f;
  }
  // K = 3, padded. Token 3: copy 0 dropped, so the sum starts at +0 and +0 + -0 = +0.
  const std::vector<int32_t> indices = {0, -1, -1, -1, -1, -1, -1, 1, 2, -1, 0, -1};
  GuardedMatrix<float> out(4, hidden);
  run_kernel<float, int32_t, Mode::kPadded>(GetParam(), grad, indices, 3, out, false);
  for (int64_t h = 0; h < hidden; ++h) {
    ASSERT_EQ(bits_of(out.at(0, h)), 0x80000000u) << h;
    ASSERT_EQ(bits_of(out.at(1, h)), 0x00000000u) << h;
    ASSERT_EQ(out.at(2, h), 1.75f) << h;
    ASSERT_EQ(bits_of(out.at(3, h)), 0x00000000u) << h;
  }
}

// Subnormal sums must not be flushed: 2 x the smallest bf16 subnormal is exactly 2 x it.
TEST_P(Kernels, SubnormalSumsAreKept) {
  const int64_t hidden = 200;
  GuardedMatrix<bfloat16> grad(2, hidden);
  for (int64_t h = 0; h < hidden; ++h) {
    grad.at(0, h) = from_bits<bfloat16>(0x0001);
    grad.at(1, h) = from_bits<bfloat16>(0x0001);
  }
  const std::vector<int32_t> indices = {1, 0};
  GuardedMatrix<bfloat16> out(1, hidden);
  run_kernel<bfloat16, int32_t, Mode::kDropless>(GetParam(), grad, indices, 2, out, true);
  for (int64_t h = 0; h < hidden; ++h) ASSERT_EQ(bits_of(out.at(0, h)), 0x0002) << h;
}

INSTANTIATE_TEST_SUITE_P(Isa, Kernels, ::testing::Values(Isa::kPortable, Isa::kAvx2, Isa::kAvx512),
                         [](const auto& info) { return std::string(mpg::name_of(info.param)); });

}  // namespace
