// Built by the packaging.find_package test with g++ $(pkg-config --cflags mpg) alone, from an
// installed prefix: the umbrella header compiles and one call gives the hand-worked sum.
#include <mpg/mpg.hpp>

#include <cstdio>
#include <vector>

int main() {
  const std::vector<float> grad = {1, 2, 3, 4};  // [4, 1]
  const std::vector<int32_t> sorted_indices = {3, 0, 1, 2};
  std::vector<float> out(2, -1.0f);
  const mpg::Status s = mpg::permute_grad(
      mpg::ConstMatrixView<float>(grad.data(), 4, 1), mpg::IndexView<int32_t>(sorted_indices), 2,
      mpg::Mode::kDropless, mpg::MatrixView<float>(out.data(), 2, 1));
  if (!s.ok() || out[0] != 4 + 1 || out[1] != 2 + 3) {
    std::printf("mpg %s pkg-config consumer: wrong result (%s)\n", mpg::kVersion,
                s.to_string().c_str());
    return 1;
  }
  std::printf("mpg %s pkg-config consumer: ok\n", mpg::kVersion);
  return 0;
}
