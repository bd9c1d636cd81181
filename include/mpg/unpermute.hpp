// mpg: MoeTokenUnpermute on the CPU: the combine step of an MoE layer (gather each token's
// expert outputs, weight them by the router's probabilities, sum).
//
// What it computes. X = permuted_tokens [R, H], S = sorted_indices [N*K], P = probs [N, K]:
//
//   for t in [0, N), h in [0, H):
//     kept(k) = S[t*K+k] < R and P[t][k] != 0             // a zero weight (+0 or -0) drops the
//     copy y[k] = float(float(X[S[t*K+k]][h]) * float(P[t][k]))  // fp32 product, rounded on its
//     own float acc = kept(0) ? y[0] : +0.0f for k in [1, K): if kept(k): acc = acc + y[k] //
//     ascending k, one IEEE add each out[t][h] = T(acc)                                   // round
//     to nearest, ties even
//
// No FMA (multiply and add round separately), no FTZ/DAZ. A dropped copy is never read, so an
// Inf or NaN in its row does not reach out; a NaN weight is kept (NaN != 0). P may be float,
// Eigen::half or Eigen::bfloat16 whatever T is; its values widen to fp32 exactly.
//
// Without probs, K = 1 (as on the device): out is [len(S), H] and out[i] = S[i] < R ? X[S[i]] :
// +0.0. S is a permutation of [0, N*K) and R <= N*K, as in dropless mpg::permute_grad.
// Mode::kPadded (S in [-1, E*C), X [E*C, H], kept(k) also needs S != -1) is an extension of
// the typed API: the device's two-phase API refuses padded_mode = true, and so does mpg's.
#pragma once

#ifndef MPG_INSIDE_PUBLIC_HEADER
#define MPG_INSIDE_PUBLIC_HEADER
#endif

#include <cstdint>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "mpg/detail/execute.hpp"
#include "mpg/detail/problem.hpp"
#include "mpg/options.hpp"
#include "mpg/permute_grad.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"

namespace mpg {

namespace detail {

inline OperandNames unpermute_names() {
  OperandNames names;
  names.grad = "permuted_tokens";
  names.indices = "sorted_indices";
  names.topk = "K";
  names.weights = "probs";
  return names;
}

}  // namespace detail

// With probs: out[N, H] = per-token weighted sums of the kept rows of permuted_tokens.
template <class T, class I, class P>
Status unpermute(ConstMatrixView<T> permuted_tokens, IndexView<I> sorted_indices,
                 ConstMatrixView<P> probs, Mode mode, MatrixView<T> out,
                 const Options& options = {}) {
  static_assert(kIsElement<T>, "mpg: element type must be float, Eigen::half or Eigen::bfloat16");
  static_assert(kIsIndex<I>, "mpg: index type must be int32_t or int64_t");
  static_assert(kIsElement<P>, "mpg: probs type must be float, Eigen::half or Eigen::bfloat16");
  detail::Problem p =
      detail::make_weighted_problem(permuted_tokens, sorted_indices, probs, mode, out);
  p.names = detail::unpermute_names();
  p.names.topk = "K (probs dim 1)";
  return detail::validate_and_execute<detail::kWeightedSum>(p, options);
}

// Without probs (K = 1): out[len(S), H], out[i] = the row S[i] of permuted_tokens, or +0.0 when
// that copy was dropped.
template <class T, class I>
Status unpermute(ConstMatrixView<T> permuted_tokens, IndexView<I> sorted_indices, Mode mode,
                 MatrixView<T> out, const Options& options = {}) {
  static_assert(kIsElement<T>, "mpg: element type must be float, Eigen::half or Eigen::bfloat16");
  static_assert(kIsIndex<I>, "mpg: index type must be int32_t or int64_t");
  detail::Problem p = detail::make_problem(permuted_tokens, sorted_indices, 1, mode, out);
  p.names = detail::unpermute_names();
  return detail::validate_and_execute<detail::kSequentialSum>(p, options);
}

// The same calls with the template arguments deduced: permuted_tokens as any view convertible
// to ConstMatrixView<T> (e.g. a MatrixView<T>), probs as a MatrixView of P or const P,
// sorted_indices as an IndexView or a std::vector.
template <class Tokens, class Indices, class P, class T>
auto unpermute(const Tokens& permuted_tokens, const Indices& sorted_indices, MatrixView<P> probs,
               Mode mode, MatrixView<T> out, const Options& options = {})
    -> std::enable_if_t<std::is_convertible_v<const Tokens&, ConstMatrixView<T>>,
                        decltype(detail::as_index_view(sorted_indices), Status())> {
  return unpermute(ConstMatrixView<T>(permuted_tokens), detail::as_index_view(sorted_indices),
                   ConstMatrixView<std::remove_const_t<P>>(probs), mode, out, options);
}

template <class Tokens, class Indices, class T>
auto unpermute(const Tokens& permuted_tokens, const Indices& sorted_indices, Mode mode,
               MatrixView<T> out, const Options& options = {})
    -> std::enable_if_t<std::is_convertible_v<const Tokens&, ConstMatrixView<T>>,
                        decltype(detail::as_index_view(sorted_indices), Status())> {
  return unpermute(ConstMatrixView<T>(permuted_tokens), detail::as_index_view(sorted_indices), mode,
                   out, options);
}

// Eigen forms: permuted_tokens, probs and out as Eigen matrices (out may be a temporary Block or
// Map), with permute_grad's rules for which Eigen objects are accepted (view_of,
// mutable_view_of); sorted_indices as an IndexView or a std::vector.
template <class TokensDerived, class Indices, class ProbsDerived, class Out,
          class = std::enable_if_t<
              std::is_base_of_v<Eigen::DenseBase<std::decay_t<Out>>, std::decay_t<Out>>>>
auto unpermute(const Eigen::DenseBase<TokensDerived>& permuted_tokens,
               const Indices& sorted_indices, const Eigen::DenseBase<ProbsDerived>& probs,
               Mode mode, Out&& out, const Options& options = {})
    -> decltype(detail::as_index_view(sorted_indices), Status()) {
  using T = typename std::decay_t<Out>::Scalar;
  static_assert(std::is_same_v<typename TokensDerived::Scalar, T>,
                "mpg: permuted_tokens and out must have the same scalar type");
  return unpermute(view_of(permuted_tokens), detail::as_index_view(sorted_indices), view_of(probs),
                   mode, mutable_view_of(std::forward<Out>(out)), options);
}

template <class TokensDerived, class Indices, class Out,
          class = std::enable_if_t<
              std::is_base_of_v<Eigen::DenseBase<std::decay_t<Out>>, std::decay_t<Out>>>>
auto unpermute(const Eigen::DenseBase<TokensDerived>& permuted_tokens,
               const Indices& sorted_indices, Mode mode, Out&& out, const Options& options = {})
    -> decltype(detail::as_index_view(sorted_indices), Status()) {
  using T = typename std::decay_t<Out>::Scalar;
  static_assert(std::is_same_v<typename TokensDerived::Scalar, T>,
                "mpg: permuted_tokens and out must have the same scalar type");
  return unpermute(view_of(permuted_tokens), detail::as_index_view(sorted_indices), mode,
                   mutable_view_of(std::forward<Out>(out)), options);
}

}  // namespace mpg
