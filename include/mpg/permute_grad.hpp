// mpg: the MoE token-permute backward (aclnnMoeTokenPermuteGrad) on the CPU.
//
// What it computes (docs/contract.md sections 1-3). S = sorted_indices, G = permuted_output_grad, K
// = topk:
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
#include <type_traits>
#include <utility>
#include <vector>

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
  return detail::validate_and_execute<detail::kSequentialSum>(
      detail::make_problem(permuted_output_grad, sorted_indices, num_topk, mode, out), options);
}

// The same call with the template arguments deduced: grad as any view convertible to
// ConstMatrixView<T> (e.g. a MatrixView<T>), indices as an IndexView or a std::vector.
template <class Grad, class Indices, class T>
auto permute_grad(const Grad& permuted_output_grad, const Indices& sorted_indices, int64_t num_topk,
                  Mode mode, MatrixView<T> out, const Options& options = {})
    -> std::enable_if_t<std::is_convertible_v<const Grad&, ConstMatrixView<T>>,
                        decltype(detail::as_index_view(sorted_indices), Status())> {
  return permute_grad(ConstMatrixView<T>(permuted_output_grad),
                      detail::as_index_view(sorted_indices), num_topk, mode, out, options);
}

// A view of an Eigen matrix, Map, Block or vector whose rows are tokens: what MatrixView can
// describe, i.e. elements within a row contiguous and rows evenly spaced. Row-major matrices
// (and their Maps and row blocks) with a unit inner stride qualify, and so does any column
// vector (a VectorXf, or .col(j) of a row-major matrix), read as [rows, 1] with the vector's
// element spacing as row stride. Column-major matrices with more than one column, and Maps
// with a non-unit (or run-time) inner stride, are refused at compile time.
template <class Derived>
MatrixView<const typename Derived::Scalar> view_of(const Eigen::DenseBase<Derived>& m) {
  constexpr bool kColumn = Derived::ColsAtCompileTime == 1;
  static_assert(static_cast<bool>(Derived::IsRowMajor) || kColumn,
                "mpg: pass a row-major Eigen matrix (rows are tokens) or a column vector");
  static_assert(
      static_cast<bool>(int(Eigen::internal::traits<Derived>::Flags) & Eigen::DirectAccessBit),
      "mpg: the Eigen expression must have direct memory access (a Matrix, Map or Block)");
  static_assert(kColumn || Derived::InnerStrideAtCompileTime == 1,
                "mpg: elements within a row must be contiguous: use a Map with OuterStride<>, "
                "not an inner stride");
  const auto& d = m.derived();
  if constexpr (kColumn) {
    // One element per row: consecutive rows are one vector step apart.
    return {d.data(), d.rows(), 1, d.rows() > 1 ? d.innerStride() : 1};
  } else {
    return {d.data(), d.rows(), d.cols(), d.rows() > 1 ? d.outerStride() : d.cols()};
  }
}

// Eigen convention: writable Maps and Blocks are passed as temporaries or const& and written
// through. An expression without write access (a Map or Block of const data) is refused.
template <class Derived>
MatrixView<typename Derived::Scalar> mutable_view_of(const Eigen::DenseBase<Derived>& m) {
  static_assert(static_cast<bool>(int(Eigen::internal::traits<Derived>::Flags) & Eigen::LvalueBit),
                "mpg: out has no write access (a Map or Block of const data)");
  const auto view = view_of(m);
  return {const_cast<typename Derived::Scalar*>(view.data), view.rows, view.cols, view.row_stride};
}
// Called with the argument itself, it also refuses a const Matrix object.
template <class Out, class Derived = std::decay_t<Out>,
          class = std::enable_if_t<std::is_base_of_v<Eigen::DenseBase<Derived>, Derived>>>
MatrixView<typename Derived::Scalar> mutable_view_of(Out&& m) {
  static_assert(!std::is_const_v<std::remove_reference_t<Out>> ||
                    !std::is_base_of_v<Eigen::PlainObjectBase<Derived>, Derived>,
                "mpg: out is a const Eigen matrix: it cannot be written");
  return mutable_view_of(static_cast<const Eigen::DenseBase<Derived>&>(m));
}

// Eigen forms: grad and out as Eigen matrices (out may be a temporary Block or Map), indices as
// an IndexView or a std::vector.
template <class GradDerived, class Indices, class Out,
          class = std::enable_if_t<
              std::is_base_of_v<Eigen::DenseBase<std::decay_t<Out>>, std::decay_t<Out>>>>
auto permute_grad(const Eigen::DenseBase<GradDerived>& permuted_output_grad,
                  const Indices& sorted_indices, int64_t num_topk, Mode mode, Out&& out,
                  const Options& options = {})
    -> decltype(detail::as_index_view(sorted_indices), Status()) {
  using T = typename std::decay_t<Out>::Scalar;
  static_assert(std::is_same_v<typename GradDerived::Scalar, T>,
                "mpg: permuted_output_grad and out must have the same scalar type");
  return permute_grad(view_of(permuted_output_grad), detail::as_index_view(sorted_indices),
                      num_topk, mode, mutable_view_of(std::forward<Out>(out)), options);
}

}  // namespace mpg
