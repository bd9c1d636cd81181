// mpg: the backward of the MoE combine (aclnnMoeTokenUnpermuteGrad) on the CPU: two outputs.
//
// X = permuted_tokens [R, H], g = unpermuted_tokens_grad [N, H], S = sorted_indices [N*K] (a
// permutation of [0, N*K); copy (t, k) is row S[t*K + k] of X, kept iff S < R), P = probs
// [N, K]. Outputs dX = permuted_tokens_grad_out [N*K, H] (X's dtype) and dP = probs_grad_out
// [N, K] (P's dtype). Widening to fp32 is exact; every fp32 op rounds to nearest even; a product
// is never contracted with an add (no FMA); no flush-to-zero:
//
//   for t in [0, N), k in [0, K):                     // threads split tokens
//     s = S[t*K + k]
//     dX[s][h] = s < R ? T(fp32(g[t][h]) * fp32(P[t][k])) : +0.0   // zero weights not skipped
//     e[h]     = (s < R ? fp32(X[s][h]) : +0.0) * fp32(g[t][h])    // h in [0, L = H)
//     dP[t][k] = P_type(+0.0 + tree(e))
//
//   tree(e):                                          // the vendor's A2/A3 reduction of one row
//     (threshold, W) = L >= 4096 ? (8192, 4096) : L >= 512 ? (1024, 512) : (128, 64)
//     if L < 64: pad e with +0.0 to 64 values, n = 64
//     else:      n = L
//                while n > threshold: m = align_up(ceil(n / 2), 8)
//                                     e[i] = e[i] + e[m + i] for i < n - m;  n = m
//                e[i] = e[i] + e[W + i] for i < n - W                      // now W values
//     while W > 1: e[i] = e[2i] + e[2i + 1] for i < W / 2;  W = W / 2      // adjacent pairs
//     return e[0]
//
// Without probs the vendor fixes K = 1: N = len(S) and dX[S[i]] = S[i] < R ? g[i] : +0.0
// (bit-exact copies); there is no dP. Rows of dX that no kept copy writes (rows R .. N*K-1)
// are +0.0. T is float, Eigen::half or Eigen::bfloat16; the probs type P is any of the three,
// independently; S is int32_t or int64_t. The bits of both outputs are the same for every path,
// SIMD kernel and thread count. Bad input returns a Status naming the argument, rule, value and
// position, and leaves both outputs untouched; no output may overlap an input or the other.
#pragma once

#ifndef MPG_INSIDE_PUBLIC_HEADER
#define MPG_INSIDE_PUBLIC_HEADER
#endif

#include <cstdint>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "mpg/detail/unpermute_grad.hpp"
#include "mpg/detail/unpermute_grad_problem.hpp"
#include "mpg/options.hpp"
#include "mpg/permute_grad.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"

namespace mpg {

namespace detail {
inline Problem::Matrix erase(const void* data, int64_t rows, int64_t cols, int64_t row_stride) {
  return {data, rows, cols, row_stride};
}
template <class T>
Problem::Matrix erase(MatrixView<T> m) {
  return erase(m.data, m.rows, m.cols, m.row_stride);
}
}  // namespace detail

// With probs: writes permuted_tokens_grad_out [N*K, H] and probs_grad_out [N, K].
template <class T, class P, class I>
Status unpermute_grad(ConstMatrixView<T> permuted_tokens, ConstMatrixView<T> unpermuted_tokens_grad,
                      IndexView<I> sorted_indices, ConstMatrixView<P> probs,
                      MatrixView<T> permuted_tokens_grad_out, MatrixView<P> probs_grad_out,
                      const Options& options = {}) {
  static_assert(kIsElement<T>, "mpg: token type must be float, Eigen::half or Eigen::bfloat16");
  static_assert(kIsElement<P>, "mpg: probs type must be float, Eigen::half or Eigen::bfloat16");
  static_assert(kIsIndex<I>, "mpg: index type must be int32_t or int64_t");
  detail::UnpermuteGradProblem p;
  p.dtype = dtype_of<T>();
  p.probs_dtype = dtype_of<P>();
  p.index_type = index_type_of<I>();
  p.has_probs = true;
  p.probs_grad_given = true;
  p.tokens = detail::erase(permuted_tokens);
  p.tokens_grad = detail::erase(unpermuted_tokens_grad);
  p.indices = sorted_indices.data;
  p.num_indices = sorted_indices.size;
  p.probs = detail::erase(probs);
  p.permuted_grad = detail::erase(permuted_tokens_grad_out);
  p.probs_grad = detail::erase(probs_grad_out);
  return detail::validate_and_execute_unpermute_grad(p, options);
}

// Without probs (K = 1): writes permuted_tokens_grad_out [len(S), H] only.
template <class T, class I>
Status unpermute_grad(ConstMatrixView<T> permuted_tokens, ConstMatrixView<T> unpermuted_tokens_grad,
                      IndexView<I> sorted_indices, MatrixView<T> permuted_tokens_grad_out,
                      const Options& options = {}) {
  static_assert(kIsElement<T>, "mpg: token type must be float, Eigen::half or Eigen::bfloat16");
  static_assert(kIsIndex<I>, "mpg: index type must be int32_t or int64_t");
  detail::UnpermuteGradProblem p;
  p.dtype = dtype_of<T>();
  p.index_type = index_type_of<I>();
  p.tokens = detail::erase(permuted_tokens);
  p.tokens_grad = detail::erase(unpermuted_tokens_grad);
  p.indices = sorted_indices.data;
  p.num_indices = sorted_indices.size;
  p.permuted_grad = detail::erase(permuted_tokens_grad_out);
  return detail::validate_and_execute_unpermute_grad(p, options);
}

// The same calls with the template arguments deduced: the inputs as any views convertible to
// ConstMatrixView (e.g. MatrixView<T>), sorted_indices as an IndexView or a std::vector; T and P
// come from the outputs.
template <class Tokens, class Grad, class Indices, class Probs, class T, class P>
auto unpermute_grad(const Tokens& permuted_tokens, const Grad& unpermuted_tokens_grad,
                    const Indices& sorted_indices, const Probs& probs,
                    MatrixView<T> permuted_tokens_grad_out, MatrixView<P> probs_grad_out,
                    const Options& options = {})
    -> std::enable_if_t<std::is_convertible_v<const Tokens&, ConstMatrixView<T>> &&
                            std::is_convertible_v<const Grad&, ConstMatrixView<T>> &&
                            std::is_convertible_v<const Probs&, ConstMatrixView<P>>,
                        decltype(detail::as_index_view(sorted_indices), Status())> {
  return unpermute_grad(ConstMatrixView<T>(permuted_tokens),
                        ConstMatrixView<T>(unpermuted_tokens_grad),
                        detail::as_index_view(sorted_indices), ConstMatrixView<P>(probs),
                        permuted_tokens_grad_out, probs_grad_out, options);
}

template <class Tokens, class Grad, class Indices, class T>
auto unpermute_grad(const Tokens& permuted_tokens, const Grad& unpermuted_tokens_grad,
                    const Indices& sorted_indices, MatrixView<T> permuted_tokens_grad_out,
                    const Options& options = {})
    -> std::enable_if_t<std::is_convertible_v<const Tokens&, ConstMatrixView<T>> &&
                            std::is_convertible_v<const Grad&, ConstMatrixView<T>>,
                        decltype(detail::as_index_view(sorted_indices), Status())> {
  return unpermute_grad(ConstMatrixView<T>(permuted_tokens),
                        ConstMatrixView<T>(unpermuted_tokens_grad),
                        detail::as_index_view(sorted_indices), permuted_tokens_grad_out, options);
}

// Eigen forms (template arguments deduced): X, g and probs as Eigen matrices, sorted_indices as
// an IndexView or a std::vector, the outputs as writable Eigen matrices, Maps or Blocks (which
// may be temporaries). Row-major, as for permute_grad (view_of).
template <class TokensDerived, class GradDerived, class Indices, class ProbsDerived, class DxOut,
          class DpOut,
          class = std::enable_if_t<
              std::is_base_of_v<Eigen::DenseBase<std::decay_t<DxOut>>, std::decay_t<DxOut>> &&
              std::is_base_of_v<Eigen::DenseBase<std::decay_t<DpOut>>, std::decay_t<DpOut>>>>
auto unpermute_grad(const Eigen::DenseBase<TokensDerived>& permuted_tokens,
                    const Eigen::DenseBase<GradDerived>& unpermuted_tokens_grad,
                    const Indices& sorted_indices, const Eigen::DenseBase<ProbsDerived>& probs,
                    DxOut&& permuted_tokens_grad_out, DpOut&& probs_grad_out,
                    const Options& options = {})
    -> decltype(detail::as_index_view(sorted_indices), Status()) {
  using T = typename std::decay_t<DxOut>::Scalar;
  using P = typename std::decay_t<DpOut>::Scalar;
  static_assert(std::is_same_v<typename TokensDerived::Scalar, T> &&
                    std::is_same_v<typename GradDerived::Scalar, T>,
                "mpg: permuted_tokens, unpermuted_tokens_grad and permuted_tokens_grad_out must "
                "have the same scalar type");
  static_assert(std::is_same_v<typename ProbsDerived::Scalar, P>,
                "mpg: probs and probs_grad_out must have the same scalar type");
  return unpermute_grad(view_of(permuted_tokens), view_of(unpermuted_tokens_grad),
                        detail::as_index_view(sorted_indices), view_of(probs),
                        mutable_view_of(std::forward<DxOut>(permuted_tokens_grad_out)),
                        mutable_view_of(std::forward<DpOut>(probs_grad_out)), options);
}

template <class TokensDerived, class GradDerived, class Indices, class DxOut,
          class = std::enable_if_t<
              std::is_base_of_v<Eigen::DenseBase<std::decay_t<DxOut>>, std::decay_t<DxOut>>>>
auto unpermute_grad(const Eigen::DenseBase<TokensDerived>& permuted_tokens,
                    const Eigen::DenseBase<GradDerived>& unpermuted_tokens_grad,
                    const Indices& sorted_indices, DxOut&& permuted_tokens_grad_out,
                    const Options& options = {})
    -> decltype(detail::as_index_view(sorted_indices), Status()) {
  using T = typename std::decay_t<DxOut>::Scalar;
  static_assert(std::is_same_v<typename TokensDerived::Scalar, T> &&
                    std::is_same_v<typename GradDerived::Scalar, T>,
                "mpg: permuted_tokens, unpermuted_tokens_grad and permuted_tokens_grad_out must "
                "have the same scalar type");
  return unpermute_grad(view_of(permuted_tokens), view_of(unpermuted_tokens_grad),
                        detail::as_index_view(sorted_indices),
                        mutable_view_of(std::forward<DxOut>(permuted_tokens_grad_out)), options);
}

}  // namespace mpg
