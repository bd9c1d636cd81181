#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>

#include "mpg/types.hpp"

namespace mpg::detail {

// What every fast kernel needs for a range of tokens. Inputs are validated; offsets are int64.
template <class T, class I>
struct GatherSumArgs {
  const T* grad = nullptr;
  int64_t grad_rows = 0;
  int64_t grad_stride = 0;  // elements
  const I* indices = nullptr;
  int64_t topk = 0;
  T* out = nullptr;
  int64_t out_stride = 0;  // elements
  int64_t hidden = 0;
  // The output is large enough that caching it only evicts the gradient rows still to be read.
  bool streaming_stores = false;
};

// Signature shared by the per-ISA kernels: compute out rows [token_begin, token_end).
template <class T, class I>
using GatherSumKernel = void (*)(const GatherSumArgs<T, I>& args, int64_t token_begin,
                                 int64_t token_end);

}  // namespace mpg::detail
