#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>

#include "mpg/types.hpp"

namespace mpg::detail {

// kept(s, grad_rows): whether a validated index s names a row of G that the forward kept.
template <Mode M>
struct ModeTraits;

template <>
struct ModeTraits<Mode::kDropless> {
  // s is in [0, N*K); rows past grad_rows (num_out_tokens) were dropped by the forward.
  template <class I>
  static bool kept(I s, int64_t grad_rows) {
    return static_cast<int64_t>(s) < grad_rows;
  }
};

template <>
struct ModeTraits<Mode::kPadded> {
  // s is in [-1, E*C); -1 marks a copy over capacity.
  template <class I>
  static bool kept(I s, int64_t /*grad_rows*/) {
    return s >= 0;
  }
};

}  // namespace mpg::detail
