// mpg: the MoE token permute forward (aclnnMoeTokenPermute) on the CPU.
//
// What it computes. tokens is [N, H], expert_ids is [N, K] (token t's k-th expert at [t*K + k]):
//
//   copies i = t*K + k, i in [0, N*K), ranked by expert_ids[i] ascending, ties by ascending i
//   (a stable sort); rank(i) in [0, N*K)
//   n = num_out_tokens <= 0 ? num_out_tokens + N*K : num_out_tokens, clamped to [0, N*K]
//   for i in [0, N*K):
//     sorted_indices[i] = rank(i)                           // int32
//     if rank(i) < n: permuted_tokens[rank(i)] = tokens[i / K]   // a byte copy of the row
//
// Copies ranked >= n (the highest expert ids) are dropped; permuted_tokens is [n, H]
// (token_permute_rows() gives n). Nothing is summed or converted: rows are copied bit for bit,
// NaN payloads included, so float, Eigen::half, Eigen::bfloat16 and int8_t tokens all work.
// Expert ids are int32_t or int64_t in [0, 2^24 - 1) (the device sorts them as fp32 keys).
// The padded (capacity) layout is not offered: the device refuses padded_mode = true too.
//
// Feeding sorted_indices with R = n rows of gradient to mpg::permute_grad (Mode::kDropless) is
// the backward of this op. mpg::route_dropless computes the same sorted_indices (see
// routing.hpp for how its num_out_tokens differs). Bad input returns a Status naming the
// argument, rule, value and position, and leaves both outputs untouched; the outputs are the
// same bytes for every path and thread count.
#pragma once

#ifndef MPG_INSIDE_PUBLIC_HEADER
#define MPG_INSIDE_PUBLIC_HEADER
#endif

#include <cstdint>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "mpg/detail/token_permute.hpp"
#include "mpg/options.hpp"
#include "mpg/permute_grad.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"

namespace mpg {

// n, the rows of permuted_tokens, for num_out_tokens and N*K copies (never an error).
inline int64_t token_permute_rows(int64_t num_out_tokens, int64_t num_copies) {
  return detail::token_permute_rows(num_out_tokens, num_copies);
}

namespace detail {
template <class T>
struct NonDeduced {
  using type = T;
};
}  // namespace detail

// Writes permuted_tokens[n, H] and sorted_indices[N*K]. T is deduced from permuted_tokens, so
// tokens may be passed as a mutable view too.
template <class T, class E>
Status token_permute(typename detail::NonDeduced<ConstMatrixView<T>>::type tokens,
                     IndexView<E> expert_ids, int64_t num_topk, int64_t num_out_tokens,
                     MatrixView<T> permuted_tokens, MutableIndexView<int32_t> sorted_indices,
                     const Options& options = {}) {
  static_assert(kIsToken<T>,
                "mpg: token type must be float, Eigen::half, Eigen::bfloat16 or int8_t");
  static_assert(kIsIndex<E>, "mpg: expert ids must be int32_t or int64_t");
  detail::TokenPermuteProblem p;
  p.elem_size = sizeof(T);
  p.id_type = index_type_of<E>();
  p.tokens = {tokens.data, tokens.rows, tokens.cols, tokens.row_stride};
  p.expert_ids = expert_ids.data;
  p.num_ids = expert_ids.size;
  p.topk = num_topk;
  p.num_out_tokens = num_out_tokens;
  p.permuted = {permuted_tokens.data, permuted_tokens.rows, permuted_tokens.cols,
                permuted_tokens.row_stride};
  p.sorted_indices = sorted_indices.data;
  p.num_sorted = sorted_indices.size;
  return detail::validate_and_execute_token_permute(p, options);
}

template <class T, class E>
Status token_permute(typename detail::NonDeduced<ConstMatrixView<T>>::type tokens,
                     const std::vector<E>& expert_ids, int64_t num_topk, int64_t num_out_tokens,
                     MatrixView<T> permuted_tokens, MutableIndexView<int32_t> sorted_indices,
                     const Options& options = {}) {
  return token_permute<T, E>(tokens, IndexView<E>(expert_ids), num_topk, num_out_tokens,
                             permuted_tokens, sorted_indices, options);
}

// Eigen form: tokens [N, H] and permuted_tokens [n, H] row-major; expert_ids an [N, K] row-major
// integer matrix (K = its columns) with contiguous rows; sorted_indices a contiguous int32
// vector of N*K (e.g. Eigen::VectorXi).
template <class TokensDerived, class IdsDerived, class OutDerived, class SortedDerived>
Status token_permute(const Eigen::DenseBase<TokensDerived>& tokens,
                     const Eigen::DenseBase<IdsDerived>& expert_ids, int64_t num_out_tokens,
                     const Eigen::DenseBase<OutDerived>& permuted_tokens,
                     const Eigen::DenseBase<SortedDerived>& sorted_indices,
                     const Options& options = {}) {
  using T = typename OutDerived::Scalar;
  using E = typename IdsDerived::Scalar;
  static_assert(std::is_same_v<typename TokensDerived::Scalar, T>,
                "mpg: tokens and permuted_tokens must have the same scalar type");
  static_assert(std::is_same_v<typename SortedDerived::Scalar, int32_t>,
                "mpg: sorted_indices must be an int32 vector");
  static_assert(static_cast<bool>(int(Eigen::internal::traits<SortedDerived>::Flags) &
                                  Eigen::DirectAccessBit),
                "mpg: sorted_indices must have direct memory access (a Matrix, Map or Block)");
  const auto ids = view_of(expert_ids);
  if (ids.rows > 1 && ids.row_stride != ids.cols) {
    return detail::error(ErrorCode::kInvalidArgument, "expert_ids row stride ", ids.row_stride,
                         " differs from its ", ids.cols, " columns: rows must be contiguous");
  }
  const auto& sorted = sorted_indices.derived();
  if (sorted.size() > 1 && sorted.innerStride() != 1) {
    return detail::error(ErrorCode::kInvalidArgument, "sorted_indices inner stride ",
                         sorted.innerStride(), " must be 1 (contiguous)");
  }
  return token_permute<T, E>(view_of(tokens), IndexView<E>(ids.data, ids.rows * ids.cols), ids.cols,
                             num_out_tokens, mutable_view_of(permuted_tokens),
                             {const_cast<int32_t*>(sorted.data()), sorted.size()}, options);
}

}  // namespace mpg
