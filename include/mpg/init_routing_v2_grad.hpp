// mpg: MoeInitRoutingV2Grad on the CPU: PermuteGrad's gather-sum in the vendor's binary-bins
// order (the kernel the source document names as padded mode's equivalent).
//
// What it computes. S = expanded_row_idx, G = grad_expanded_x, K = top_k, N = len(S) / K:
//
//   for t in [0, N), h in [0, H):
//     x[k] = float(G[S[t*K + k]][h])                      // only read when kept(k)
//     B = K >= 128 ? 64 : 2^max(0, floor(log2 K) - 1)     // bins
//     for b in [0, B) with 2b < K:  bin[b] = kept(2b) ? x[2b] : +0.0f
//     for even j = 2B, 2B+2, .. < K: if kept(j): bin[(j/2) % B] = bin[(j/2) % B] + x[j]
//     for odd  j = 1, 3, .. < K:     if kept(j): bin[(j/2) % B] = bin[(j/2) % B] + x[j]
//     for s = 1, 2, 4, .. < B:       bin[i] = bin[i] + bin[i+s] for i = 0, 2s, 4s, .. < B
//     out[t][h] = T(bin[0])                               // round to nearest, ties even
//
//   e.g. K=3: (x0+x2)+x1;  K=6: (((x0+x4)+x1)+x5)+(x2+x3);  K=8:
//   ((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7))
//
//   kept(k) = S[t*K+k] < rows(G)  Mode::kDropless: drop_pad_mode 0; rows(G) = active_num, or N*K
//                                                  when active_num = 0; S a permutation of [0, N*K)
//   kept(k) = S[t*K+k] != -1      Mode::kPadded:   drop_pad_mode 1; G is [E*C, H]
//
// Every add is one IEEE fp32 add (no FMA, no reassociation, no FTZ/DAZ). T, I and the error
// rules are those of mpg::permute_grad; the bits are the same on every path and thread count.
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

inline OperandNames init_routing_v2_grad_names() {
  OperandNames names;
  names.grad = "grad_expanded_x";
  names.indices = "expanded_row_idx";
  names.topk = "top_k";
  return names;
}

}  // namespace detail

// Writes out[N, H] = the per-token sums of the kept rows of grad_expanded_x, in binary bins.
template <class T, class I>
Status init_routing_v2_grad(ConstMatrixView<T> grad_expanded_x, IndexView<I> expanded_row_idx,
                            int64_t top_k, Mode mode, MatrixView<T> out,
                            const Options& options = {}) {
  static_assert(kIsElement<T>, "mpg: element type must be float, Eigen::half or Eigen::bfloat16");
  static_assert(kIsIndex<I>, "mpg: index type must be int32_t or int64_t");
  detail::Problem p = detail::make_problem(grad_expanded_x, expanded_row_idx, top_k, mode, out);
  p.order = detail::Order::kBinaryBins;
  p.names = detail::init_routing_v2_grad_names();
  return detail::validate_and_execute<detail::kBinaryBinsSum>(p, options);
}

// The same call with the template arguments deduced: grad_expanded_x as any view convertible to
// ConstMatrixView<T> (e.g. a MatrixView<T>), expanded_row_idx as an IndexView or a std::vector.
template <class Grad, class Indices, class T>
auto init_routing_v2_grad(const Grad& grad_expanded_x, const Indices& expanded_row_idx,
                          int64_t top_k, Mode mode, MatrixView<T> out, const Options& options = {})
    -> std::enable_if_t<std::is_convertible_v<const Grad&, ConstMatrixView<T>>,
                        decltype(detail::as_index_view(expanded_row_idx), Status())> {
  return init_routing_v2_grad(ConstMatrixView<T>(grad_expanded_x),
                              detail::as_index_view(expanded_row_idx), top_k, mode, out, options);
}

// Eigen forms: grad_expanded_x and out as Eigen matrices (out may be a temporary Block or Map),
// with permute_grad's rules for which Eigen objects are accepted (view_of, mutable_view_of).
template <class GradDerived, class Indices, class Out,
          class = std::enable_if_t<
              std::is_base_of_v<Eigen::DenseBase<std::decay_t<Out>>, std::decay_t<Out>>>>
auto init_routing_v2_grad(const Eigen::DenseBase<GradDerived>& grad_expanded_x,
                          const Indices& expanded_row_idx, int64_t top_k, Mode mode, Out&& out,
                          const Options& options = {})
    -> decltype(detail::as_index_view(expanded_row_idx), Status()) {
  using T = typename std::decay_t<Out>::Scalar;
  static_assert(std::is_same_v<typename GradDerived::Scalar, T>,
                "mpg: grad_expanded_x and out must have the same scalar type");
  return init_routing_v2_grad(view_of(grad_expanded_x), detail::as_index_view(expanded_row_idx),
                              top_k, mode, mutable_view_of(std::forward<Out>(out)), options);
}

}  // namespace mpg
