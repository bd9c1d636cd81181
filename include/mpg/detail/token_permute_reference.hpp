#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "mpg/detail/token_permute_args.hpp"

namespace mpg::detail {

// The oracle of MoeTokenPermute: a stable sort of the copies by expert id, written out. Inputs
// are validated. Short and obvious on purpose; the fast path must match it byte for byte.
template <class E>
void reference_token_permute(const TokenPermuteArgs<E>& a) {
  const int64_t num_copies = a.num_copies();
  std::vector<int64_t> order(static_cast<size_t>(num_copies));  // rank -> copy i = t*K + k
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return a.expert_ids[x] < a.expert_ids[y]; });
  for (int64_t rank = 0; rank < num_copies; ++rank) {
    a.sorted_indices[order[static_cast<size_t>(rank)]] = static_cast<int32_t>(rank);
  }
  if (a.row_bytes == 0) return;  // H = 0: nothing to copy (and the row pointers may be null)
  for (int64_t rank = 0; rank < a.num_rows; ++rank) {
    const int64_t token = order[static_cast<size_t>(rank)] / a.topk;
    // A byte copy: NaN payloads and every other bit pattern pass through unchanged.
    std::memcpy(a.permuted + rank * a.permuted_stride, a.tokens + token * a.tokens_stride,
                static_cast<size_t>(a.row_bytes));
  }
}

}  // namespace mpg::detail
