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
#include <emmintrin.h>
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

// One row of `bytes` from src to dst. Streaming (non-temporal) stores keep a large output from
// evicting the token rows still to be read; SSE2's are baseline x86-64, and for a copy the
// store width does not limit a memory-bound loop. Elsewhere, memcpy.
inline void copy_row(uint8_t* dst, const uint8_t* src, int64_t bytes, bool streaming) {
#if MPG_HAVE_X86_KERNELS
  if (streaming && bytes >= 64) {
    const auto head = static_cast<int64_t>((16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
    std::memcpy(dst, src, static_cast<size_t>(head));
    int64_t i = head;
    for (; i + 64 <= bytes; i += 64) {
      const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i v3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), v0);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), v1);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), v2);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), v3);
    }
    for (; i + 16 <= bytes; i += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    }
    std::memcpy(dst + i, src + i, static_cast<size_t>(bytes - i));
    return;
  }
#endif
  (void)streaming;
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

// Token rows [token_begin, token_end): each row is read once and written to the ranks of its
// kept copies, so the tokens are read once in order; the writes are whole rows.
template <class E>
void copy_token_rows(const TokenPermuteArgs<E>& a, int64_t token_begin, int64_t token_end,
                     bool streaming) {
  for (int64_t t = token_begin; t < token_end; ++t) {
    const uint8_t* src = a.tokens + t * a.tokens_stride;
    const int32_t* ranks = a.sorted_indices + t * a.topk;
    for (int64_t k = 0; k < a.topk; ++k) {
      const int64_t rank = ranks[k];
      if (rank < a.num_rows) {
        copy_row(a.permuted + rank * a.permuted_stride, src, a.row_bytes, streaming);
      }
    }
  }
#if MPG_HAVE_X86_KERNELS
  if (streaming) _mm_sfence();  // streaming stores are weakly ordered
#endif
}

// Ranks (single-threaded, see above), then the row copies over a deterministic partition of the
// tokens: every output row is one byte copy by one thread, so the bytes never depend on the
// number of threads. Isa::kPortable copies with memcpy only (no streaming stores).
template <class E>
void fast_token_permute(const TokenPermuteArgs<E>& a, int64_t max_id, uint8_t* scratch,
                        const Options& options) {
  rank_by_expert(a.expert_ids, a.num_copies(), max_id, scratch, a.sorted_indices);
  if (a.num_rows == 0 || a.row_bytes == 0) return;
  const int64_t out_bytes = a.num_rows * a.row_bytes;
  const bool streaming =
      out_bytes >= kStreamingStoreBytes && resolve_isa(options.isa) != Isa::kPortable;
  int64_t threads = options.num_threads;
  if (threads == 0) {
    threads = std::min<int64_t>(default_num_threads(), 2 * out_bytes / kMinBytesPerThread);
  }
  const int64_t num_tokens = a.num_tokens;
  threads = std::clamp<int64_t>(threads, 1, num_tokens);
  if (threads == 1 && !options.parallel_for) {
    copy_token_rows(a, 0, num_tokens, streaming);
    return;
  }
  const int64_t max_tasks = std::min(num_tokens, threads * kTasksPerThread);
  const int64_t tokens_per_task = (num_tokens + max_tasks - 1) / max_tasks;
  const int64_t num_tasks = (num_tokens + tokens_per_task - 1) / tokens_per_task;
  const std::function<void(int64_t)> task = [&](int64_t i) {
    const int64_t begin = i * tokens_per_task;
    copy_token_rows(a, begin, std::min(num_tokens, begin + tokens_per_task), streaming);
  };
  if (options.parallel_for) {
    options.parallel_for(num_tasks, task);
  } else {
    ThreadPool::instance().run(static_cast<int>(threads), num_tasks, task);
  }
}

}  // namespace mpg::detail
