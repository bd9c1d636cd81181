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
