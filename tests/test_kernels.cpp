// The kernel sets one by one, every row of the kernel table (kernel_table.hpp): each set's
// conversions against scalar definitions over every 16-bit pattern and a dense set of float
// patterns (rounding boundaries, ties, subnormals, overflow, inf, NaN), and each set's
// gather-sum called directly (streaming stores forced on and off) over dtypes x index types x
// modes x orders x weights x ragged widths x K x layouts x threads, bit for bit against the
// reference path (reference_gather_sum); and each set's row copies (MoeTokenPermute) byte for
// byte.
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
  // Not a multiple of any vector width: the partial (masked or buffered) tail is checked too.
  patterns.push_back(0x00018000);
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
// The kernel table's rows, by run-time Isa.

// f(Set{}) for the row of isa.
template <class F>
void with_kernel_set(Isa isa, F&& f) {
  const bool found = mpg::detail::find_kernel_set([&](auto set) {
    if (set.kIsa != isa) return false;
    f(set);
    return true;
  });
  ASSERT_TRUE(found) << mpg::name_of(isa);
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) {
  return mpg::name_of(info.param);
}

template <class T>
void widen(Isa isa, const std::vector<T>& in, std::vector<float>& out) {
  out.assign(in.size(), 0.0f);
  with_kernel_set(isa, [&](auto set) {
    decltype(set)::template kWiden<T>(in.data(), out.data(), static_cast<int64_t>(in.size()));
  });
}
template <class T>
void narrow(Isa isa, const std::vector<float>& in, std::vector<T>& out) {
  out.assign(in.size(), T(0.0f));
  with_kernel_set(isa, [&](auto set) {
    decltype(set)::template kNarrow<T>(in.data(), out.data(), static_cast<int64_t>(in.size()));
  });
}

// A test run once per kernel set of the table, skipped where the CPU lacks the set.
class PerKernelSet : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!mpg::detail::cpu_supports(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << mpg::name_of(GetParam());
    }
  }
};

class Conversions : public PerKernelSet {};

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
  if (isa == Isa::kPortable) GTEST_SKIP() << "the portable set narrows with these very conversions";
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
  std::vector<bfloat16> got;
  narrow(GetParam(), in, got);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(bits_of(got[i]), cases[i].second) << "float bits " << cases[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, Conversions, ::testing::ValuesIn(mpg_test::kernel_table_isas()),
                         isa_param_name);

// ---------------------------------------------------------------------------------------------
// Whole kernels, called directly so that streaming stores can be forced on small outputs.

using mpg::detail::Order;
using mpg::detail::WeightsView;

// Per-copy weights [tokens, topk] of one dtype, rows topk + 2 apart (a gap the kernels must
// skip): random values with about 1/6 zeros (+0 and -0, which drop the copy), 1/24 NaN (kept)
// and a few subnormals.
struct RandomWeights {
  mpg::DType dtype = mpg::DType::kFloat32;
  int64_t row_stride = 0;
  std::vector<float> f32;
  std::vector<half> f16;
  std::vector<bfloat16> bf16;

  // exact_products: router-like weights, +-[2^-9, 1) and zeros, no NaN: in fp16 or bf16 their
  // products with fp16 or bf16 tokens are exact (product_is_exact), so the kernels may fuse.
  RandomWeights(std::mt19937_64& rng, mpg::DType dtype_, int64_t tokens, int64_t topk,
                bool exact_products = false)
      : dtype(dtype_), row_stride(topk + 2) {
    const auto n = static_cast<size_t>(tokens * row_stride);
    for (size_t i = 0; i < n; ++i) {
      const int kind = std::uniform_int_distribution<int>(0, 23)(rng);
      float v = mpg_test::random_value<float>(rng, mpg_test::Values::kNormal);
      if (exact_products) {
        v = std::uniform_real_distribution<float>(0x1p-9f, 1.0f)(rng) * (kind % 2 ? -1.0f : 1.0f);
        if (kind < 2) v = 0.0f;
      } else {
        if (kind < 2) v = 0.0f;
        if (kind >= 2 && kind < 4) v = -0.0f;
        if (kind == 4) v = NAN;
        if (kind == 5) v = 1e-40f;  // a float subnormal; 0 or subnormal after narrowing
      }
      f32.push_back(v);
      f16.push_back(half(v));
      bf16.push_back(bfloat16(v));
    }
  }
  WeightsView view() const {
    WeightsView w;
    w.dtype = dtype;
    w.row_stride = row_stride;
    w.data = dtype == mpg::DType::kFloat32   ? static_cast<const void*>(f32.data())
             : dtype == mpg::DType::kFloat16 ? static_cast<const void*>(f16.data())
                                             : static_cast<const void*>(bf16.data());
    return w;
  }
};

// f(std::integral_constant<Order, O>{}, std::bool_constant<kWeighted>{}) for run-time values.
template <class F>
void with_order(Order order, bool weighted, F&& f) {
  const auto with_weights = [&](auto o) {
    if (weighted) {
      f(o, std::true_type{});
    } else {
      f(o, std::false_type{});
    }
  };
  if (order == Order::kSequential) {
    with_weights(std::integral_constant<Order, Order::kSequential>{});
  } else {
    with_weights(std::integral_constant<Order, Order::kBinaryBins>{});
  }
}

std::string order_name(Order order, bool weighted) {
  return std::string(order == Order::kSequential ? "sequential" : "binary-bins") +
         (weighted ? " weighted" : "");
}

template <class T, class I, Mode M, Order O, bool kWeighted>
void run_kernel(Isa isa, const GuardedMatrix<T>& grad, const std::vector<I>& indices, int64_t topk,
                WeightsView weights, GuardedMatrix<T>& out, bool streaming_stores) {
  mpg::detail::GatherSumArgs<T, I> args;
  args.grad = grad.data();
  args.grad_rows = grad.rows();
  args.grad_stride = grad.row_stride();
  args.indices = indices.data();
  args.topk = topk;
  args.weights = weights;
  args.out = out.data();
  args.out_stride = out.row_stride();
  args.hidden = out.cols();
  args.streaming_stores = streaming_stores;
  mpg::detail::select_gather_sum<T, I, M, O, kWeighted>(isa)(args, 0, out.rows());
}

// The unweighted sequential kernel: what permute_grad runs.
template <class T, class I, Mode M>
void run_kernel(Isa isa, const GuardedMatrix<T>& grad, const std::vector<I>& indices, int64_t topk,
                GuardedMatrix<T>& out, bool streaming_stores) {
  run_kernel<T, I, M, Order::kSequential, false>(isa, grad, indices, topk, WeightsView{}, out,
                                                 streaming_stores);
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

struct Shape {
  int64_t tokens;
  int64_t topk;
  int64_t hidden;
  Layout layout;
};

// One sweep point: random routing and values (specials included), optional random weights of
// weight_dtype; the kernel's out (or, when num_threads > 0, fast_gather_sum's with that many
// threads) must have the reference's bits and leave the guards and row gaps alone.
template <class T, class I, Mode M, Order O, bool kWeighted>
void expect_matches_reference(Isa isa, Shape shape, mpg::DType weight_dtype, bool streaming,
                              int num_threads, std::mt19937_64& rng, bool exact_products = false) {
  const Layout layout = shape.layout;
  const int64_t stride = shape.hidden + layout.padding;
  const auto routing = mpg_test::make_routing<I>(rng, M, shape.tokens, shape.topk, shape.topk + 3);
  GuardedMatrix<T> grad(routing.grad_rows, shape.hidden, stride, layout.misaligned);
  mpg_test::fill_random(grad, rng, mpg_test::Values::kWithSpecials);
  const RandomWeights weights(rng, weight_dtype, shape.tokens, shape.topk, exact_products);
  const WeightsView w = kWeighted ? weights.view() : WeightsView{};
  GuardedMatrix<T> want(shape.tokens, shape.hidden, stride, layout.misaligned);
  GuardedMatrix<T> got(shape.tokens, shape.hidden, stride, layout.misaligned);
  mpg::detail::reference_gather_sum<T, I, M, O, kWeighted>(
      grad.const_view(), routing.sorted_indices, shape.topk, w, want.view());
  if (num_threads == 0) {
    run_kernel<T, I, M, O, kWeighted>(isa, grad, routing.sorted_indices, shape.topk, w, got,
                                      streaming);
  } else {
    mpg::Options options;
    options.isa = isa;
    options.num_threads = num_threads;
    mpg::detail::fast_gather_sum<T, I, M, O, kWeighted>(grad.const_view(), routing.sorted_indices,
                                                        shape.topk, w, got.view(), options);
  }
  const std::string where = std::string(mpg::name_of(mpg::dtype_of<T>())) + " " + mpg::name_of(M) +
                            " " + order_name(O, kWeighted) +
                            (kWeighted ? std::string(" p ") + mpg::name_of(weight_dtype) : "") +
                            " tokens " + std::to_string(shape.tokens) + " topk " +
                            std::to_string(shape.topk) + " hidden " + std::to_string(shape.hidden) +
                            (layout.misaligned ? " misaligned" : " aligned") + " padding " +
                            std::to_string(layout.padding) + (streaming ? " streaming" : "") +
                            " threads " + std::to_string(num_threads);
  ASSERT_EQ(first_difference_nan_as_nan(got, want), "") << where;
  ASSERT_TRUE(got.guards_intact()) << where;
  ASSERT_TRUE(got.row_gaps_untouched()) << where;
}

constexpr mpg::DType kDTypes[] = {mpg::DType::kFloat32, mpg::DType::kFloat16,
                                  mpg::DType::kBFloat16};

// f(TypeTag<T>{}) for the three float dtypes (int8 is a copy-only dtype: no gather-sum).
template <class F>
void with_float_type(mpg::DType dtype, F&& f) {
  if (dtype == mpg::DType::kFloat32) f(mpg::detail::TypeTag<float>{});
  if (dtype == mpg::DType::kFloat16) f(mpg::detail::TypeTag<half>{});
  if (dtype == mpg::DType::kBFloat16) f(mpg::detail::TypeTag<bfloat16>{});
}

// Every (T, I, M, order, weighted) combination at one shape: I and M alternate with the dtype so
// that each appears with every order.
void sweep_point(Isa isa, Shape shape, bool streaming, int num_threads, std::mt19937_64& rng) {
  int variant = 0;
  for (mpg::DType dtype : kDTypes) {
    with_float_type(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (Order order : {Order::kSequential, Order::kBinaryBins}) {
        for (bool weighted : {false, true}) {
          const mpg::DType weight_dtype = kDTypes[(variant + 1) % 3];
          with_order(order, weighted, [&](auto o, auto wt) {
            constexpr Order kOrder = decltype(o)::value;
            constexpr bool kWeighted = decltype(wt)::value;
            if (variant % 2 == 0) {
              expect_matches_reference<T, int32_t, Mode::kDropless, kOrder, kWeighted>(
                  isa, shape, weight_dtype, streaming, num_threads, rng);
            } else {
              expect_matches_reference<T, int64_t, Mode::kPadded, kOrder, kWeighted>(
                  isa, shape, weight_dtype, streaming, num_threads, rng);
            }
          });
          ++variant;
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    });
    if (::testing::Test::HasFatalFailure()) return;
  }
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

// Widths x layouts x streaming, K cycling through the small values whose bin counts differ.
TEST_P(Kernels, RaggedWidthsLayoutsAndStreamingMatchReference) {
  std::mt19937_64 rng(7);
  const int64_t topks[] = {1, 2, 3, 5, 6, 8};
  int i = 0;
  for (int64_t hidden : widths()) {
    for (Layout layout : {Layout{false, 0}, Layout{true, 5}}) {
      for (bool streaming : {false, true}) {
        sweep_point(GetParam(), Shape{3, topks[i++ % 6], hidden, layout}, streaming, 0, rng);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Every K from 1 to 9 and large ones: more copies than TokenPlan holds inline (32), the 64 bins
// of K >= 128, and K = 130, whose bin 0 collects four copies.
TEST_P(Kernels, TopKMatchesReference) {
  std::mt19937_64 rng(11);
  for (int64_t topk : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33, 127, 128, 130}) {
    for (int64_t hidden : {1, 17, 130}) {
      sweep_point(GetParam(), Shape{4, topk, hidden, Layout{hidden == 17, 3}}, hidden == 130, 0,
                  rng);
      if (HasFatalFailure()) return;
    }
  }
}

// Weights whose products with the tokens are exact, so that the sets with a fused multiply-add
// use it (sum_group's kFused): the bits are still the reference's, around the block widths,
// misaligned and strided, streamed or not, every K up to 9.
TEST_P(Kernels, FusedWeightedSumsMatchReference) {
  std::mt19937_64 rng(17);
  int i = 0;
  for (int64_t hidden : {128, 129, 255, 256, 300, 1031}) {
    for (Layout layout : {Layout{false, 0}, Layout{true, 5}}) {
      for (bool streaming : {false, true}) {
        const Shape shape{5, 1 + i % 9, hidden, layout};
        const mpg::DType weight_dtype = i % 2 ? mpg::DType::kFloat16 : mpg::DType::kBFloat16;
        expect_matches_reference<half, int32_t, Mode::kDropless, Order::kSequential, true>(
            GetParam(), shape, weight_dtype, streaming, 0, rng, true);
        expect_matches_reference<bfloat16, int64_t, Mode::kPadded, Order::kSequential, true>(
            GetParam(), shape, weight_dtype, streaming, 0, rng, true);
        ++i;
        if (HasFatalFailure()) return;
      }
    }
  }
}

// product_is_exact at its edges, worked by hand (fp16: 11 significant bits, smallest subnormal
// 2^-24, largest 65504 = 2^16 - 2^5; bf16: 8 bits, 2^-133, 2^128 - 2^120; fp32: 24 bits,
// 2^-149, 2^128 - 2^104).
TEST(ProductIsExact, Edges) {
  using mpg::detail::product_is_exact;
  // fp16: 13 bits of w at most; w's lowest bit at 2^-125 or above; |w| * 65504 <= FLT_MAX.
  EXPECT_TRUE(product_is_exact<half>(1.0f + 0x1p-12f));
  EXPECT_FALSE(product_is_exact<half>(1.0f + 0x1p-13f));
  EXPECT_TRUE(product_is_exact<half>(-0x1p-125f));
  EXPECT_FALSE(product_is_exact<half>(0x1p-126f));
  EXPECT_FALSE(product_is_exact<half>(0x1p-149f));  // an fp32 subnormal
  EXPECT_TRUE(product_is_exact<half>(0x1p112f));    // (2^16 - 2^5) * 2^112 <= 2^128 - 2^104
  EXPECT_FALSE(product_is_exact<half>(0x1p113f));
  EXPECT_FALSE(product_is_exact<half>(0x1.8p112f));
  // bf16: 16 bits of w at most; w's lowest bit at 2^-16 or above; |w| * (2^128 - 2^120) <= FLT_MAX.
  EXPECT_TRUE(product_is_exact<bfloat16>(1.0f + 0x1p-15f));
  EXPECT_FALSE(product_is_exact<bfloat16>(1.0f + 0x1p-16f));
  EXPECT_TRUE(product_is_exact<bfloat16>(0x1p-16f));
  EXPECT_FALSE(product_is_exact<bfloat16>(0x1p-17f));
  EXPECT_TRUE(product_is_exact<bfloat16>(0x1p-9f));  // the smallest bf16 weight that passes
  EXPECT_FALSE(product_is_exact<bfloat16>(2.0f));
  for (float w : {0.0f, -0.0f, INFINITY, -INFINITY, NAN}) {
    EXPECT_FALSE(product_is_exact<half>(w)) << w;
    EXPECT_FALSE(product_is_exact<bfloat16>(w)) << w;
  }
  EXPECT_FALSE(product_is_exact<float>(1.0f));  // fp32 tokens: never
}

// Soundness, independently of how product_is_exact decides: for weights it accepts (drawn from
// every fp16 and bf16 value, and random fp32 values of few bits), every finite x of T times w
// in fp32 equals the product in fp64 (exact there: 24 + 24 < 53 bits).
template <class T>
void expect_accepted_products_exact(std::mt19937_64& rng) {
  std::vector<float> accepted;
  for (uint32_t b = 0; b < 0x10000u; b += 7) {
    const auto w16 = static_cast<uint16_t>(b);
    float w = 0.0f;
    if (std::is_same_v<T, half>) {
      w = static_cast<float>(Eigen::numext::bit_cast<half>(w16));
    } else {
      w = static_cast<float>(Eigen::numext::bit_cast<bfloat16>(w16));
    }
    if (mpg::detail::product_is_exact<T>(w)) accepted.push_back(w);
  }
  for (int i = 0; i < 2000; ++i) {
    const int bits = std::uniform_int_distribution<int>(1, 24)(rng);
    const int exponent = std::uniform_int_distribution<int>(-149, 127)(rng);
    const auto significand = static_cast<float>(
        std::uniform_int_distribution<uint32_t>(0, (1u << bits) - 1)(rng) | (1u << (bits - 1)));
    const float w = std::ldexp(significand, exponent - bits + 1);
    if (std::isfinite(w) && w != 0.0f && mpg::detail::product_is_exact<T>(w)) accepted.push_back(w);
  }
  ASSERT_GT(accepted.size(), 300u);  // bf16: exponents -9 to 0 pass, about 370 of the values
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const auto x = Eigen::numext::bit_cast<T>(static_cast<uint16_t>(b));
    const auto xf = static_cast<float>(x);
    if (!std::isfinite(xf)) continue;
    for (float w : accepted) {
      const float product = mpg::detail::product_fp32(xf, w);
      ASSERT_EQ(static_cast<double>(product), static_cast<double>(xf) * static_cast<double>(w))
          << "x bits " << b << " w " << w;
    }
  }
}

TEST(ProductIsExact, AcceptedProductsAreExact) {
  std::mt19937_64 rng(19);
  expect_accepted_products_exact<half>(rng);
  expect_accepted_products_exact<bfloat16>(rng);
}

// Through fast_gather_sum: the thread partition never changes the bits.
TEST_P(Kernels, ThreadCountsMatchReference) {
  std::mt19937_64 rng(13);
  for (int threads : {1, 2, 3, 7}) {
    sweep_point(GetParam(), Shape{37, 6, 300, Layout{false, 0}}, false, threads, rng);
    if (HasFatalFailure()) return;
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

// Worked by hand, binary bins with dropped copies, K = 4, all values -0.0: copy 2 (the head of
// bin 1) dropped, so bin 1 = +0 + x3 = +0 and the result (-0 + -0) + (+0) = +0, where the
// sequential order over the kept copies would give -0. With copy 2 kept the result is -0.
TEST_P(Kernels, BinaryBinsStartFromPlusZeroWhenTheHeadIsDropped) {
  const int64_t hidden = 133;
  GuardedMatrix<float> grad(4, hidden);
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t h = 0; h < hidden; ++h) grad.at(r, h) = -0.0f;
  }
  const std::vector<int32_t> indices = {0, 1, -1, 3, 0, 1, 2, 3};
  GuardedMatrix<float> out(2, hidden);
  run_kernel<float, int32_t, Mode::kPadded, Order::kBinaryBins, false>(GetParam(), grad, indices, 4,
                                                                       WeightsView{}, out, false);
  for (int64_t h = 0; h < hidden; ++h) {
    ASSERT_EQ(bits_of(out.at(0, h)), 0x00000000u) << h;
    ASSERT_EQ(bits_of(out.at(1, h)), 0x80000000u) << h;
  }
}

// Worked by hand, weights: a zero weight (+0 or -0) drops a copy whose row holds Inf or NaN, a
// NaN weight is kept, and the product is rounded to fp32 before it is added (no FMA):
// x1 * p1 = (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds (tie to even) to 1 + 2^-11, and
// -(1 + 2^-11) + that = +0 exactly, where a fused multiply-add would give 2^-24.
TEST_P(Kernels, WeightsHandWorked) {
  const int64_t hidden = 135;
  const float a = 1.0f + 0x1p-12f;
  GuardedMatrix<float> grad(4, hidden);
  for (int64_t h = 0; h < hidden; ++h) {
    grad.at(0, h) = -(1.0f + 0x1p-11f);
    grad.at(1, h) = a;
    grad.at(2, h) = INFINITY;
    grad.at(3, h) = NAN;
  }
  // K = 4, dropless. p[t] = {1, a, +0, -0}: Inf and NaN rows dropped by their zero weights.
  // Token 1: {NaN weight on row 1, 1, 0, 0}: NaN. Token 2: {0 (drops row 0), 2, 0, 0}: the sum
  // starts from +0 (copy 0 dropped) and adds 2a rounded.
  const std::vector<int32_t> indices = {0, 1, 2, 3, 1, 0, 2, 3, 0, 1, 2, 3};
  const std::vector<float> p = {1.0f, a,    0.0f, -0.0f, NAN,   1.0f,
                                0.0f, 0.0f, 0.0f, 2.0f,  -0.0f, 0.0f};
  WeightsView w;
  w.data = p.data();
  w.dtype = mpg::DType::kFloat32;
  w.row_stride = 4;
  GuardedMatrix<float> out(3, hidden);
  run_kernel<float, int32_t, Mode::kDropless, Order::kSequential, true>(GetParam(), grad, indices,
                                                                        4, w, out, false);
  for (int64_t h = 0; h < hidden; ++h) {
    ASSERT_EQ(bits_of(out.at(0, h)), 0x00000000u) << h;
    ASSERT_TRUE(std::isnan(out.at(1, h))) << h;
    ASSERT_EQ(out.at(2, h), 2.0f * a) << h;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, Kernels, ::testing::ValuesIn(mpg_test::kernel_table_isas()),
                         isa_param_name);

// ---------------------------------------------------------------------------------------------
// MoeTokenPermute's row copies (kCopyRows), each set's called directly: rows of odd byte lengths
// at every kind of destination offset within a cache line, from an unaligned source too,
// streamed and not. Every byte must arrive unchanged, whatever it is as fp32, fp16 or bf16
// (signaling and payload-carrying NaNs included), and no byte between or around the rows may
// change.

// A random row of bytes, with NaN bit patterns of each float type planted at odd offsets.
std::vector<uint8_t> nan_laden_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  const uint32_t fp32_nans[] = {0x7F800001u, 0xFF812345u, 0x7FC00000u, 0xFFFFFFFFu};
  const uint16_t half_nans[] = {0x7C01u, 0xFE00u, 0x7D55u};  // fp16: signaling, quiet, payload
  const uint16_t bf16_nans[] = {0x7F81u, 0xFFC1u};
  for (size_t at = 1; at + 4 <= n; at += 7) {
    switch (at % 3) {
      case 0: std::memcpy(&bytes[at], &fp32_nans[at % 4], 4); break;
      case 1: std::memcpy(&bytes[at], &half_nans[at % 3], 2); break;
      default: std::memcpy(&bytes[at], &bf16_nans[at % 2], 2); break;
    }
  }
  return bytes;
}

class CopyRows : public PerKernelSet {};

TEST_P(CopyRows, EveryByteVerbatimAtAnyAlignmentNothingElseWritten) {
  constexpr int64_t kLine = 64;
  constexpr uint8_t kGuard = 0xA5;
  // Two tokens, K = 2, 3 output rows: token 0 to rows 2 and 0, token 1 to row 1 (its rank 3 is
  // dropped).
  const std::vector<int32_t> ranks = {2, 0, 3, 1};
  std::mt19937 rng(20261203);
  for (const bool stream : {false, true}) {
    for (const int64_t bytes : {1, 3, 17, 63, 65, 127, 129, 255, 257, 319, 513, 1023, 4097}) {
      for (const int64_t dst_offset : {0, 1, 13, 31, 32, 33, 63}) {
        for (const int64_t src_offset : {0, 3}) {
          // Rows start dst_offset past a line, a guard gap of at least a line between them.
          const int64_t dst_stride = (bytes + kLine - 1) / kLine * kLine + kLine;
          const int64_t src_stride = bytes + 5;
          const std::vector<uint8_t> src_storage =
              nan_laden_bytes(static_cast<size_t>(src_offset + 2 * src_stride), rng);
          std::vector<uint8_t> storage(static_cast<size_t>(3 * dst_stride + 3 * kLine), kGuard);
          const auto base_misalignment = reinterpret_cast<uintptr_t>(storage.data()) % kLine;
          uint8_t* dst = storage.data() + (kLine - base_misalignment) + kLine + dst_offset;
          const uint8_t* src = src_storage.data() + src_offset;

          std::vector<uint8_t> expected = storage;
          for (int64_t copy = 0; copy < 4; ++copy) {
            const int32_t rank = ranks[static_cast<size_t>(copy)];
            if (rank >= 3) continue;
            std::memcpy(expected.data() + (dst - storage.data()) + rank * dst_stride,
                        src + copy / 2 * src_stride, static_cast<size_t>(bytes));
          }

          mpg::detail::TokenPermuteArgs<int32_t> args;
          args.tokens = src;
          args.tokens_stride = src_stride;
          args.row_bytes = bytes;
          args.topk = 2;
          args.num_tokens = 2;
          args.permuted = dst;
          args.permuted_stride = dst_stride;
          args.num_rows = 3;
          args.sorted_indices = const_cast<int32_t*>(ranks.data());
          args.streaming_stores = stream;
          with_kernel_set(GetParam(), [&](auto set) {
            decltype(set)::template kCopyRows<int32_t>(args, 0, 2);
          });
          if (storage != expected) {
            size_t at = 0;
            while (storage[at] == expected[at]) ++at;
            FAIL() << "stream " << stream << ", " << bytes << " bytes, dst offset " << dst_offset
                   << ", src offset " << src_offset << ": byte " << at << " is " << int{storage[at]}
                   << ", expected " << int{expected[at]};
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, CopyRows, ::testing::ValuesIn(mpg_test::kernel_table_isas()),
                         isa_param_name);

// ---------------------------------------------------------------------------------------------
// The table and the run-time choice, with CPU features masked (MPG_DISABLE_ISAS / the hook).

TEST(KernelTable, BestFirstEndingWithPortable) {
  const std::vector<Isa> isas = mpg_test::kernel_table_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), Isa::kPortable);
#if MPG_HAVE_X86_KERNELS
  EXPECT_EQ(isas, (std::vector<Isa>{Isa::kAvx512Bf16, Isa::kAvx512, Isa::kAvx2, Isa::kPortable}));
#elif MPG_HAVE_NEON_KERNELS
  EXPECT_EQ(isas, (std::vector<Isa>{Isa::kNeon, Isa::kPortable}));
#else
  EXPECT_EQ(isas, (std::vector<Isa>{Isa::kPortable}));
#endif
}

// On AArch64 the run-time choice is the NEON set (Advanced SIMD is mandatory there), unless a
// test or $MPG_DISABLE_ISAS masks it.
TEST(KernelTable, NeonIsChosenOnAArch64) {
#if MPG_HAVE_NEON_KERNELS
  EXPECT_TRUE(mpg::detail::cpu_supports(Isa::kNeon));
  if (!mpg::detail::isa_disabled(Isa::kNeon)) {
    EXPECT_EQ(mpg::detail::best_isa(), Isa::kNeon);
  }
#else
  EXPECT_FALSE(mpg::detail::cpu_supports(Isa::kNeon));  // no row in this build
#endif
}

TEST(KernelTable, MaskParsesIsaNames) {
  using mpg::detail::isa_bit;
  using mpg::detail::isa_mask_from_names;
  EXPECT_EQ(isa_mask_from_names(nullptr), 0u);
  EXPECT_EQ(isa_mask_from_names(""), 0u);
  EXPECT_EQ(isa_mask_from_names("avx512"), isa_bit(Isa::kAvx512));
  EXPECT_EQ(isa_mask_from_names("avx2,avx512"), isa_bit(Isa::kAvx2) | isa_bit(Isa::kAvx512));
  EXPECT_EQ(isa_mask_from_names("avx,avx5120,,avx2"), isa_bit(Isa::kAvx2));  // whole names only
  EXPECT_EQ(isa_mask_from_names("neon,avx512"), isa_bit(Isa::kNeon) | isa_bit(Isa::kAvx512));
  EXPECT_EQ(isa_mask_from_names("avx512_bf16"), isa_bit(Isa::kAvx512Bf16));
}

// CPUID leaf 1 signatures of real parts, decoded by hand (base family 0xF plus the extended
// family in bits 20-27; below 0xF the base family alone). Family 19h with AVX-512 picks the
// Zen 4 prefetch distance (kernel_avx512_vec.hpp), so a wrong decode would cost speed unseen.
TEST(KernelTable, CpuFamilyFromSignature) {
  using mpg::detail::cpu_family;
  EXPECT_EQ(cpu_family(0x00A10F11u), 0x19u);   // AMD EPYC 9004 (Genoa, Zen 4)
  EXPECT_EQ(cpu_family(0x00A00F11u), 0x19u);   // AMD EPYC 7003 (Milan, Zen 3)
  EXPECT_EQ(cpu_family(0x00B00F21u), 0x1Au);   // AMD EPYC 9005 (Turin, Zen 5)
  EXPECT_EQ(cpu_family(0x00830F10u), 0x17u);   // AMD EPYC 7002 (Rome, Zen 2)
  EXPECT_EQ(cpu_family(0x000806F8u), 0x6u);    // Intel Xeon (Sapphire Rapids): extension ignored
  EXPECT_EQ(cpu_family(0x0FF00F00u), 0x10Eu);  // the largest: 0xF + 0xFF
}

// The AVX512_BF16 set builds on the AVX-512 one: masking avx512 masks both, masking avx512_bf16
// alone leaves avx512.
TEST(KernelTable, MaskingAvx512MasksAvx512Bf16) {
  using mpg::detail::isa_bit;
  using mpg::detail::isa_disabled;
  {
    const mpg_test::ScopedDisabledIsas masked(isa_bit(Isa::kAvx512));
    EXPECT_TRUE(isa_disabled(Isa::kAvx512Bf16));
    EXPECT_FALSE(isa_disabled(Isa::kAvx2));
  }
  {
    const mpg_test::ScopedDisabledIsas masked(isa_bit(Isa::kAvx512Bf16));
    EXPECT_TRUE(isa_disabled(Isa::kAvx512Bf16));
    EXPECT_FALSE(isa_disabled(Isa::kAvx512));
  }
}

// Masking each supported row in turn moves the run-time choice to the next supported row, and
// the op still gives the reference's bits through it.
TEST(KernelTable, AutoSkipsMaskedIsas) {
  const Isa unmasked = mpg::detail::best_isa();
  const std::vector<Isa> isas = mpg_test::kernel_table_isas();
  uint32_t mask = 0;
  for (size_t i = 0; i < isas.size(); ++i) {
    if (!mpg::detail::cpu_supports(isas[i])) {
      mask |= mpg::detail::isa_bit(isas[i]);
      continue;
    }
    const mpg_test::ScopedDisabledIsas masked(mask);
    EXPECT_EQ(mpg::detail::best_isa(), isas[i]) << "mask " << mask;
    mask |= mpg::detail::isa_bit(isas[i]);
  }
  {
    const mpg_test::ScopedDisabledIsas masked(mask);  // everything but portable masked
    EXPECT_EQ(mpg::detail::best_isa(), Isa::kPortable);
    EXPECT_TRUE(mpg::detail::cpu_supports(Isa::kPortable));  // portable cannot be masked
    std::mt19937_64 rng(17);
    for (int64_t hidden : {7, 300}) {
      expect_matches_reference<float, int32_t, Mode::kDropless, Order::kSequential, false>(
          Isa::kAuto, Shape{5, 3, hidden, Layout{false, 0}}, mpg::DType::kFloat32, false, 1, rng);
    }
  }
  EXPECT_EQ(mpg::detail::best_isa(), unmasked);
}

// ---------------------------------------------------------------------------------------------
// The oracle's orders, worked by hand: fp32 values where every other order gives other bits.

// x_k: pseudo-random fp32 values (all 23 mantissa bits, exponents -5..5, alternating signs)
// for which the sequential and the binary-bins orders give different bits at every K tested.
float order_value(int64_t k) {
  const auto mantissa =
      static_cast<uint32_t>(static_cast<uint64_t>(k + 1) * 3266489917u) & 0x7FFFFF;
  const float magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) * 0x1p-23f,
                                     static_cast<int>((k * 7) % 11) - 5);
  return k % 2 == 0 ? magnitude : -magnitude;
}

// reference_gather_sum for one token whose K copies are rows 0..K-1 of G (all kept, hidden 1).
float reference_one_token(int64_t topk, Order order) {
  GuardedMatrix<float> grad(topk, 1);
  for (int64_t k = 0; k < topk; ++k) grad.at(k, 0) = order_value(k);
  std::vector<int32_t> indices(static_cast<size_t>(topk));
  for (int64_t k = 0; k < topk; ++k) indices[static_cast<size_t>(k)] = static_cast<int32_t>(k);
  GuardedMatrix<float> out(1, 1);
  if (order == Order::kSequential) {
    mpg::detail::reference_gather_sum<float, int32_t, Mode::kDropless, Order::kSequential, false>(
        grad.const_view(), indices, topk, WeightsView{}, out.view());
  } else {
    mpg::detail::reference_gather_sum<float, int32_t, Mode::kDropless, Order::kBinaryBins, false>(
        grad.const_view(), indices, topk, WeightsView{}, out.view());
  }
  return out.at(0, 0);
}

TEST(ReferenceGatherSum, BinaryBinsWorkedOrders) {
  float x[130];
  for (int64_t k = 0; k < 130; ++k) x[k] = order_value(k);
  struct Case {
    int64_t topk;
    float want;
  };
  // Bin 0 of K = 130 (B = 64) collects x0, x128, x1, x129; bin b > 0 holds x(2b) + x(2b+1).
  float bins[64];
  bins[0] = ((x[0] + x[128]) + x[1]) + x[129];
  for (int b = 1; b < 64; ++b) bins[b] = x[2 * b] + x[2 * b + 1];
  for (int s = 1; s < 64; s *= 2) {
    for (int i = 0; i + s < 64; i += 2 * s) bins[i] = bins[i] + bins[i + s];
  }
  const Case cases[] = {
      {1, x[0]},
      {2, x[0] + x[1]},
      {3, (x[0] + x[2]) + x[1]},
      {4, (x[0] + x[1]) + (x[2] + x[3])},
      {5, ((x[0] + x[4]) + x[1]) + (x[2] + x[3])},
      {6, (((x[0] + x[4]) + x[1]) + x[5]) + (x[2] + x[3])},
      {8, ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]))},
      {130, bins[0]},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(bits_of(reference_one_token(c.topk, Order::kBinaryBins)), bits_of(c.want))
        << "K = " << c.topk;
    // The values tell the orders apart (K >= 3), so the line above can fail.
    if (c.topk >= 3) {
      EXPECT_NE(bits_of(reference_one_token(c.topk, Order::kSequential)), bits_of(c.want))
          << "K = " << c.topk;
    }
  }
}

}  // namespace
