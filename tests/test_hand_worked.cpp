// Small cases worked out on paper, through every path: the expected values are literals.
#include "test_util.hpp"

namespace {

using mpg::Mode;
using mpg_test::GuardedMatrix;

template <class T>
class HandWorked : public ::testing::Test {};
TYPED_TEST_SUITE(HandWorked, mpg_test::ElementTypes, mpg_test::ElementTypeNames);

template <class T>
GuardedMatrix<T> matrix_of(const std::vector<std::vector<float>>& rows) {
  GuardedMatrix<T> m(static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size()));
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < rows[r].size(); ++c) m.at(r, c) = T(rows[r][c]);
  }
  return m;
}

// Runs every path the CPU has and checks out against `want` (bits, so +0 and -0 differ).
template <class T, class I>
void expect_all_paths(const GuardedMatrix<T>& grad, const std::vector<I>& sorted_indices,
                      int64_t topk, Mode mode, const std::vector<std::vector<float>>& want) {
  for (const mpg_test::PathCase path : mpg_test::kAllPaths) {
    if (!mpg_test::path_supported(path)) continue;
    for (const int threads : {1, 2}) {
      SCOPED_TRACE(mpg_test::path_name(path) + ", threads = " + std::to_string(threads));
      GuardedMatrix<T> out(static_cast<int64_t>(want.size()), grad.cols());
      const mpg::Status s = mpg_test::run_permute_grad(grad, sorted_indices, topk, mode, out,
                                                       mpg_test::path_options(path, threads));
      ASSERT_TRUE(s.ok()) << s.message();
      for (size_t t = 0; t < want.size(); ++t) {
        for (size_t h = 0; h < want[t].size(); ++h) {
          EXPECT_EQ(mpg_test::bits_of(out.at(t, h)), mpg_test::bits_of(T(want[t][h])))
              << "out[" << t << "][" << h << "] = " << static_cast<float>(out.at(t, h)) << ", want "
              << want[t][h];
        }
      }
      EXPECT_TRUE(out.guards_intact());
    }
  }
}

// N = 3, K = 2, H = 3. Routing (token: experts) 0: (1, 0), 1: (0, 2), 2: (2, 1); copies sorted
// by expert, stably: e0 gets (t0,k1) (t1,k0), e1 gets (t0,k0) (t2,k1), e2 gets (t1,k1) (t2,k0),
// so S = [2, 0, 1, 4, 5, 3]. num_out_tokens R = 4 < N*K = 6: S values 4 and 5 were dropped.
TYPED_TEST(HandWorked, DroplessWithDroppedCopies) {
  using T = TypeParam;
  const auto grad = matrix_of<T>({
      {1.5f, -2.0f, 1.0f},
      {0.25f, 3.0f, 3.0f},
      {4.0f, 0.5f, 0.00390625f},  // 2^-8
      {-1.0f, 8.0f, -0.5f},
  });
  // Column 2 of token 0 is 1 + 2^-8 = 1.00390625 in fp32. float and half keep it (ulp(1) is
  // 2^-23 and 2^-10); in bfloat16 ulp(1) = 2^-7, so it is a tie between 1 and 1 + 2^-7 and
  // rounds to the even mantissa: 1.
  const float tie = std::is_same_v<T, mpg::bfloat16> ? 1.0f : 1.00390625f;
  const std::vector<std::vector<float>> want = {
      {4.0f + 1.5f, 0.5f - 2.0f, tie},  // G[2] + G[0] = [5.5, -1.5, 1 + 2^-8]
      {0.25f, 3.0f, 3.0f},              // G[1]; S = 4 >= R was dropped
      {-1.0f, 8.0f, -0.5f},             // S = 5 dropped, then +0 + G[3]
  };
  expect_all_paths<T, int32_t>(grad, {2, 0, 1, 4, 5, 3}, 2, Mode::kDropless, want);
  expect_all_paths<T, int64_t>(grad, {2, 0, 1, 4, 5, 3}, 2, Mode::kDropless, want);
}

// E = 2 experts, capacity C = 2, N = 3, K = 2, H = 2. Routing 0: (0, 1), 1: (1, 0), 2: (1, 0).
// Expert 0 takes (t0,k0) -> row 0 and (t1,k1) -> row 1, and is full for (t2,k1); expert 1 takes
// (t0,k1) -> row 2 and (t1,k0) -> row 3, and is full for (t2,k0). S = [0, 2, 3, 1, -1, -1]:
// token 2 lost both copies and gets +0.0.
TYPED_TEST(HandWorked, PaddedWithATokenFullyDropped) {
  using T = TypeParam;
  const auto grad = matrix_of<T>({
      {1.0f, 2.0f},
      {0.5f, -4.0f},
      {-3.0f, 0.125f},
      {6.0f, 1.0f},
  });
  const std::vector<std::vector<float>> want = {
      {-2.0f, 2.125f},  // G[0] + G[2] = [1 - 3, 2 + 0.125]
      {6.5f, -3.0f},    // G[3] + G[1] = [6 + 0.5, 1 - 4]
      {0.0f, 0.0f},     // both copies over capacity: +0.0 (bits 0)
  };
  expect_all_paths<T, int32_t>(grad, {0, 2, 3, 1, -1, -1}, 2, Mode::kPadded, want);
  expect_all_paths<T, int64_t>(grad, {0, 2, 3, 1, -1, -1}, 2, Mode::kPadded, want);
}

// The order of the adds shows: N = 1, K = 3, S = [2, 0, 1], G = [2^-24, 2^-24, 1]. Ascending k
// adds 1 + 2^-24 = 1 (a tie in fp32, to even), then 1 + 2^-24 = 1 again, so out = 1 in every
// dtype. Summing the two small copies first would give 1 + 2^-23 in float.
TYPED_TEST(HandWorked, AscendingKOrder) {
  using T = TypeParam;
  const float tiny = 5.9604644775390625e-8f;  // 2^-24: a subnormal in half, normal elsewhere
  const auto grad = matrix_of<T>({{tiny}, {tiny}, {1.0f}});
  expect_all_paths<T, int32_t>(grad, {2, 0, 1}, 3, Mode::kDropless, {{1.0f}});
  expect_all_paths<T, int32_t>(grad, {2, 0, 1}, 3, Mode::kPadded, {{1.0f}});
}

// The same with values every dtype holds exactly, so that the order shows after narrowing to
// half and bfloat16 too. S = [2, 0, 1], G = [-2^15, 2^-10, 2^15]. Ascending k adds
// 2^15 - 2^15 = 0, then + 2^-10: out = 2^-10. The reverse order adds 2^-10 - 2^15 first, a tie
// between -2^15 and -(2^15 - 2^-9) in fp32 that rounds to the even -2^15, then + 2^15: +0.
TYPED_TEST(HandWorked, AscendingKOrderInEveryDtype) {
  using T = TypeParam;
  const float big = 32768.0f;    // 2^15
  const float small = 0x1p-10f;  // a normal number in every dtype
  const auto grad = matrix_of<T>({{-big}, {small}, {big}});
  expect_all_paths<T, int32_t>(grad, {2, 0, 1}, 3, Mode::kDropless, {{small}});
  expect_all_paths<T, int32_t>(grad, {2, 0, 1}, 3, Mode::kPadded, {{small}});
}

}  // namespace
