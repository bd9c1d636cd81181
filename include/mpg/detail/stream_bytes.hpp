#pragma once
#include "mpg/detail/guard.hpp"

#include "mpg/detail/cpu.hpp"

#if MPG_HAVE_X86_KERNELS
#include <emmintrin.h>

#include <cstdint>
#include <cstring>

namespace mpg::detail {

// n bytes from src to dst, non-temporally in 8-byte words (MOVNTI, SSE2: every x86-64 CPU) from
// dst's first 8-byte boundary on, the few bytes around them with plain stores. For the parts of
// a streamed row that are not whole lines (a misaligned row's head and its tail): a plain store
// there reads the line for ownership, a demand miss per row end that stalls the stream of
// streaming stores around it. Measured by bench_token_permute (4096 x 8 x 4096, rows 16 bytes
// past a line, 1 thread, interleaved, 2 rounds): efficiency 0.86 and 0.91 -> 0.89 and 0.93
// (bf16, 8 KiB rows), 0.80 and 0.86 -> 1.14 and 1.46 (int8, 4 KiB rows). MoeTokenUnpermuteGrad's
// dX row ends gained nothing measurable that way and keep plain stores. Weakly ordered like the
// other streaming stores: the caller fences.
inline void stream_bytes_x86(void* dst, const void* src, int64_t n) {
  auto* to = static_cast<unsigned char*>(dst);
  const auto* from = static_cast<const unsigned char*>(src);
  const auto lead = static_cast<int64_t>((8 - reinterpret_cast<uintptr_t>(to) % 8) % 8);
  int64_t i = lead < n ? lead : n;
  std::memcpy(to, from, static_cast<size_t>(i));
  for (; i + 8 <= n; i += 8) {
    long long word = 0;
    std::memcpy(&word, from + i, sizeof(word));
    _mm_stream_si64(reinterpret_cast<long long*>(to + i), word);
  }
  std::memcpy(to + i, from + i, static_cast<size_t>(n - i));
}

}  // namespace mpg::detail

#endif  // MPG_HAVE_X86_KERNELS
