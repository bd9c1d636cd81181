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

#include <Eigen/Core>

#include "mpg/detail/execute.hpp"
#include "mpg/detail/problem.hpp"
#include "mpg/options.hpp"
#include "mpg/permute_grad.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"

namespace mpg {

namespace detail {

// Whether X is an Eigen dense expression: keeps the Eigen overloads out of overload resolution
// when the typed ones are called with explicit template arguments (unpermute<T, I>(...)), which
// would otherwise name Eigen::DenseBase<T>.
template <class X, class = void>
struct IsEigenDense : std::false_type {};
template <class X>
struct IsEigenDense<X, std::void_t<typename X::Scalar, decltype(X::IsRowMajor)>> : std::true_type {
};

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

template <class TokensDerived, class I, class ProbsDerived, class OutDerived,
          class = std::enable_if_t<detail::IsEigenDense<TokensDerived>::value>>
Status unpermute(const Eigen::DenseBase<TokensDerived>& permuted_tokens,
                 IndexView<I> sorted_indices, const Eigen::DenseBase<ProbsDerived>& probs,
                 Mode mode, const Eigen::DenseBase<OutDerived>& out, const Options& options = {}) {
  using T = typename OutDerived::Scalar;
  using P = typename ProbsDerived::Scalar;
  static_assert(std::is_same_v<typename TokensDerived::Scalar, T>,
                "mpg: permuted_tokens and out must have the same scalar type");
  return unpermute<T, I, P>(view_of(permuted_tokens), sorted_indices, view_of(probs), mode,
                            mutable_view_of(out), options);
}

template <class TokensDerived, class I, class OutDerived,
          class = std::enable_if_t<detail::IsEigenDense<TokensDerived>::value>>
Status unpermute(const Eigen::DenseBase<TokensDerived>& permuted_tokens,
                 IndexView<I> sorted_indices, Mode mode, const Eigen::DenseBase<OutDerived>& out,
                 const Options& options = {}) {
  using T = typename OutDerived::Scalar;
  static_assert(std::is_same_v<typename TokensDerived::Scalar, T>,
                "mpg: permuted_tokens and out must have the same scalar type");
  return unpermute<T, I>(view_of(permuted_tokens), sorted_indices, mode, mutable_view_of(out),
                         options);
}

}  // namespace mpg
