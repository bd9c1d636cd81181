#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>

namespace mpg::detail {

// A validated MoeTokenPermute call as the kernels see it: rows are byte runs (the op copies,
// it never converts), strides are bytes, offsets int64. E is the expert-id type.
template <class E>
struct TokenPermuteArgs {
  const uint8_t* tokens = nullptr;  // [N, H]
  int64_t tokens_stride = 0;        // bytes
  int64_t row_bytes = 0;            // H * element size
  const E* expert_ids = nullptr;    // [N, K] row-major, every id in [0, 2^24 - 1)
  int64_t topk = 0;
  int64_t num_tokens = 0;
  uint8_t* permuted = nullptr;        // [n, H]
  int64_t permuted_stride = 0;        // bytes
  int64_t num_rows = 0;               // n: copies ranked >= n are dropped
  int32_t* sorted_indices = nullptr;  // [N*K]
  // The output is large enough that caching it only evicts the token rows still to be read.
  bool streaming_stores = false;

  int64_t num_copies() const { return num_tokens * topk; }
};

// Every kernel set's row copies (kernel_body.hpp): token rows [token_begin, token_end), each
// copied to the rows its sorted_indices name (< num_rows); the ranks are already written.
template <class E>
using CopyRowsKernel = void (*)(const TokenPermuteArgs<E>& args, int64_t token_begin,
                                int64_t token_end);

}  // namespace mpg::detail
