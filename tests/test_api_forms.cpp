// The call forms a user writes first: no explicit template arguments, std::vector indices,
// mutable views as inputs, and Eigen vectors, columns, row blocks and Maps read with the right
// strides. Each result is compared with a hand-worked sum.
#include "test_util.hpp"

namespace {

using mpg::Mode;
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// G = 4 x 3 row-major, G[r][c] = 10 * r + c; S = {0, 1, 2, 3}, K = 2: out[t] = G[2t] + G[2t+1].
RowMajor grad_4x3() {
  RowMajor g(4, 3);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) g(r, c) = static_cast<float>(10 * r + c);
  }
  return g;
}
const std::vector<int32_t> kIndices = {0, 1, 2, 3};

TEST(ApiForms, ViewsAndVectorsWithoutTemplateArguments) {
  RowMajor g = grad_4x3();
  std::vector<float> out(2 * 3, -1.0f);
  const mpg::MatrixView<float> grad_view(g.data(), 4, 3);  // mutable: converts to const
  const mpg::Status s = mpg::permute_grad(grad_view, kIndices, 2, Mode::kDropless,
                                          mpg::MatrixView<float>(out.data(), 2, 3));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, (std::vector<float>{10, 12, 14, 50, 52, 54}));
}

TEST(ApiForms, EigenWithVectorIndices) {
  const RowMajor g = grad_4x3();
  RowMajor out(2, 3);
  ASSERT_TRUE(mpg::permute_grad(g, kIndices, 2, Mode::kDropless, out).ok());
  EXPECT_EQ(out(1, 2), 54.0f);
}

// The review's case: column 1 of G and of out. out = {G[0][1] + G[1][1], G[2][1] + G[3][1]}.
TEST(ApiForms, ColumnsOfRowMajorMatricesUseTheirElementSpacing) {
  const RowMajor g = grad_4x3();
  RowMajor out = RowMajor::Constant(2, 3, -1.0f);
  const mpg::Status s = mpg::permute_grad(g.col(1), kIndices, 2, Mode::kDropless, out.col(1));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out(0, 1), 1.0f + 11.0f);
  EXPECT_EQ(out(1, 1), 21.0f + 31.0f);
  EXPECT_EQ(out(0, 0), -1.0f);  // the other columns are untouched
  EXPECT_EQ(out(1, 2), -1.0f);
}

TEST(ApiForms, VectorsAreColumns) {
  Eigen::VectorXf g(4);
  g << 1, 2, 3, 4;
  Eigen::VectorXf out = Eigen::VectorXf::Constant(2, -1.0f);
  ASSERT_TRUE(mpg::permute_grad(g, kIndices, 2, Mode::kDropless, out).ok());
  EXPECT_EQ(out(0), 3.0f);
  EXPECT_EQ(out(1), 7.0f);
}

TEST(ApiForms, MiddleRowsAndOuterStridedMaps) {
  RowMajor big = RowMajor::Zero(8, 3);
  big.middleRows(2, 4) = grad_4x3();
  std::vector<float> storage(2 * 5, -1.0f);  // out rows 5 floats apart
  Eigen::Map<RowMajor, 0, Eigen::OuterStride<>> out(storage.data(), 2, 3, Eigen::OuterStride<>(5));
  ASSERT_TRUE(mpg::permute_grad(big.middleRows(2, 4), kIndices, 2, Mode::kDropless, out).ok());
  EXPECT_EQ(storage, (std::vector<float>{10, 12, 14, -1, -1, 50, 52, 54, -1, -1}));
}

}  // namespace

namespace {

// Path::kAuto is the deprecated old name of Path::kFast, the default.
TEST(ApiForms, PathAutoIsTheFastPath) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  EXPECT_EQ(mpg::Path::kAuto, mpg::Path::kFast);
#pragma GCC diagnostic pop
  EXPECT_EQ(mpg::Options{}.path, mpg::Path::kFast);
  // 2 was kFast's number before kAuto became its alias; now it is no Path.
  const std::vector<float> g = {1, 2, 3, 4};
  std::vector<float> out(2, -1.0f);
  mpg::Options options;
  options.path = static_cast<mpg::Path>(2);
  const mpg::Status s =
      mpg::permute_grad(mpg::MatrixView(g.data(), 4, 1), kIndices, 2, Mode::kDropless,
                        mpg::MatrixView(out.data(), 2, 1), options);
  EXPECT_EQ(s.code(), mpg::ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("options.path = 2"), std::string::npos) << s;
  EXPECT_EQ(out, (std::vector<float>{-1.0f, -1.0f}));
}

}  // namespace

// Every op's short forms (mutable views and std::vector indices; Eigen matrices), against its
// explicit form (<T, I, ...> with const views and an IndexView): the same status and the same
// output bits. bf16 tokens with fp16 probs, so that T and P are deduced independently.
namespace {

using mpg::bfloat16;
using mpg::half;
template <class T>
using RowMajorOf = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr int64_t kTokens = 4;
constexpr int64_t kTopK = 2;
constexpr int64_t kHidden = 5;
constexpr int64_t kKept = 6;  // rows of the permuted side: the copies ranked 6 and 7 are dropped
const std::vector<int32_t> kSorted = {3, 0, 6, 1, 2, 7, 5, 4};  // a permutation of [0, 8)
const std::vector<int32_t> kExpertIds = {2, 0, 1, 3, 0, 2, 3, 1};

template <class T>
std::vector<T> values(int64_t rows, int64_t cols, int seed) {
  std::vector<T> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = T(static_cast<float>(static_cast<int>(i) * seed % 23 - 11) * 0.371f);
  }
  return v;
}
template <class T>
mpg::MatrixView<T> view(std::vector<T>& v, int64_t rows) {
  return {v.data(), rows, static_cast<int64_t>(v.size()) / rows};
}
template <class T>
mpg::ConstMatrixView<T> const_view(const std::vector<T>& v, int64_t rows) {
  return {v.data(), rows, static_cast<int64_t>(v.size()) / rows};
}
template <class T>
RowMajorOf<T> eigen(const std::vector<T>& v, int64_t rows) {
  return Eigen::Map<const RowMajorOf<T>>(v.data(), rows, static_cast<int64_t>(v.size()) / rows);
}
// Sentinel-filled outputs, so that an output left unwritten differs from a written one.
template <class T>
std::vector<T> unwritten(int64_t rows, int64_t cols) {
  return std::vector<T>(static_cast<size_t>(rows * cols), T(-99.0f));
}
template <class T>
std::vector<T> as_vector(const RowMajorOf<T>& m) {
  return std::vector<T>(m.data(), m.data() + m.size());
}
template <class T>
void expect_same_bits(const std::vector<T>& expected, const std::vector<T>& actual,
                      const char* what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  EXPECT_EQ(std::memcmp(expected.data(), actual.data(), expected.size() * sizeof(T)), 0) << what;
}

const mpg::IndexView<int32_t> kSortedView(kSorted);

TEST(ApiForms, ShortFormsOfEveryOpMatchTheExplicitForms) {
  using T = bfloat16;
  using P = half;
  std::vector<T> rows = values<T>(kKept, kHidden, 7);              // G, X: the permuted side
  std::vector<T> tokens = values<T>(kTokens, kHidden, 5);          // tokens, g: one row per token
  std::vector<T> copies = values<T>(kTokens * kTopK, kHidden, 3);  // g without probs
  std::vector<P> probs = values<P>(kTokens, kTopK, 11);
  const Mode mode = Mode::kDropless;

  {  // permute_grad and init_routing_v2_grad: out [N, H]
    auto expected = unwritten<T>(kTokens, kHidden), short_out = expected;
    RowMajorOf<T> eigen_out(kTokens, kHidden);
    ASSERT_TRUE((mpg::permute_grad<T, int32_t>(const_view(rows, kKept), kSortedView, kTopK, mode,
                                               view(expected, kTokens))
                     .ok()));
    ASSERT_TRUE(
        mpg::permute_grad(view(rows, kKept), kSorted, kTopK, mode, view(short_out, kTokens)).ok());
    ASSERT_TRUE(mpg::permute_grad(eigen(rows, kKept), kSorted, kTopK, mode, eigen_out).ok());
    expect_same_bits(expected, short_out, "permute_grad, views");
    expect_same_bits(expected, as_vector(eigen_out), "permute_grad, Eigen");

    expected = unwritten<T>(kTokens, kHidden);
    short_out = expected;
    ASSERT_TRUE((mpg::init_routing_v2_grad<T, int32_t>(const_view(rows, kKept), kSortedView, kTopK,
                                                       mode, view(expected, kTokens))
                     .ok()));
    ASSERT_TRUE(
        mpg::init_routing_v2_grad(view(rows, kKept), kSorted, kTopK, mode, view(short_out, kTokens))
            .ok());
    ASSERT_TRUE(
        mpg::init_routing_v2_grad(eigen(rows, kKept), kSorted, kTopK, mode, eigen_out).ok());
    expect_same_bits(expected, short_out, "init_routing_v2_grad, views");
    expect_same_bits(expected, as_vector(eigen_out), "init_routing_v2_grad, Eigen");
  }
  {  // unpermute with probs: out [N, H]; without: out [N*K, H]
    auto expected = unwritten<T>(kTokens, kHidden), short_out = expected;
    RowMajorOf<T> eigen_out(kTokens, kHidden);
    ASSERT_TRUE(
        (mpg::unpermute<T, int32_t, P>(const_view(rows, kKept), kSortedView,
                                       const_view(probs, kTokens), mode, view(expected, kTokens))
             .ok()));
    ASSERT_TRUE(mpg::unpermute(view(rows, kKept), kSorted, view(probs, kTokens), mode,
                               view(short_out, kTokens))
                    .ok());
    ASSERT_TRUE(
        mpg::unpermute(eigen(rows, kKept), kSorted, eigen(probs, kTokens), mode, eigen_out).ok());
    expect_same_bits(expected, short_out, "unpermute with probs, views");
    expect_same_bits(expected, as_vector(eigen_out), "unpermute with probs, Eigen");

    expected = unwritten<T>(kTokens * kTopK, kHidden);
    short_out = expected;
    RowMajorOf<T> eigen_copies(kTokens * kTopK, kHidden);
    ASSERT_TRUE((mpg::unpermute<T, int32_t>(const_view(rows, kKept), kSortedView, mode,
                                            view(expected, kTokens * kTopK))
                     .ok()));
    ASSERT_TRUE(
        mpg::unpermute(view(rows, kKept), kSorted, mode, view(short_out, kTokens * kTopK)).ok());
    ASSERT_TRUE(mpg::unpermute(eigen(rows, kKept), kSorted, mode, eigen_copies).ok());
    expect_same_bits(expected, short_out, "unpermute without probs, views");
    expect_same_bits(expected, as_vector(eigen_copies), "unpermute without probs, Eigen");
  }
  {  // unpermute_grad with probs: dX [N*K, H] and dP [N, K]; without: dX only (K = 1)
    auto expected_dx = unwritten<T>(kTokens * kTopK, kHidden), short_dx = expected_dx;
    auto expected_dp = unwritten<P>(kTokens, kTopK), short_dp = expected_dp;
    ASSERT_TRUE((mpg::unpermute_grad<T, P, int32_t>(
                     const_view(rows, kKept), const_view(tokens, kTokens), kSortedView,
                     const_view(probs, kTokens), view(expected_dx, kTokens * kTopK),
                     view(expected_dp, kTokens))
                     .ok()));
    ASSERT_TRUE(mpg::unpermute_grad(view(rows, kKept), view(tokens, kTokens), kSorted,
                                    view(probs, kTokens), view(short_dx, kTokens * kTopK),
                                    view(short_dp, kTokens))
                    .ok());
    expect_same_bits(expected_dx, short_dx, "unpermute_grad dX, views");
    expect_same_bits(expected_dp, short_dp, "unpermute_grad dP, views");

    expected_dx = unwritten<T>(kTokens * kTopK, kHidden);
    short_dx = expected_dx;
    ASSERT_TRUE((mpg::unpermute_grad<T, int32_t>(const_view(rows, kKept),
                                                 const_view(copies, kTokens * kTopK), kSortedView,
                                                 view(expected_dx, kTokens * kTopK))
                     .ok()));
    ASSERT_TRUE(mpg::unpermute_grad(view(rows, kKept), view(copies, kTokens * kTopK), kSorted,
                                    view(short_dx, kTokens * kTopK))
                    .ok());
    expect_same_bits(expected_dx, short_dx, "unpermute_grad without probs, views");
  }
  {  // the forwards: token_permute (permuted [n, H] and the ranks) and permute
    constexpr int64_t kNumOut = 6;
    auto expected = unwritten<T>(kNumOut, kHidden), short_out = expected;
    std::vector<int32_t> expected_ranks(kSorted.size(), -1), short_ranks = expected_ranks;
    ASSERT_TRUE((mpg::token_permute<T, int32_t>(const_view(tokens, kTokens),
                                                mpg::IndexView<int32_t>(kExpertIds), kTopK, kNumOut,
                                                view(expected, kNumOut),
                                                mpg::MutableIndexView<int32_t>(expected_ranks))
                     .ok()));
    ASSERT_TRUE(mpg::token_permute(view(tokens, kTokens), kExpertIds, kTopK, kNumOut,
                                   view(short_out, kNumOut), short_ranks)
                    .ok());
    expect_same_bits(expected, short_out, "token_permute, views");
    EXPECT_EQ(expected_ranks, short_ranks);

    expected = unwritten<T>(kKept, kHidden);
    short_out = expected;
    ASSERT_TRUE((mpg::permute<T, int32_t>(const_view(tokens, kTokens), kSortedView, kTopK, mode,
                                          view(expected, kKept))
                     .ok()));
    ASSERT_TRUE(
        mpg::permute(view(tokens, kTokens), kSorted, kTopK, mode, view(short_out, kKept)).ok());
    expect_same_bits(expected, short_out, "permute, views");
  }
}

}  // namespace
