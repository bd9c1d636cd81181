// Must not compile: a const Eigen matrix passed as out (it used to be written through a cast).
#include <mpg/mpg.hpp>

int main() {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const RowMajor grad = RowMajor::Zero(2, 3);
  const RowMajor out = RowMajor::Zero(2, 3);
  const std::vector<int32_t> indices = {0, 1};
  return mpg::permute_grad(grad, indices, 1, mpg::Mode::kDropless, out).ok() ? 0 : 1;
}
