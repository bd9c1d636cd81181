#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>
#include <vector>

#include "mpg/detail/mode.hpp"
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

// The G rows of one token's kept copies, in ascending k. Gathered once per token, so the
// column-block loops of the kernels neither re-read S nor branch on dropped copies.
// SPEC section 3 assigns only copy 0; when it was dropped the sum starts from +0.0, which
// matters for a lone -0.0 (+0 + -0 = +0), so the kernels ask assigns_first().
template <class T>
class KeptRows {
 public:
  explicit KeptRows(int64_t topk) {
    if (topk > kInline) heap_.resize(static_cast<size_t>(topk));
    rows_ = topk > kInline ? heap_.data() : inline_;
  }
  KeptRows(const KeptRows&) = delete;
  KeptRows& operator=(const KeptRows&) = delete;

  template <Mode M, class I>
  void gather(const GatherSumArgs<T, I>& a, int64_t token) {
    const I* s = a.indices + token * a.topk;
    count_ = 0;
    first_is_copy0_ = ModeTraits<M>::kept(s[0], a.grad_rows);
    for (int64_t k = 0; k < a.topk; ++k) {
      if (ModeTraits<M>::kept(s[k], a.grad_rows)) {
        rows_[count_++] = a.grad + static_cast<int64_t>(s[k]) * a.grad_stride;
      }
    }
  }
  void clear() {
    count_ = 0;
    first_is_copy0_ = false;
  }

  const T* const* rows() const { return rows_; }
  int64_t count() const { return count_; }
  // Whether rows()[0] is copy 0, which initializes the sum instead of being added to +0.0.
  bool assigns_first() const { return first_is_copy0_; }

 private:
  static constexpr int64_t kInline = 32;  // top-k beyond this is rare; it costs one allocation
  const T* inline_[kInline];
  std::vector<const T*> heap_;
  const T** rows_ = nullptr;
  int64_t count_ = 0;
  bool first_is_copy0_ = false;
};

}  // namespace mpg::detail
