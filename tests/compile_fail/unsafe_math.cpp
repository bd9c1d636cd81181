// An ordinary consumer: compiled with a flag that changes mpg's results, it must fail with mpg's
// message (detail/fp_flags.hpp); with MPG_ALLOW_UNSAFE_MATH defined, it must compile.
#include <mpg/mpg.hpp>

int main() {
  const std::vector<float> grad = {1.0f, 2.0f};
  std::vector<float> out(1);
  const std::vector<int32_t> indices = {0, 1};
  return mpg::permute_grad(mpg::MatrixView(grad.data(), 2, 1), indices, 2, mpg::Mode::kDropless,
                           mpg::MatrixView(out.data(), 1, 1))
                 .ok()
             ? 0
             : 1;
}
