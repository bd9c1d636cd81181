// route_dropless / route_padded / permute on cases worked out by hand.
#include "test_util.hpp"

#include <cstring>

namespace {

using mpg::ErrorCode;
using mpg::Mode;

// Token: experts. 0: (1, 0), 1: (0, 2), 2: (2, 1). Stable by expert, then by t*K + k:
// e0: copy 1, copy 2; e1: copy 0, copy 5; e2: copy 3, copy 4. Copy i goes to position S[i].
const std::vector<int32_t> kDroplessExperts = {1, 0, 0, 2, 2, 1};
const std::vector<int32_t> kDroplessIndices = {2, 0, 1, 4, 5, 3};

TEST(RouteDropless, StableOrderByExpert) {
  std::vector<int32_t> s;
  int64_t rows = -1;
  ASSERT_TRUE(
      mpg::route_dropless(mpg::IndexView<int32_t>(kDroplessExperts), 2, 3, std::nullopt, &s, &rows)
          .ok());
  EXPECT_EQ(s, kDroplessIndices);
  EXPECT_EQ(rows, 6);  // no num_out_tokens: R = N*K
}

TEST(RouteDropless, NumOutTokensSetsRowsAndClampsToNK) {
  std::vector<int64_t> s;
  int64_t rows = -1;
  const mpg::IndexView<int32_t> ids(kDroplessExperts);
  ASSERT_TRUE(mpg::route_dropless(ids, 2, 3, int64_t{4}, &s, &rows).ok());
  EXPECT_EQ(s, std::vector<int64_t>(kDroplessIndices.begin(), kDroplessIndices.end()));
  EXPECT_EQ(rows, 4);
  ASSERT_TRUE(mpg::route_dropless(ids, 2, 3, int64_t{100}, &s, &rows).ok());
  EXPECT_EQ(rows, 6);
  ASSERT_TRUE(mpg::route_dropless(ids, 2, 3, int64_t{0}, &s, &rows).ok());
  EXPECT_EQ(rows, 0);
  const mpg::Status negative = mpg::route_dropless(ids, 2, 3, int64_t{-1}, &s, &rows);
  EXPECT_EQ(negative.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(negative.message().find("num_out_tokens = -1"), std::string::npos)
      << negative.message();
}

TEST(RouteDropless, RejectsBadExpertIdsAndTopK) {
  std::vector<int32_t> s;
  int64_t rows = 0;
  const std::vector<int32_t> bad = {0, 1, 2, 5};
  const mpg::Status out_of_range =
      mpg::route_dropless(mpg::IndexView<int32_t>(bad), 2, 3, std::nullopt, &s, &rows);
  EXPECT_EQ(out_of_range.code(), ErrorCode::kIndexOutOfRange);
  EXPECT_NE(out_of_range.message().find("expert_ids[3] = 5"), std::string::npos)
      << out_of_range.message();
  EXPECT_EQ(mpg::route_dropless(mpg::IndexView<int32_t>(bad), 0, 3, std::nullopt, &s, &rows).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(mpg::route_dropless(mpg::IndexView<int32_t>(bad), 3, 6, std::nullopt, &s, &rows).code(),
            ErrorCode::kShapeMismatch);  // 4 ids are not a multiple of K = 3
}

// E = 3, C = 2. Token: experts 0: (0, 1), 1: (1, 0), 2: (1, 0). In (t, k) order expert 0 takes
// (t0,k0) -> row 0, (t1,k1) -> row 1, then is full; expert 1 takes (t0,k1) -> row 2,
// (t1,k0) -> row 3, then is full; expert 2 gets nothing (rows 4, 5 are padding).
const std::vector<int32_t> kPaddedExperts = {0, 1, 1, 0, 1, 0};
const std::vector<int32_t> kPaddedIndices = {0, 2, 3, 1, -1, -1};

TEST(RoutePadded, CapacityOverflowGivesMinusOne) {
  std::vector<int32_t> s;
  ASSERT_TRUE(mpg::route_padded(mpg::IndexView<int32_t>(kPaddedExperts), 2, 3, 2, &s).ok());
  EXPECT_EQ(s, kPaddedIndices);
}

TEST(RoutePadded, ZeroAndLargeCapacity) {
  std::vector<int64_t> s;
  const mpg::IndexView<int32_t> ids(kPaddedExperts);
  ASSERT_TRUE(mpg::route_padded(ids, 2, 3, 0, &s).ok());
  EXPECT_EQ(s, std::vector<int64_t>(6, -1));
  // C = 3: nobody overflows. Expert e's copies land at rows 3e, 3e+1, ... in (t, k) order.
  ASSERT_TRUE(mpg::route_padded(ids, 2, 3, 3, &s).ok());
  EXPECT_EQ(s, (std::vector<int64_t>{0, 3, 4, 1, 5, 2}));
  EXPECT_EQ(mpg::route_padded(ids, 2, 3, -1, &s).code(), ErrorCode::kInvalidArgument);
}

TEST(RoutePadded, RejectsRowsBeyondTheIndexType) {
  std::vector<int32_t> s;
  const mpg::Status s_status =
      mpg::route_padded(mpg::IndexView<int32_t>(kPaddedExperts), 2, 3, int64_t{1} << 30, &s);
  EXPECT_EQ(s_status.code(), ErrorCode::kInvalidArgument);  // 3 * 2^30 > int32 max
}

template <class T>
std::vector<float> row_of(const mpg_test::GuardedMatrix<T>& m, int64_t r) {
  std::vector<float> v;
  for (int64_t c = 0; c < m.cols(); ++c) v.push_back(static_cast<float>(m.at(r, c)));
  return v;
}

TEST(Permute, DroplessCopiesKeptRowsOnly) {
  mpg_test::GuardedMatrix<float> tokens(3, 2);
  const float values[3][2] = {{1, 2}, {3, 4}, {5, 6}};
  for (int t = 0; t < 3; ++t) {
    for (int h = 0; h < 2; ++h) tokens.at(t, h) = values[t][h];
  }
  // R = 4: rows S = 0..3 are copies 1 (t0), 2 (t1), 0 (t0), 5 (t2); copies 3, 4 were dropped.
  mpg_test::GuardedMatrix<float> permuted(4, 2);
  const mpg::Status s =
      mpg::permute(tokens.const_view(), kDroplessIndices, 2, Mode::kDropless, permuted.view());
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(row_of(permuted, 0), (std::vector<float>{1, 2}));
  EXPECT_EQ(row_of(permuted, 1), (std::vector<float>{3, 4}));
  EXPECT_EQ(row_of(permuted, 2), (std::vector<float>{1, 2}));
  EXPECT_EQ(row_of(permuted, 3), (std::vector<float>{5, 6}));
  EXPECT_TRUE(permuted.guards_intact());
}

TEST(Permute, PaddedZeroesPaddingRows) {
  mpg_test::GuardedMatrix<mpg::bfloat16> tokens(3, 2);
  for (int t = 0; t < 3; ++t) {
    for (int h = 0; h < 2; ++h) tokens.at(t, h) = mpg::bfloat16(static_cast<float>(10 * t + h));
  }
  mpg_test::GuardedMatrix<mpg::bfloat16> permuted(6, 2);  // sentinel-filled: must be overwritten
  const mpg::Status s =
      mpg::permute(tokens.const_view(), kPaddedIndices, 2, Mode::kPadded, permuted.view());
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(row_of(permuted, 0), (std::vector<float>{0, 1}));    // (t0,k0)
  EXPECT_EQ(row_of(permuted, 1), (std::vector<float>{10, 11}));  // (t1,k1)
  EXPECT_EQ(row_of(permuted, 2), (std::vector<float>{0, 1}));    // (t0,k1)
  EXPECT_EQ(row_of(permuted, 3), (std::vector<float>{10, 11}));  // (t1,k0)
  for (int r = 4; r < 6; ++r) {
    EXPECT_EQ(mpg_test::bits_of(permuted.at(r, 0)), 0u);
    EXPECT_EQ(mpg_test::bits_of(permuted.at(r, 1)), 0u);
  }
  EXPECT_TRUE(permuted.guards_intact());
}

TEST(Permute, RejectsADuplicateAndWritesNothing) {
  mpg_test::GuardedMatrix<float> tokens(3, 2);
  std::mt19937_64 rng(3);
  mpg_test::fill_random(tokens, rng);
  mpg_test::GuardedMatrix<float> permuted(6, 2);
  const std::vector<int32_t> duplicate = {2, 0, 1, 4, 2, 3};
  const mpg::Status s =
      mpg::permute(tokens.const_view(), duplicate, 2, Mode::kDropless, permuted.view());
  EXPECT_EQ(s.code(), ErrorCode::kDuplicateIndex);
  EXPECT_TRUE(permuted.payload_untouched());
  EXPECT_TRUE(permuted.guards_intact());
}

// permute's one output is permuted: it is checked against tokens and sorted_indices, and the
// two inputs may share memory. One buffer of int32 words holds all three here.
TEST(Permute, RefusesPermutedOverlappingSortedIndices) {
  // Padded, E*C = 4 rows of H = 1 float: the zero-fill of padding rows would wipe the indices
  // before they are read if permuted were laid over them.
  std::vector<int32_t> arena = {0, -1, 2, -1, 0, 0};
  static_assert(sizeof(float) == sizeof(int32_t));
  const std::vector<float> tokens = {1.0f, 2.0f};
  const mpg::IndexView<int32_t> indices(arena.data(), 4);  // K = 2, N = 2
  const mpg::MatrixView<float> permuted(reinterpret_cast<float*>(arena.data() + 2), 4, 1);
  const std::vector<int32_t> before = arena;
  const mpg::Status s = mpg::permute(mpg::ConstMatrixView<float>(tokens.data(), 2, 1), indices, 2,
                                     Mode::kPadded, permuted);
  EXPECT_EQ(s.code(), ErrorCode::kOverlap) << s.message();
  EXPECT_EQ(s.message(), "permuted overlaps sorted_indices in memory");
  EXPECT_EQ(arena, before);
}

TEST(Permute, RefusesPermutedOverlappingTokens) {
  std::vector<float> buffer(8, 1.0f);
  const std::vector<int32_t> indices = {1, 0};
  const mpg::Status s = mpg::permute(mpg::ConstMatrixView<float>(buffer.data(), 2, 2),
                                     mpg::IndexView<int32_t>(indices), 1, Mode::kDropless,
                                     mpg::MatrixView<float>(buffer.data() + 2, 2, 2));
  EXPECT_EQ(s.code(), ErrorCode::kOverlap) << s.message();
  EXPECT_EQ(s.message(), "permuted overlaps tokens in memory");
}

TEST(Permute, InputsMayShareMemory) {
  // tokens [2, 1] (int32 bit patterns read as float) lie on top of sorted_indices = {1, 0}.
  std::vector<int32_t> shared = {1, 0};
  const mpg::ConstMatrixView<float> tokens(reinterpret_cast<const float*>(shared.data()), 2, 1);
  std::vector<float> permuted(2, -1.0f);
  const mpg::Status s = mpg::permute(tokens, mpg::IndexView<int32_t>(shared), 1, Mode::kDropless,
                                     mpg::MatrixView<float>(permuted.data(), 2, 1));
  ASSERT_TRUE(s.ok()) << s;
  float t0 = 0;
  float t1 = 0;
  std::memcpy(&t0, &shared[0], sizeof t0);
  std::memcpy(&t1, &shared[1], sizeof t1);
  EXPECT_EQ(mpg_test::bits_of(permuted[1]), mpg_test::bits_of(t0));  // token 0 -> row 1
  EXPECT_EQ(mpg_test::bits_of(permuted[0]), mpg_test::bits_of(t1));
}

TEST(Permute, MessagesNameTokensAndPermuted) {
  const std::vector<float> tokens(3 * 2, 1.0f);  // 3 tokens, but the indices describe N = 2
  std::vector<float> permuted(4 * 2);
  const std::vector<int32_t> indices = {0, 1, 2, 3};
  const mpg::Status rows = mpg::permute(mpg::ConstMatrixView<float>(tokens.data(), 3, 2),
                                        mpg::IndexView<int32_t>(indices), 2, Mode::kDropless,
                                        mpg::MatrixView<float>(permuted.data(), 4, 2));
  EXPECT_EQ(rows.code(), ErrorCode::kShapeMismatch);
  EXPECT_EQ(rows.message().rfind("tokens has 3 rows", 0), 0u) << rows;
  const mpg::Status hidden = mpg::permute(mpg::ConstMatrixView<float>(tokens.data(), 2, 2),
                                          mpg::IndexView<int32_t>(indices), 2, Mode::kDropless,
                                          mpg::MatrixView<float>(permuted.data(), 4, 1));
  EXPECT_EQ(hidden.code(), ErrorCode::kShapeMismatch);
  EXPECT_EQ(hidden.message(), "tokens has hidden size 2 but permuted has hidden size 1") << hidden;
}

// The short forms (ids as a std::vector, no template arguments; views, or Eigen matrices) give
// the hand-ranked results of the forms above.
TEST(RoutingShortForms, VectorIdsWithDeducedIndexTypes) {
  std::vector<int64_t> wide;
  int64_t rows = -1;
  ASSERT_TRUE(mpg::route_dropless(kDroplessExperts, 2, 3, std::nullopt, &wide, &rows).ok());
  EXPECT_EQ(wide, std::vector<int64_t>(kDroplessIndices.begin(), kDroplessIndices.end()));
  EXPECT_EQ(rows, 6);
  std::vector<int32_t> padded;
  ASSERT_TRUE(mpg::route_padded(kPaddedExperts, 2, 3, 2, &padded).ok());
  EXPECT_EQ(padded, kPaddedIndices);
  const std::vector<int64_t> wide_ids(kPaddedExperts.begin(), kPaddedExperts.end());
  ASSERT_TRUE(mpg::route_padded(wide_ids, 2, 3, 2, &padded).ok());
  EXPECT_EQ(padded, kPaddedIndices);
}

TEST(RoutingShortForms, PermuteFromRawViewsAndEigen) {
  const std::vector<float> tokens = {1, 2, 3, 4, 5, 6};      // [3, 2]
  const std::vector<float> want = {1, 2, 3, 4, 1, 2, 5, 6};  // DroplessCopiesKeptRowsOnly's rows
  std::vector<float> permuted(8, -1.0f);
  ASSERT_TRUE(mpg::permute(mpg::MatrixView(tokens.data(), 3, 2), kDroplessIndices, 2,
                           Mode::kDropless, mpg::MatrixView(permuted.data(), 4, 2))
                  .ok());
  EXPECT_EQ(permuted, want);

  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajor> eigen_tokens(tokens.data(), 3, 2);
  RowMajor eigen_permuted = RowMajor::Constant(4, 2, -1.0f);
  ASSERT_TRUE(
      mpg::permute(eigen_tokens, kDroplessIndices, 2, Mode::kDropless, eigen_permuted).ok());
  EXPECT_EQ(std::vector<float>(eigen_permuted.data(), eigen_permuted.data() + 8), want);
  // A Block of a bigger matrix as the output, written through.
  RowMajor big = RowMajor::Constant(6, 2, -1.0f);
  ASSERT_TRUE(
      mpg::permute(eigen_tokens, kDroplessIndices, 2, Mode::kDropless, big.middleRows(1, 4)).ok());
  EXPECT_EQ(std::vector<float>(big.data() + 2, big.data() + 10), want);
  EXPECT_EQ(big(0, 0), -1.0f);
  EXPECT_EQ(big(5, 1), -1.0f);
}

}  // namespace
