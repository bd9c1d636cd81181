#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

// What the MoeTokenUnpermuteGrad kernels (kernel_unpermute_grad_body.hpp, compiled per ISA
// like kernel_body.hpp) need that does not depend on the ISA: their arguments, their signature
// and the shape of the probability gradient's reduction tree (docs/contract.md section 10).

namespace mpg::detail {

// One validated call. Offsets are int64; strides are in elements.
template <class T, class P, class I>
struct UnpermuteGradArgs {
  const T* tokens = nullptr;  // X [R, H]
  int64_t kept_rows = 0;      // R: copy (t, k) is kept iff S[t*K+k] < R
  int64_t tokens_stride = 0;
  const T* tokens_grad = nullptr;  // g [N, H]
  int64_t tokens_grad_stride = 0;
  const I* indices = nullptr;  // S [N*K]
  int64_t topk = 1;
  const P* probs = nullptr;  // P [N, K], null without probs
  int64_t probs_stride = 0;
  T* permuted_grad = nullptr;  // dX [N*K, H]
  int64_t permuted_grad_stride = 0;
  P* probs_grad = nullptr;  // dP [N, K], null without probs
  int64_t probs_grad_stride = 0;
  int64_t hidden = 0;
  // dX is large enough that caching it only evicts the X rows still to be read.
  bool streaming_stores = false;
};

// Every kernel set's entry point: both outputs for tokens [token_begin, token_end).
template <class T, class P, class I>
using UnpermuteGradKernel = void (*)(const UnpermuteGradArgs<T, P, I>& args, int64_t token_begin,
                                     int64_t token_end);

// The tree's shape for a row of `length` values: fold halves while n > threshold, fold once
// onto `pairs` values, then a perfect tree of adjacent pairs. Rows shorter than 64 are padded.
struct TreeShape {
  int64_t threshold;
  int64_t pairs;
};
inline TreeShape tree_shape(int64_t length) {
  if (length >= 4096) return {8192, 4096};
  if (length >= 512) return {1024, 512};
  return {128, 64};
}
// align_up(ceil(n / 2), 8): where a fold of n values splits them.
inline int64_t tree_fold_half(int64_t n) {
  return ((n + 1) / 2 + 7) / 8 * 8;
}
// Floats of scratch the tree works in for a row of `length` values (short rows are padded).
inline int64_t tree_scratch_floats(int64_t length) {
  return std::max<int64_t>(length, 64);
}

// Whether every product g * p of a fused step is ordinary (neither NaN nor subnormal), so that
// its dX lines can be narrowed as Narrowing::kOrdinary: decided from the range of |g| over the
// step and that of the group's weights, not per product. fl(|g| * |p|) does not decrease as
// either grows, so the smallest nonzero |g| times the smallest nonzero |p| bounds every nonzero
// product from below.
struct AbsRange {  // of some fp32 values, as bits: unsigned order is |v|'s, NaNs above infinity
  uint32_t max_bits = 0;
  uint32_t min_nonzero_bits = 0;  // 0 when every value is zero
};
struct WeightRange {
  bool all_finite = true;
  bool any_zero = false;
  float min_nonzero_abs = std::numeric_limits<float>::infinity();  // inf when every p is zero
};
inline void include_weight(WeightRange& range, float p) {
  if (!std::isfinite(p)) {
    range.all_finite = false;
  } else if (p == 0.0f) {
    range.any_zero = true;
  } else {
    range.min_nonzero_abs = std::min(range.min_nonzero_abs, std::fabs(p));
  }
}
inline bool products_ordinary(const AbsRange& g, const WeightRange& p) {
  constexpr uint32_t kInfinityBits = 0x7F800000u;
  if (g.max_bits > kInfinityBits || !p.all_finite) return false;  // NaN or inf * 0 possible
  if (p.any_zero && g.max_bits == kInfinityBits) return false;    // inf * 0
  if (g.min_nonzero_bits == 0 || std::isinf(p.min_nonzero_abs)) return true;  // all +-0
  float g_min = 0.0f;
  std::memcpy(&g_min, &g.min_nonzero_bits, sizeof(g_min));
  return g_min * p.min_nonzero_abs >= std::numeric_limits<float>::min();
}

}  // namespace mpg::detail
