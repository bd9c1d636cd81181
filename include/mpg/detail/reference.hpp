#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>

#include <Eigen/Core>

#include "mpg/detail/fp_env.hpp"
#include "mpg/detail/mode.hpp"
#include "mpg/types.hpp"

namespace mpg::detail {

// The oracle: docs/contract.md section 3 written out with Eigen, one token at a time,
// single-threaded. Inputs are already validated. Kept short and obvious on purpose; every other
// path must match it bit for bit.
template <class T, class I, Mode M>
void reference_permute_grad(ConstMatrixView<T> grad, IndexView<I> indices, int64_t num_topk,
                            MatrixView<T> out) {
  using RowT = Eigen::Array<T, 1, Eigen::Dynamic>;
  const ScopedIeeeFpEnv ieee;
  const int64_t hidden = out.cols;
  const auto row = [&](int64_t r) { return Eigen::Map<const RowT>(grad.row(r), hidden); };
  const auto kept = [&](I s) { return ModeTraits<M>::kept(s, grad.rows); };

  Eigen::Array<float, 1, Eigen::Dynamic> acc(hidden);
  for (int64_t t = 0; t < out.rows; ++t) {
    const I* s = indices.data + t * num_topk;
    // The first copy is assigned, not added to +0, so a lone -0.0 survives (contract section 3).
    if (kept(s[0])) {
      acc = row(s[0]).template cast<float>();
    } else {
      acc.setZero();
    }
    for (int64_t k = 1; k < num_topk; ++k) {
      if (kept(s[k])) acc += row(s[k]).template cast<float>();
    }
    // Narrow one element at a time: Eigen's vectorized float->bfloat16 cast may use
    // VCVTNEPS2BF16, which flushes subnormal inputs (DAZ). The scalar constructors round to
    // nearest even exactly.
    T* o = out.row(t);
    for (int64_t h = 0; h < hidden; ++h) o[h] = static_cast<T>(acc[h]);
  }
}

}  // namespace mpg::detail
