#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "mpg/detail/fp_env.hpp"
#include "mpg/detail/gather_sum.hpp"
#include "mpg/detail/mode.hpp"
#include "mpg/types.hpp"

namespace mpg::detail {

// The oracle of every gather-and-sum op, docs/contract.md's pseudocode written out with Eigen, one
// token at a time, single-threaded. Inputs are already validated. Kept short and obvious on
// purpose; every fast kernel must match it bit for bit.
//   kept(k) = the mode keeps S[t*K+k] (dropless: < grad.rows; padded: != -1) and, when
//             weighted, p[t][k] != 0 (+0 and -0 drop the copy, NaN is kept);
//   x_k     = fp32(G[S[t*K+k]]), times fp32(p[t][k]) rounded to fp32 (never fused) if weighted;
//   kSequential: acc = kept(0) ? x_0 : +0.0; acc = acc + x_k for k = 1.. where kept;
//   kBinaryBins: B = binary_bins_count(K) bins, bin[b] = kept(2b) ? x_2b : +0.0; then every
//                kept even j >= 2B, then every kept odd j, is added to bin[(j / 2) % B]; then
//                bin[i] = bin[i] + bin[i + s] for s = 1, 2, 4, .. < B; acc = bin[0];
//   out[t] = RNE(acc).
template <class T, class I, Mode M, Order O, bool kWeighted>
void reference_gather_sum(ConstMatrixView<T> grad, IndexView<I> indices, int64_t topk,
                          WeightsView w, MatrixView<T> out) {
  using Row = Eigen::Array<float, 1, Eigen::Dynamic>;
  const ScopedIeeeFpEnv ieee;
  const int64_t hidden = out.cols;
  for (int64_t t = 0; t < out.rows; ++t) {
    const I* s = indices.data + t * topk;
    const auto kept = [&](int64_t k) {
      if (!ModeTraits<M>::kept(s[k], grad.rows)) return false;
      return !kWeighted || weight_at(w, t, k) != 0.0f;
    };
    const auto x = [&](int64_t k) {
      const Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>> g(grad.row(s[k]), hidden);
      Row term = g.template cast<float>();
      if constexpr (kWeighted) {
        const float p = weight_at(w, t, k);
        for (int64_t h = 0; h < hidden; ++h) term[h] = product_fp32(term[h], p);
      }
      return term;
    };
    Row acc;
    if constexpr (O == Order::kSequential) {
      // The first copy is assigned, not added to +0, so a lone -0.0 survives.
      acc = kept(0) ? x(0) : Row::Zero(hidden).eval();
      for (int64_t k = 1; k < topk; ++k) {
        if (kept(k)) acc += x(k);
      }
    } else {
      const int64_t bins = binary_bins_count(topk);
      std::vector<Row> bin(static_cast<size_t>(bins));
      for (int64_t b = 0; b < bins && 2 * b < topk; ++b) {
        bin[b] = kept(2 * b) ? x(2 * b) : Row::Zero(hidden).eval();
      }
      for (int64_t j = 2 * bins; j < topk; j += 2) {
        if (kept(j)) bin[(j / 2) % bins] += x(j);
      }
      for (int64_t j = 1; j < topk; j += 2) {
        if (kept(j)) bin[(j / 2) % bins] += x(j);
      }
      for (int64_t step = 1; step < bins; step *= 2) {
        for (int64_t i = 0; i + step < bins; i += 2 * step) bin[i] += bin[i + step];
      }
      acc = bin[0];
    }
    // Narrow one element at a time: Eigen's vectorized float->bfloat16 cast may use
    // VCVTNEPS2BF16, which flushes subnormal inputs (DAZ). The scalar constructors round to
    // nearest even exactly.
    T* o = out.row(t);
    for (int64_t h = 0; h < hidden; ++h) o[h] = static_cast<T>(acc[h]);
  }
}

}  // namespace mpg::detail
