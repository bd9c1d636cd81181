// Subnormals, infinities, NaN, signed zeros, overflow, rounding ties, fully dropped tokens and
// empty tensors, through the reference and every fast path. Expected values follow from
// docs/contract.md section 3 by hand (see each case); they are not computed by the code under test.
#include "test_util.hpp"

#include <tuple>

namespace {

using mpg::DType;
using mpg::Mode;
using mpg_test::GuardedMatrix;
using mpg_test::PathCase;

using Param = std::tuple<PathCase, DType, Mode>;

class SpecialValues : public ::testing::TestWithParam<Param> {};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [path, dtype, mode] = info.param;
  return mpg_test::path_name(path) + "_" + mpg_test::short_name(dtype) + "_" +
         mpg_test::short_name(mode);
}

struct SumCase {
  const char* what;
  float a;  // copy k = 0
  float b;  // copy k = 1
  float want;
};

// Pairs whose fp32 sum and narrowing are known exactly in every dtype T (all inputs are
// representable in T; L = numeric_limits<T>).
template <class T>
std::vector<SumCase> sum_cases() {
  using L = std::numeric_limits<T>;
  const float tiny = static_cast<float>(L::denorm_min());
  const float smallest_normal = static_cast<float>(L::min());
  const float largest = static_cast<float>(L::max());
  // ulp(1) from the digit count: Eigen 3.4's numeric_limits<half>::epsilon() returns 2^-13.
  const float eps = std::ldexp(1.0f, 1 - L::digits);
  const float ulp_of_max = std::ldexp(eps, L::max_exponent - 1);  // 32 for half
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  return {
      {"subnormal + subnormal = 2 x subnormal", tiny, tiny, 2 * tiny},
      {"-subnormal + subnormal = +0", -tiny, tiny, 0.0f},
      {"1.5 min + -min = 0.5 min, a subnormal result", 1.5f * smallest_normal, -smallest_normal,
       0.5f * smallest_normal},
      // half: 65504 + 65504 = 131008 in fp32, past 65520 (half way to 2^16): inf.
      {"max + max overflows to inf", largest, largest, inf},
      {"-max + -max overflows to -inf", -largest, -largest, -inf},
      // max has an odd (all ones) mantissa: max + ulp/2 is a tie and goes to the even side, inf.
      {"max + ulp(max)/2 ties to inf", largest, 0.5f * ulp_of_max, inf},
      {"max + ulp(max)/4 rounds back to max", largest, 0.25f * ulp_of_max, largest},
      {"1 + eps/2 ties to even 1", 1.0f, 0.5f * eps, 1.0f},
      {"(1 + eps) + eps/2 ties to even 1 + 2 eps", 1.0f + eps, 0.5f * eps, 1.0f + 2 * eps},
      {"inf + 1 = inf", inf, 1.0f, inf},
      {"1 + -inf = -inf", 1.0f, -inf, -inf},
      {"inf + inf = inf", inf, inf, inf},
      {"inf + -inf = NaN", inf, -inf, nan},
      {"NaN + 1 = NaN", nan, 1.0f, nan},
      {"1 + NaN = NaN", 1.0f, nan, nan},
      {"-0 + -0 = -0", -0.0f, -0.0f, -0.0f},
      {"+0 + -0 = +0", 0.0f, -0.0f, 0.0f},
      {"-0 + +0 = +0", -0.0f, 0.0f, 0.0f},
  };
}

template <class T>
void expect_element(T got, float want, const std::string& where) {
  if (std::isnan(want)) {
    EXPECT_TRUE(mpg_test::is_nan(got)) << where;  // NaN's bit pattern is not specified
  } else {
    EXPECT_EQ(mpg_test::bits_of(got), mpg_test::bits_of(T(want)))
        << where << ": got " << static_cast<float>(got) << ", want " << want;
  }
}

// Each (token, column) takes case (t + h) % cases, so every case lands in every SIMD lane
// position, in vector bodies and in tails (H = 37).
template <class T>
void check_sums(PathCase path, Mode mode) {
  const auto cases = sum_cases<T>();
  constexpr int64_t kTokens = 24, kHidden = 37;
  GuardedMatrix<T> grad(2 * kTokens, kHidden);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t h = 0; h < kHidden; ++h) {
      const SumCase& c = cases[static_cast<size_t>(t + h) % cases.size()];
      grad.at(2 * t, h) = T(c.a);
      grad.at(2 * t + 1, h) = T(c.b);
    }
  }
  std::vector<int32_t> indices(2 * kTokens);
  std::iota(indices.begin(), indices.end(), 0);
  for (const int threads : {1, 3}) {
    GuardedMatrix<T> out(kTokens, kHidden);
    const mpg::Status s = mpg_test::run_permute_grad(grad, indices, 2, mode, out,
                                                     mpg_test::path_options(path, threads));
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t h = 0; h < kHidden; ++h) {
        const SumCase& c = cases[static_cast<size_t>(t + h) % cases.size()];
        expect_element(out.at(t, h), c.want,
                       std::string(c.what) + " at [" + std::to_string(t) + ", " +
                           std::to_string(h) + "], threads = " + std::to_string(threads));
      }
    }
    EXPECT_TRUE(out.guards_intact());
  }
}

TEST_P(SpecialValues, SumsOfTwoCopies) {
  const auto [path, dtype, mode] = GetParam();
  MPG_SKIP_IF_UNSUPPORTED(path);
  mpg_test::with_element_type(dtype, [&, path = path, mode = mode](auto tag) {
    check_sums<typename decltype(tag)::type>(path, mode);
  });
}

// The contract's first-copy rule with -0.0 (every G row is -0.0; K = 2):
//   t0: k0 kept, k1 dropped   -> acc = G (assigned)     = -0
//   t1: k0 dropped, k1 kept   -> acc = +0, +0 + -0      = +0
//   t2: both dropped          -> +0
//   t3: both kept             -> -0 + -0                = -0
// Dropless: kept copies use rows [0, R = 4); S values 4..7 were dropped. Padded: -1.
TEST_P(SpecialValues, SignedZeroAndDroppedCopies) {
  const auto [path, dtype, mode] = GetParam();
  MPG_SKIP_IF_UNSUPPORTED(path);
  const std::vector<int64_t> indices = mode == Mode::kDropless
                                           ? std::vector<int64_t>{0, 4, 5, 1, 6, 7, 2, 3}
                                           : std::vector<int64_t>{0, -1, -1, 1, -1, -1, 2, 3};
  const float want[4] = {-0.0f, 0.0f, 0.0f, -0.0f};
  mpg_test::with_element_type(dtype, [&, path = path, mode = mode](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int64_t kHidden = 37;
    GuardedMatrix<T> grad(4, kHidden);
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t h = 0; h < kHidden; ++h) grad.at(r, h) = T(-0.0f);
    }
    for (const int threads : {1, 2}) {
      GuardedMatrix<T> out(4, kHidden);
      const mpg::Status s = mpg_test::run_permute_grad(grad, indices, 2, mode, out,
                                                       mpg_test::path_options(path, threads));
      ASSERT_TRUE(s.ok()) << s.message();
      for (int64_t t = 0; t < 4; ++t) {
        for (int64_t h = 0; h < kHidden; ++h) {
          expect_element(out.at(t, h), want[t],
                         "token " + std::to_string(t) + ", column " + std::to_string(h) +
                             ", threads = " + std::to_string(threads));
        }
      }
      EXPECT_TRUE(out.guards_intact());
    }
  });
}

// Empty tensors are valid: N = 0 and H = 0 write nothing; R = 0 (no rows of G at all) gives
// rows of +0.0.
TEST_P(SpecialValues, EmptyTensors) {
  const auto [path, dtype, mode] = GetParam();
  MPG_SKIP_IF_UNSUPPORTED(path);
  mpg_test::with_element_type(dtype, [&, path = path, mode = mode](auto tag) {
    using T = typename decltype(tag)::type;
    const mpg::Options options = mpg_test::path_options(path);
    {  // N = 0
      GuardedMatrix<T> grad(mode == Mode::kPadded ? 4 : 0, 5);
      GuardedMatrix<T> out(0, 5);
      const mpg::Status s =
          mpg_test::run_permute_grad(grad, std::vector<int32_t>{}, 2, mode, out, options);
      EXPECT_TRUE(s.ok()) << s.message();
      EXPECT_TRUE(out.guards_intact());
    }
    {  // H = 0
      GuardedMatrix<T> grad(6, 0);
      GuardedMatrix<T> out(3, 0);
      const std::vector<int32_t> indices = {0, 1, 2, 3, 4, 5};
      const mpg::Status s = mpg_test::run_permute_grad(grad, indices, 2, mode, out, options);
      EXPECT_TRUE(s.ok()) << s.message();
      EXPECT_TRUE(out.guards_intact());
    }
    {  // R = 0: every copy dropped
      GuardedMatrix<T> grad(0, 5);
      GuardedMatrix<T> out(3, 5);
      const std::vector<int32_t> indices = mode == Mode::kDropless
                                               ? std::vector<int32_t>{5, 4, 3, 2, 1, 0}
                                               : std::vector<int32_t>(6, -1);
      const mpg::Status s = mpg_test::run_permute_grad(grad, indices, 2, mode, out, options);
      ASSERT_TRUE(s.ok()) << s.message();
      for (int64_t t = 0; t < 3; ++t) {
        for (int64_t h = 0; h < 5; ++h) EXPECT_EQ(mpg_test::bits_of(out.at(t, h)), 0u);
      }
      EXPECT_TRUE(out.guards_intact());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllPaths, SpecialValues,
                         ::testing::Combine(::testing::ValuesIn(mpg_test::kAllPaths),
                                            ::testing::ValuesIn(mpg_test::kElementDTypes),
                                            ::testing::Values(Mode::kDropless, Mode::kPadded)),
                         param_name);

// out = permute_grad(grad) written here in the plainest way, sharing no code with mpg: copy 0
// if kept (0 <= S < rows of grad, in both modes), else +0.0; then every later kept copy in
// ascending k, added in fp32; rounded once to T by Eigen's conversion.
template <class T>
void plain_sums(const GuardedMatrix<T>& grad, const std::vector<int32_t>& sorted_indices,
                int64_t topk, GuardedMatrix<T>* out) {
  for (int64_t t = 0; t < out->rows(); ++t) {
    for (int64_t h = 0; h < out->cols(); ++h) {
      float sum = 0.0f;
      for (int64_t k = 0; k < topk; ++k) {
        const int64_t s = sorted_indices[static_cast<size_t>(t * topk + k)];
        if (s < 0 || s >= grad.rows()) continue;
        const float x = static_cast<float>(grad.at(s, h));
        sum = k == 0 ? x : sum + x;  // copy 0 is assigned, so a lone -0.0 stays -0.0
      }
      out->at(t, h) = T(sum);
    }
  }
}

// Random data with specials sprinkled in (~1/8 of the elements), realistic routings: the fast
// paths give the reference's bits, and the reference gives plain_sums' bits, except that a NaN
// only has to be a NaN.
TEST_P(SpecialValues, RandomWithSpecialsMatchesReference) {
  const auto [path, dtype, mode] = GetParam();
  MPG_SKIP_IF_UNSUPPORTED(path);
  mpg_test::with_element_type(dtype, [&, path = path, mode = mode](auto tag) {
    using T = typename decltype(tag)::type;
    std::mt19937_64 rng(99);
    const auto routing = mpg_test::make_routing<int32_t>(rng, mode, 40, 3, 8);
    GuardedMatrix<T> grad(routing.grad_rows, 70);
    mpg_test::fill_random(grad, rng, mpg_test::Values::kWithSpecials);
    GuardedMatrix<T> want(40, 70);
    GuardedMatrix<T> got(40, 70);
    if (path.path == mpg::Path::kReference) {
      plain_sums(grad, routing.sorted_indices, 3, &want);
    } else {
      const mpg::Options reference = mpg_test::path_options(mpg_test::kReferencePath);
      ASSERT_TRUE(
          mpg_test::run_permute_grad(grad, routing.sorted_indices, 3, mode, want, reference).ok());
    }
    ASSERT_TRUE(mpg_test::run_permute_grad(grad, routing.sorted_indices, 3, mode, got,
                                           mpg_test::path_options(path, 2))
                    .ok());
    for (int64_t t = 0; t < 40; ++t) {
      for (int64_t h = 0; h < 70; ++h) {
        if (mpg_test::is_nan(want.at(t, h))) {
          EXPECT_TRUE(mpg_test::is_nan(got.at(t, h))) << t << ", " << h;
        } else {
          EXPECT_EQ(mpg_test::bits_of(got.at(t, h)), mpg_test::bits_of(want.at(t, h)))
              << t << ", " << h;
        }
      }
    }
  });
}

}  // namespace
