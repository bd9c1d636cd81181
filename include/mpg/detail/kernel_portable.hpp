#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>

#include "mpg/detail/kernel_args.hpp"
#include "mpg/detail/mode.hpp"

namespace mpg::detail::portable {

// Columns per block: the fp32 accumulators of one block stay in L1 while all K rows are added.
inline constexpr int64_t kBlock = 256;

// Plain C++ for any CPU: the last fallback of the ISA dispatch.
template <class T, class I, Mode M>
void gather_sum(const GatherSumArgs<T, I>& a, int64_t token_begin, int64_t token_end) {
  float acc[kBlock];
  for (int64_t t = token_begin; t < token_end; ++t) {
    const I* s = a.indices + t * a.topk;
    T* out_row = a.out + t * a.out_stride;
    for (int64_t h0 = 0; h0 < a.hidden; h0 += kBlock) {
      const int64_t n = a.hidden - h0 < kBlock ? a.hidden - h0 : kBlock;
      if (ModeTraits<M>::kept(s[0], a.grad_rows)) {
        const T* g = a.grad + static_cast<int64_t>(s[0]) * a.grad_stride + h0;
        for (int64_t h = 0; h < n; ++h) acc[h] = static_cast<float>(g[h]);
      } else {
        for (int64_t h = 0; h < n; ++h) acc[h] = 0.0f;
      }
      for (int64_t k = 1; k < a.topk; ++k) {
        if (!ModeTraits<M>::kept(s[k], a.grad_rows)) continue;
        const T* g = a.grad + static_cast<int64_t>(s[k]) * a.grad_stride + h0;
        for (int64_t h = 0; h < n; ++h) acc[h] += static_cast<float>(g[h]);
      }
      for (int64_t h = 0; h < n; ++h) out_row[h0 + h] = static_cast<T>(acc[h]);
    }
  }
}

}  // namespace mpg::detail::portable
