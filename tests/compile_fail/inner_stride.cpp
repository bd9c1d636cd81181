// Must not compile: a Map whose elements within a row are 2 apart (it used to be read as if
// they were contiguous).
#include <mpg/mpg.hpp>

int main() {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  float storage[12] = {};
  Eigen::Map<RowMajor, 0, Eigen::Stride<Eigen::Dynamic, 2>> grad(
      storage, 2, 3, Eigen::Stride<Eigen::Dynamic, 2>(6, 2));
  RowMajor out(2, 3);
  const std::vector<int32_t> indices = {0, 1};
  return mpg::permute_grad(grad, indices, 1, mpg::Mode::kDropless, out).ok() ? 0 : 1;
}
