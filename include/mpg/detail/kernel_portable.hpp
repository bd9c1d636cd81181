#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>

#include "mpg/detail/kernel_args.hpp"
#include "mpg/detail/mode.hpp"

namespace mpg::detail::portable {

// Columns per block: the fp32 accumulators of one block stay in L1 while all K rows are added.
inline constexpr int64_t kBlock = 256;

// out[h] for h in [h_begin, h_end) from the kept rows of one token (see KeptRows). Also the scalar
// tail of the AVX2 kernel, so both narrow through the same (Eigen, exactly rounding) scalar
// conversions.
template <class T>
void sum_columns(const T* const* rows, int64_t num_rows, bool assign_first, T* out, int64_t h_begin,
                 int64_t h_end) {
  float acc[kBlock];
  for (int64_t h0 = h_begin; h0 < h_end; h0 += kBlock) {
    const int64_t n = h_end - h0 < kBlock ? h_end - h0 : kBlock;
    int64_t k = 0;
    if (assign_first) {
      // Copy 0 is assigned, not added to +0, so a lone -0.0 survives.
      for (int64_t h = 0; h < n; ++h) acc[h] = static_cast<float>(rows[0][h0 + h]);
      k = 1;
    } else {
      for (int64_t h = 0; h < n; ++h) acc[h] = 0.0f;
    }
    for (; k < num_rows; ++k) {
      const T* g = rows[k] + h0;
      for (int64_t h = 0; h < n; ++h) acc[h] += static_cast<float>(g[h]);
    }
    for (int64_t h = 0; h < n; ++h) out[h0 + h] = static_cast<T>(acc[h]);
  }
}

// Plain C++ for any CPU: the last fallback of the ISA dispatch.
template <class T, class I, Mode M>
void gather_sum(const GatherSumArgs<T, I>& a, int64_t token_begin, int64_t token_end) {
  KeptRows<T> kept(a.topk);
  for (int64_t t = token_begin; t < token_end; ++t) {
    kept.template gather<M>(a, t);
    sum_columns(kept.rows(), kept.count(), kept.assigns_first(), a.out + t * a.out_stride, 0,
                a.hidden);
  }
}

}  // namespace mpg::detail::portable
