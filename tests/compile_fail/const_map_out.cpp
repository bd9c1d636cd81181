// Must not compile: a Map of const data passed as out.
#include <mpg/mpg.hpp>

int main() {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const RowMajor grad = RowMajor::Zero(2, 3);
  const float storage[6] = {};
  const std::vector<int32_t> indices = {0, 1};
  return mpg::permute_grad(grad, indices, 1, mpg::Mode::kDropless,
                           Eigen::Map<const RowMajor>(storage, 2, 3))
                 .ok()
             ? 0
             : 1;
}
