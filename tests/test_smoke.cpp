// Smoke: the umbrella header compiles and a 2-token call gives the sum worked out by hand.
#include <gtest/gtest.h>

#include "mpg/mpg.hpp"

TEST(Smoke, TwoTokensDropless) {
  const std::vector<float> grad = {1, 2, 3, 4};  // rows 0..3, H = 1
  const std::vector<int32_t> indices = {3, 0, 1, 2};
  std::vector<float> out(2, -1.0f);
  const mpg::Status status = mpg::permute_grad<float, int32_t>(
      {grad.data(), 4, 1}, indices, 2, mpg::Mode::kDropless, {out.data(), 2, 1});
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(out[0], 4.0f + 1.0f);
  EXPECT_EQ(out[1], 2.0f + 3.0f);
}
