#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>

#include "mpg/detail/assert.hpp"
#include "mpg/detail/fast.hpp"
#include "mpg/detail/kernel_table.hpp"
#include "mpg/detail/token_permute_args.hpp"
#include "mpg/options.hpp"

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

// Ranks (single-threaded, see above), then the row copies through the kernel set options.isa
// names, over run_tokens' deterministic partition of the tokens: every output row is one byte
// copy by one thread, so the bytes never depend on the number of threads or the ISA.
template <class E>
void fast_token_permute(const TokenPermuteArgs<E>& a, int64_t max_id, uint8_t* scratch,
                        const Options& options) {
  rank_by_expert(a.expert_ids, a.num_copies(), max_id, scratch, a.sorted_indices);
  if (a.num_rows == 0 || a.row_bytes == 0) return;
  const int64_t out_bytes = a.num_rows * a.row_bytes;
  TokenPermuteArgs<E> args = a;
  args.streaming_stores = out_bytes >= kStreamingStoreBytes;
  const CopyRowsKernel<E> kernel = select_copy_rows<E>(resolve_isa(options.isa));
  run_tokens(a.num_tokens, 2 * out_bytes, options,
             [&](int64_t begin, int64_t end) { kernel(args, begin, end); });
}

}  // namespace mpg::detail
