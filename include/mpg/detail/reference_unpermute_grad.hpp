#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "mpg/detail/fp_env.hpp"
#include "mpg/detail/gather_sum.hpp"
#include "mpg/types.hpp"

namespace mpg::detail {

// The vendor's A2/A3 reduction of one row of L fp32 values (docs/contract.md section 10), written
// out step by step. Takes e by value: it is the scratch the tree works in.
inline float reference_tree_sum(std::vector<float> e) {
  const auto length = static_cast<int64_t>(e.size());
  int64_t pairs = 64;  // P: the perfect tree's width
  if (length < 64) {
    e.resize(64, 0.0f);  // padded with +0.0
  } else {
    int64_t n = length;
    int64_t threshold = 128;
    if (length >= 4096) {
      threshold = 8192;
      pairs = 4096;
    } else if (length >= 512) {
      threshold = 1024;
      pairs = 512;
    }
    while (n > threshold) {
      const int64_t half = ((n + 1) / 2 + 7) / 8 * 8;  // align_up(ceil(n / 2), 8)
      for (int64_t i = 0; i < n - half; ++i) e[i] = e[i] + e[half + i];
      n = half;
    }
    for (int64_t i = 0; i < n - pairs; ++i) e[i] = e[i] + e[pairs + i];
  }
  for (; pairs > 1; pairs /= 2) {
    for (int64_t i = 0; i < pairs / 2; ++i) e[i] = e[2 * i] + e[2 * i + 1];
  }
  return e[0];
}

// The oracle of MoeTokenUnpermuteGrad (docs/contract.md section 10), one copy at a time,
// single-threaded. Without probs, probs.data is null and topk is 1. Inputs are validated: S is a
// permutation of [0, len(S)) and R = tokens.rows <= len(S).
//   dX[S[t*K+k]] = S < R ? RNE(fp32(g[t] * p[t][k])) : +0.0      (no probs: a copy of g[t])
//   dP[t][k]     = RNE(+0.0 + tree(fp32(xr * g[t])))   with xr = S < R ? X[S] : a row of +0.0
// Products are computed and stored one element at a time, so no compiler can contract them
// into an FMA with the adds of the tree.
template <class T, class P, class I>
void reference_unpermute_grad(ConstMatrixView<T> tokens, ConstMatrixView<T> tokens_grad,
                              IndexView<I> indices, int64_t topk, ConstMatrixView<P> probs,
                              MatrixView<T> permuted_grad, MatrixView<P> probs_grad) {
  const ScopedIeeeFpEnv ieee;
  const int64_t hidden = tokens_grad.cols;
  const int64_t kept_rows = tokens.rows;
  std::vector<float> products(static_cast<size_t>(hidden));
  for (int64_t t = 0; t < tokens_grad.rows; ++t) {
    if (hidden == 0) {  // rows of nothing (their data may be null); the tree of 64 x +0.0
      for (int64_t k = 0; probs.data != nullptr && k < topk; ++k) {
        probs_grad.row(t)[k] = static_cast<P>(0.0f + reference_tree_sum({}));
      }
      continue;
    }
    const T* g = tokens_grad.row(t);
    for (int64_t k = 0; k < topk; ++k) {
      const int64_t s = indices.data[t * topk + k];
      const bool kept = s < kept_rows;
      T* dx = permuted_grad.row(s);
      if (probs.data == nullptr) {
        for (int64_t h = 0; h < hidden; ++h) dx[h] = kept ? g[h] : T(0.0f);
        continue;
      }
      const float p = static_cast<float>(probs.row(t)[k]);
      for (int64_t h = 0; h < hidden; ++h) {
        dx[h] = kept ? static_cast<T>(product_fp32(static_cast<float>(g[h]), p)) : T(0.0f);
      }
      for (int64_t h = 0; h < hidden; ++h) {
        const float x = kept ? static_cast<float>(tokens.row(s)[h]) : 0.0f;
        products[static_cast<size_t>(h)] = product_fp32(x, static_cast<float>(g[h]));
      }
      probs_grad.row(t)[k] = static_cast<P>(0.0f + reference_tree_sum(products));
    }
  }
}

}  // namespace mpg::detail
