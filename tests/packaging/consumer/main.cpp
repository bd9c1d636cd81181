// A consumer of mpg: two tokens, top-2, checked against sums worked out by hand.
#include <cstdio>
#include <vector>

#include <mpg/mpg.hpp>

// mpg::mpg alone must not reach the host shim's ACL headers (they are opt-in: mpg::acl_host).
#if __has_include(<acl/acl.h>)
#include <acl/acl.h>
#ifdef MPG_ACL_HOST
#error "mpg::mpg's include path reaches the host shim's acl/acl.h"
#endif
#endif

int main() {
  // Dropless, R = 3 of N*K = 4 rows kept: the copy at sorted position 3 was dropped.
  // G rows (H = 2): row r = {r + 1, 10 * (r + 1)}.
  const std::vector<float> grad = {1, 10, 2, 20, 3, 30};
  const std::vector<int> indices = {2, 3, 0, 1};  // token 0: rows 2 and (dropped) 3; token 1: 0, 1
  std::vector<float> out(4, -1.0f);
  const mpg::Status status =
      mpg::permute_grad(mpg::MatrixView(grad.data(), 3, 2), indices, 2, mpg::Mode::kDropless,
                        mpg::MatrixView(out.data(), 2, 2));
  const std::vector<float> expected = {3, 30, 1 + 2, 10 + 20};
  if (!status.ok() || out != expected) {
    std::printf("FAILED: status '%s', out = {%g, %g, %g, %g}\n", status.message().c_str(), out[0],
                out[1], out[2], out[3]);
    return 1;
  }
  std::printf("mpg %s consumer: ok\n", mpg::kVersion);
  return 0;
}
