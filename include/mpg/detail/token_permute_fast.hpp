#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>

#include "mpg/detail/assert.hpp"
#include "mpg/detail/cpu.hpp"
#include "mpg/detail/fast.hpp"
#include "mpg/detail/parallel.hpp"
#include "mpg/detail/token_permute_args.hpp"
#include "mpg/options.hpp"

#if MPG_HAVE_X86_KERNELS
#include <immintrin.h>
#endif

namespace mpg::detail {

// The sort. Expert ids are < 2^24, so a stable counting sort ranks the copies in O(N*K + E):
// one histogram when the largest id is not far above N*K, else two least-significant-digit
// passes of 12 bits each (4096 buckets), which cost O(N*K) whatever the ids and keep the
// scratch at N*K + 4096 words instead of a 64 MiB histogram for one stray large id. Both are
// stable (ties keep ascending copy order), hence deterministic. Single-threaded: at the
// benchmark shape ranking 32768 copies takes tens of microseconds against milliseconds of
// row copies.
inline constexpr int kRadixBits = 12;
inline constexpr int64_t kRadixBuckets = int64_t{1} << kRadixBits;

// N*K + 4096 uint32 words, plus slack to align them inside any workspace.
inline uint64_t expert_sort_scratch_bytes(int64_t num_ids) {
  return static_cast<uint64_t>(num_ids + kRadixBuckets) * sizeof(uint32_t) + alignof(uint32_t) - 1;
}

// counts[0, buckets) -> exclusive prefix sums (each bucket's first rank).
inline void counts_to_starts(uint32_t* counts, int64_t buckets) {
  uint32_t start = 0;
  for (int64_t b = 0; b < buckets; ++b) {
    const uint32_t count = counts[b];
    counts[b] = start;
    start += count;
  }
}

// ranks[i] = the rank of copy i in the stable order by ids[i]. ids are in [0, max_id],
// max_id < 2^24; scratch holds expert_sort_scratch_bytes(num) bytes.
template <class E>
void rank_by_expert(const E* ids, int64_t num, int64_t max_id, uint8_t* scratch, int32_t* ranks) {
  if (num == 0) return;
  void* space = scratch;
  size_t space_bytes = expert_sort_scratch_bytes(num);
  auto* words = static_cast<uint32_t*>(
      std::align(alignof(uint32_t), sizeof(uint32_t) * static_cast<size_t>(num + kRadixBuckets),
                 space, space_bytes));
  MPG_ASSERT(words != nullptr);
  const int64_t buckets = max_id + 1;
  if (buckets <= std::max(num, kRadixBuckets)) {
    uint32_t* next = words;  // one counter per expert id
    std::fill(next, next + buckets, 0u);
    for (int64_t i = 0; i < num; ++i) ++next[ids[i]];
    counts_to_starts(next, buckets);
    for (int64_t i = 0; i < num; ++i) ranks[i] = static_cast<int32_t>(next[ids[i]]++);
    return;
  }
  constexpr uint32_t kLowMask = kRadixBuckets - 1;
  uint32_t* by_low = words;  // copies in stable order of the low 12 bits
  uint32_t* next = words + num;
  std::fill(next, next + kRadixBuckets, 0u);
  for (int64_t i = 0; i < num; ++i) ++next[static_cast<uint32_t>(ids[i]) & kLowMask];
  counts_to_starts(next, kRadixBuckets);
  for (int64_t i = 0; i < num; ++i) {
    by_low[next[static_cast<uint32_t>(ids[i]) & kLowMask]++] = static_cast<uint32_t>(i);
  }
  std::fill(next, next + kRadixBuckets, 0u);
  for (int64_t i = 0; i < num; ++i) ++next[static_cast<uint32_t>(ids[i]) >> kRadixBits];
  counts_to_starts(next, kRadixBuckets);
  for (int64_t j = 0; j < num; ++j) {  // stable in the high bits over the low-bit order
    const uint32_t i = by_low[j];
    ranks[i] = static_cast<int32_t>(next[static_cast<uint32_t>(ids[i]) >> kRadixBits]++);
  }
}

// Copies one row of `bytes`. Outputs of kStreamingStoreBytes or more are written with
// streaming (non-temporal) stores: they are not read back by this call, and caching them would
// evict the token rows still to be read. Measured at bf16 4096 x 8 x 4096 (1 thread): token-order
// copies with 64-byte streaming stores beat 16-byte ones by ~10% and plain stores by ~25%.
using RowCopy = void (*)(uint8_t* dst, const uint8_t* src, int64_t bytes);

inline void copy_row_plain(uint8_t* dst, const uint8_t* src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

#if MPG_HAVE_X86_KERNELS
// Plain copies up to the first aligned destination byte, whole vectors streamed, plain tail.
MPG_TARGET_AVX2 inline void copy_row_stream_avx2(uint8_t* dst, const uint8_t* src, int64_t bytes) {
  int64_t i = std::min<int64_t>(bytes, (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31);
  std::memcpy(dst, src, static_cast<size_t>(i));
  for (; i + 128 <= bytes; i += 128) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i v2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i v3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), v0);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), v1);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), v2);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), v3);
  }
  for (; i + 32 <= bytes; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
  std::memcpy(dst + i, src + i, static_cast<size_t>(bytes - i));
}

MPG_TARGET_AVX512 inline void copy_row_stream_avx512(uint8_t* dst, const uint8_t* src,
                                                     int64_t bytes) {
  int64_t i = std::min<int64_t>(bytes, (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63);
  std::memcpy(dst, src, static_cast<size_t>(i));
  for (; i + 256 <= bytes; i += 256) {
    const __m512i v0 = _mm512_loadu_si512(src + i);
    const __m512i v1 = _mm512_loadu_si512(src + i + 64);
    const __m512i v2 = _mm512_loadu_si512(src + i + 128);
    const __m512i v3 = _mm512_loadu_si512(src + i + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), v0);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 64), v1);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 128), v2);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 192), v3);
  }
  for (; i + 64 <= bytes; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
  }
  std::memcpy(dst + i, src + i, static_cast<size_t>(bytes - i));
}
#endif

// isa is resolved and supported. Isa::kPortable (and non-x86 builds) copy with memcpy.
inline RowCopy select_row_copy(Isa isa, bool streaming) {
#if MPG_HAVE_X86_KERNELS
  if (streaming && isa == Isa::kAvx512) return &copy_row_stream_avx512;
  if (streaming && isa == Isa::kAvx2) return &copy_row_stream_avx2;
#endif
  (void)isa;
  (void)streaming;
  return &copy_row_plain;
}

// Token rows [token_begin, token_end): each row is read once, in order, and written to the
// ranks of its kept copies. Measured against copying in output order (rank by rank, reading
// each token row K times): token order is ~2x faster at bf16 4096 x 8 x 4096, as the scattered
// reads defeat the prefetcher and cost K times the read traffic once the tokens leave the cache.
template <class E>
void copy_token_rows(const TokenPermuteArgs<E>& a, int64_t token_begin, int64_t token_end,
                     RowCopy copy_row, bool streaming) {
  for (int64_t t = token_begin; t < token_end; ++t) {
    const uint8_t* src = a.tokens + t * a.tokens_stride;
    const int32_t* ranks = a.sorted_indices + t * a.topk;
    for (int64_t k = 0; k < a.topk; ++k) {
      const int64_t rank = ranks[k];
      if (rank < a.num_rows) copy_row(a.permuted + rank * a.permuted_stride, src, a.row_bytes);
    }
  }
#if MPG_HAVE_X86_KERNELS
  if (streaming) _mm_sfence();  // streaming stores are weakly ordered
#else
  (void)streaming;
#endif
}

// Ranks (single-threaded, see above), then the row copies over a deterministic partition of the
// tokens: every output row is one byte copy by one thread, so the bytes never depend on the
// number of threads or the ISA.
template <class E>
void fast_token_permute(const TokenPermuteArgs<E>& a, int64_t max_id, uint8_t* scratch,
                        const Options& options) {
  rank_by_expert(a.expert_ids, a.num_copies(), max_id, scratch, a.sorted_indices);
  if (a.num_rows == 0 || a.row_bytes == 0) return;
  const int64_t out_bytes = a.num_rows * a.row_bytes;
  const Isa isa = resolve_isa(options.isa);
  const bool streaming = out_bytes >= kStreamingStoreBytes && isa != Isa::kPortable;
  const RowCopy copy_row = select_row_copy(isa, streaming);
  int64_t threads = options.num_threads;
  if (threads == 0) {
    threads = std::min<int64_t>(default_num_threads(), 2 * out_bytes / kMinBytesPerThread);
  }
  const int64_t num_tokens = a.num_tokens;
  threads = std::clamp<int64_t>(threads, 1, num_tokens);
  if (threads == 1 && !options.parallel_for) {
    copy_token_rows(a, 0, num_tokens, copy_row, streaming);
    return;
  }
  const int64_t max_tasks = std::min(num_tokens, threads * kTasksPerThread);
  const int64_t tokens_per_task = (num_tokens + max_tasks - 1) / max_tasks;
  const int64_t num_tasks = (num_tokens + tokens_per_task - 1) / tokens_per_task;
  const std::function<void(int64_t)> task = [&](int64_t i) {
    const int64_t begin = i * tokens_per_task;
    copy_token_rows(a, begin, std::min(num_tokens, begin + tokens_per_task), copy_row, streaming);
  };
  if (options.parallel_for) {
    options.parallel_for(num_tasks, task);
  } else {
    ThreadPool::instance().run(static_cast<int>(threads), num_tasks, task);
  }
}

}  // namespace mpg::detail
