// The MoeTokenUnpermuteGrad kernel, written once over the vector traits `Vec` of a kernel set.
// Deliberately NO include guard: kernel_body.hpp includes it inside each kernel set's namespace
// and target region (see there why), and the set's Kernels row names its entry point.
// Everything it needs is included by gather_sum.hpp before the region opens.
//
// Per token: g widened to fp32 once; per copy one pass that writes the dX row (g * p, narrowed)
// and the products x * g into an fp32 row in L1; then the reduction tree of docs/contract.md
// section 10 over that row. Products go through memory before the tree adds them, and Vec::mul
// is a rounded product anyway, so nothing can be contracted into an FMA. The folds are
// element-wise adds (any lane width gives the same bits); the pair stage uses Vec::pair_add.

#ifndef MPG_KERNEL_NAMESPACE
#error "kernel_unpermute_grad_body.hpp is included by kernel_body.hpp"
#endif

namespace mpg::detail::MPG_KERNEL_NAMESPACE {

// dst[i] = dst[i] + src[i] for i < n: one fold of the tree.
MPG_ALWAYS_INLINE void tree_fold(float* dst, const float* src, int64_t n) {
  constexpr int64_t kLanes = Vec::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Vec::template store<float>(
        dst + i, Vec::add(Vec::template load<float>(dst + i), Vec::template load<float>(src + i)));
  }
  if constexpr (kLanes > 1) {
    if (i < n) {
      const auto sum = Vec::add(Vec::template load_partial<float>(dst + i, n - i),
                                Vec::template load_partial<float>(src + i, n - i));
      Vec::template store_partial<float>(dst + i, sum, n - i);
    }
  }
}

// e[i] = e[2i] + e[2i+1] for i < n_out, in place: each vector step loads e[2i .. 2i + 2W)
// before it stores e[i .. i + W), and later steps read only above 2(i + W).
MPG_ALWAYS_INLINE void tree_pairs(float* e, int64_t n_out) {
  constexpr int64_t kLanes = Vec::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n_out; i += kLanes) {
    const auto low = Vec::template load<float>(e + 2 * i);
    const auto high = Vec::template load<float>(e + 2 * i + kLanes);
    Vec::template store<float>(e + i, Vec::pair_add(low, high));
  }
  for (; i < n_out; ++i) e[i] = e[2 * i] + e[2 * i + 1];  // the last levels, below one vector
}

// tree(e) over e[0, length); e holds tree_scratch_floats(length) floats and is clobbered.
MPG_ALWAYS_INLINE float tree_sum(float* e, int64_t length) {
  const TreeShape shape = tree_shape(length);
  if (length < 64) {
    std::fill(e + length, e + 64, 0.0f);
  } else {
    int64_t n = length;
    while (n > shape.threshold) {
      const int64_t half = tree_fold_half(n);
      tree_fold(e, e + half, n - half);
      n = half;
    }
    tree_fold(e, e + shape.pairs, n - shape.pairs);
  }
  for (int64_t p = shape.pairs; p > 1; p /= 2) tree_pairs(e, p / 2);
  return e[0];
}

// dX rows and dP values of one kept copy (x = X's row) or dropped copy (x = null: a +0.0 row),
// columns in vectors, then one partial vector.
template <class T>
MPG_ALWAYS_INLINE void unpermute_grad_copy(const T* x, const float* g32, float p, T* dx, float* e,
                                           int64_t hidden) {
  constexpr int64_t kLanes = Vec::kLanes;
  const auto pv = Vec::set1(p);
  int64_t h = 0;
  if (x != nullptr) {
    for (; h + kLanes <= hidden; h += kLanes) {
      const auto gv = Vec::template load<float>(g32 + h);
      Vec::template store<T>(dx + h, Vec::mul(gv, pv));
      Vec::template store<float>(e + h, Vec::mul(Vec::template load<T>(x + h), gv));
    }
    if constexpr (kLanes > 1) {
      if (h < hidden) {
        const int64_t n = hidden - h;
        const auto gv = Vec::template load_partial<float>(g32 + h, n);
        Vec::template store_partial<T>(dx + h, Vec::mul(gv, pv), n);
        Vec::template store_partial<float>(
            e + h, Vec::mul(Vec::template load_partial<T>(x + h, n), gv), n);
      }
    }
    return;
  }
  // Dropped: dX row +0.0, and the products of a +0.0 row (-0.0 where g < 0, NaN where g is
  // inf or NaN), as the contract defines them.
  std::fill(dx, dx + hidden, T(0.0f));
  for (; h + kLanes <= hidden; h += kLanes) {
    Vec::template store<float>(e + h, Vec::mul(Vec::zero(), Vec::template load<float>(g32 + h)));
  }
  if constexpr (kLanes > 1) {
    if (h < hidden) {
      const int64_t n = hidden - h;
      Vec::template store_partial<float>(
          e + h, Vec::mul(Vec::zero(), Vec::template load_partial<float>(g32 + h, n)), n);
    }
  }
}

// Both outputs for tokens [token_begin, token_end).
template <class T, class P, class I>
void unpermute_grad(const UnpermuteGradArgs<T, P, I>& a, int64_t token_begin, int64_t token_end) {
  const int64_t hidden = a.hidden;
  if (hidden == 0) {  // no row to touch (data may be null); the tree of 64 x +0.0 is +0.0
    for (int64_t t = token_begin; a.probs != nullptr && t < token_end; ++t) {
      for (int64_t k = 0; k < a.topk; ++k) a.probs_grad[t * a.probs_grad_stride + k] = P(0.0f);
    }
    return;
  }
  if (a.probs == nullptr) {  // K = 1: dX[S[t]] = g[t] bit for bit, or +0.0 when dropped
    for (int64_t t = token_begin; t < token_end; ++t) {
      const T* g = a.tokens_grad + t * a.tokens_grad_stride;
      const int64_t row = a.indices[t];
      T* dx = a.permuted_grad + row * a.permuted_grad_stride;
      if (row < a.kept_rows) {
        std::copy(g, g + hidden, dx);
      } else {
        std::fill(dx, dx + hidden, T(0.0f));
      }
    }
    return;
  }
  constexpr int64_t kLanes = Vec::kLanes;
  std::vector<float> scratch(static_cast<size_t>(hidden + tree_scratch_floats(hidden)));
  float* g32 = scratch.data();  // g[t] widened once, read by every copy
  float* e = g32 + hidden;      // one copy's products, then its tree
  for (int64_t t = token_begin; t < token_end; ++t) {
    const T* g = a.tokens_grad + t * a.tokens_grad_stride;
    int64_t h = 0;
    for (; h + kLanes <= hidden; h += kLanes) {
      Vec::template store<float>(g32 + h, Vec::template load<T>(g + h));
    }
    if constexpr (kLanes > 1) {
      if (h < hidden) {
        Vec::template store_partial<float>(
            g32 + h, Vec::template load_partial<T>(g + h, hidden - h), hidden - h);
      }
    }
    const I* s = a.indices + t * a.topk;
    for (int64_t k = 0; k < a.topk; ++k) {
      const int64_t row = s[k];
      const T* x = row < a.kept_rows ? a.tokens + row * a.tokens_stride : nullptr;
      const float p = static_cast<float>(a.probs[t * a.probs_stride + k]);
      unpermute_grad_copy<T>(x, g32, p, a.permuted_grad + row * a.permuted_grad_stride, e, hidden);
      a.probs_grad[t * a.probs_grad_stride + k] = static_cast<P>(0.0f + tree_sum(e, hidden));
    }
  }
}

}  // namespace mpg::detail::MPG_KERNEL_NAMESPACE
