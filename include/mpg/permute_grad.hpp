// mpg: the MoE token-permute backward (aclnnMoeTokenPermuteGrad) on the CPU.
//
// What it computes (SPEC sections 1-3). S = sorted_indices, G = permuted_output_grad, K = topk:
//
//   for t in [0, N), N = len(S) / K:              // each out row: one thread, one pass
//     for h in [0, H):
//       float acc = kept(S[t*K]) ? float(G[S[t*K]][h]) : +0.0f   // assigned: -0.0 survives
//       for k in [1, K):                                        // ascending k, one add each:
//         if kept(S[t*K + k]): acc = acc + float(G[S[t*K+k]][h])  // fp32, no FMA, no FTZ/DAZ
//       out[t][h] = T(acc)                                      // round to nearest, ties even
//
//   kept(s) = s < rows(G)   in Mode::kDropless (S is a permutation of [0, N*K))
//   kept(s) = s != -1       in Mode::kPadded   (S in [-1, E*C), G is [E*C, H])
//
// T is float, Eigen::half or Eigen::bfloat16 (G and out alike); S is int32_t or int64_t. The bits
// of out are the same for every path, SIMD kernel and thread count. Bad input returns a Status
// naming the argument, rule, value and position, and leaves out untouched.
#pragma once

#ifndef MPG_INSIDE_PUBLIC_HEADER
#define MPG_INSIDE_PUBLIC_HEADER
#endif

#include <cstdint>

#include <Eigen/Core>

#include "mpg/detail/execute.hpp"
#include "mpg/detail/problem.hpp"
#include "mpg/options.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"

namespace mpg {

// Writes out[N, H] = the per-token sums of the kept gradient rows.
template <class T, class I>
Status permute_grad(ConstMatrixView<T> permuted_output_grad, IndexView<I> sorted_indices,
                    int64_t num_topk, Mode mode, MatrixView<T> out, const Options& options = {}) {
  static_assert(kIsElement<T>, "mpg: element type must be float, Eigen::half or Eigen::bfloat16");
  static_assert(kIsIndex<I>, "mpg: index type must be int32_t or int64_t");
  return detail::validate_and_execute(
      detail::make_problem(permuted_output_grad, sorted_indices, num_topk, mode, out), options);
}

// Views of Eigen row-major matrices, Maps and row blocks (anything with direct row-major access).
template <class Derived>
MatrixView<const typename Derived::Scalar> view_of(const Eigen::DenseBase<Derived>& m) {
  static_assert(static_cast<bool>(Derived::IsRowMajor) || Derived::ColsAtCompileTime == 1,
                "mpg: pass a row-major Eigen matrix (rows are tokens)");
  static_assert(
      static_cast<bool>(int(Eigen::internal::traits<Derived>::Flags) & Eigen::DirectAccessBit),
      "mpg: the Eigen expression must have direct memory access (a Matrix, Map or Block)");
  const auto& d = m.derived();
  return {d.data(), d.rows(), d.cols(), d.rows() > 1 ? d.outerStride() : d.cols()};
}

// Eigen convention: writable Maps and Blocks are passed as const& and written through.
template <class Derived>
MatrixView<typename Derived::Scalar> mutable_view_of(const Eigen::DenseBase<Derived>& m) {
  const auto view = view_of(m);
  return {const_cast<typename Derived::Scalar*>(view.data), view.rows, view.cols, view.row_stride};
}

template <class GradDerived, class I, class OutDerived>
Status permute_grad(const Eigen::DenseBase<GradDerived>& permuted_output_grad,
                    IndexView<I> sorted_indices, int64_t num_topk, Mode mode,
                    const Eigen::DenseBase<OutDerived>& out, const Options& options = {}) {
  using T = typename OutDerived::Scalar;
  static_assert(std::is_same_v<typename GradDerived::Scalar, T>,
                "mpg: permuted_output_grad and out must have the same scalar type");
  return permute_grad<T, I>(view_of(permuted_output_grad), sorted_indices, num_topk, mode,
                            mutable_view_of(out), options);
}

}  // namespace mpg
