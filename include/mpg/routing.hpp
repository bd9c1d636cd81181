// mpg: building sorted_indices from routing decisions, and the forward permute.
//
// Tests, examples and benchmarks use these to make realistic inputs; users can use them to run
// the forward on the CPU. Copies are ordered by (expert, t*K + k): a stable sort by expert.
#pragma once

#ifndef MPG_INSIDE_PUBLIC_HEADER
#define MPG_INSIDE_PUBLIC_HEADER
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "mpg/detail/problem.hpp"
#include "mpg/detail/validate.hpp"
#include "mpg/permute_grad.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"

namespace mpg {

namespace detail {

// Validates expert ids [N, K] in [0, num_experts) and counts the copies per expert.
template <class E>
Status count_per_expert(IndexView<E> expert_ids, int64_t num_topk, int64_t num_experts,
                        std::vector<int64_t>* counts) {
  if (num_topk < 1) {
    return error(ErrorCode::kInvalidArgument, "num_topk = ", num_topk, " must be >= 1");
  }
  if (num_experts < 1) {
    return error(ErrorCode::kInvalidArgument, "num_experts = ", num_experts, " must be >= 1");
  }
  if (expert_ids.size < 0 || expert_ids.size % num_topk != 0) {
    return error(ErrorCode::kShapeMismatch, "expert_ids has ", expert_ids.size,
                 " elements, which is not a multiple of num_topk = ", num_topk);
  }
  if (expert_ids.data == nullptr && expert_ids.size > 0) {
    return error(ErrorCode::kNullPointer, "expert_ids data is null");
  }
  counts->assign(static_cast<size_t>(num_experts), 0);
  for (int64_t i = 0; i < expert_ids.size; ++i) {
    const int64_t e = expert_ids.data[i];
    if (e < 0 || e >= num_experts) {
      return error(ErrorCode::kIndexOutOfRange, "expert_ids[", i, "] = ", e,
                   " is out of range [0, ", num_experts, ")");
    }
    ++(*counts)[static_cast<size_t>(e)];
  }
  return {};
}

}  // namespace detail

// Dropless routing. expert_ids is [N, K] row-major (token t's k-th expert at [t*K + k]).
// Writes sorted_indices[t*K + k] = position of copy (t, k) in the expert-sorted order, and
// *num_rows = R, the rows of permuted_output_grad: num_out_tokens if given (clamped to N*K, as
// the forward keeps only the first R sorted rows), else N*K.
//
// Against mpg::token_permute (MoeTokenPermute, token_permute.hpp) on the same expert ids:
// sorted_indices are identical (the same stable order), and for num_out_tokens >= 1 R equals
// its n, so permute() below with these indices writes the same rows. They differ only in
// num_out_tokens <= 0: here 0 keeps no copy and a negative value is an error, where
// token_permute reads 0 as "keep all" and a negative value as counting back from N*K. Here
// ids must also be < num_experts (token_permute: < 2^24 - 1), and int64 indices are allowed.
template <class I, class E>
Status route_dropless(IndexView<E> expert_ids, int64_t num_topk, int64_t num_experts,
                      std::optional<int64_t> num_out_tokens, std::vector<I>* sorted_indices,
                      int64_t* num_rows) {
  std::vector<int64_t> next;
  if (Status s = detail::count_per_expert(expert_ids, num_topk, num_experts, &next); !s.ok()) {
    return s;
  }
  if (num_out_tokens && *num_out_tokens < 0) {
    return detail::error(ErrorCode::kInvalidArgument, "num_out_tokens = ", *num_out_tokens,
                         " must be >= 0");
  }
  int64_t start = 0;  // counts -> first position of each expert
  for (int64_t& n : next) {
    const int64_t count = n;
    n = start;
    start += count;
  }
  sorted_indices->resize(static_cast<size_t>(expert_ids.size));
  for (int64_t i = 0; i < expert_ids.size; ++i) {
    (*sorted_indices)[static_cast<size_t>(i)] = static_cast<I>(next[expert_ids.data[i]]++);
  }
  *num_rows = num_out_tokens ? std::min(*num_out_tokens, expert_ids.size) : expert_ids.size;
  return {};
}

// The same with expert_ids as a std::vector: route_dropless(ids, K, E, R, &sorted, &rows), the
// index types deduced from the arguments.
template <class I, class E>
Status route_dropless(const std::vector<E>& expert_ids, int64_t num_topk, int64_t num_experts,
                      std::optional<int64_t> num_out_tokens, std::vector<I>* sorted_indices,
                      int64_t* num_rows) {
  return route_dropless(IndexView<E>(expert_ids), num_topk, num_experts, num_out_tokens,
                        sorted_indices, num_rows);
}

// Padded (capacity) routing: expert e keeps its first `capacity` copies in (t, k) order at rows
// e*capacity + slot of a [num_experts * capacity, H] buffer; the rest get -1.
template <class I, class E>
Status route_padded(IndexView<E> expert_ids, int64_t num_topk, int64_t num_experts,
                    int64_t capacity, std::vector<I>* sorted_indices) {
  std::vector<int64_t> used;
  if (Status s = detail::count_per_expert(expert_ids, num_topk, num_experts, &used); !s.ok()) {
    return s;
  }
  int64_t rows = 0;
  if (capacity < 0 || !detail::checked_mul(num_experts, capacity, &rows) ||
      rows > static_cast<int64_t>(std::numeric_limits<I>::max())) {
    return detail::error(
        ErrorCode::kInvalidArgument, "capacity = ", capacity,
        " must be >= 0 with num_experts * capacity representable in the index type");
  }
  std::fill(used.begin(), used.end(), 0);
  sorted_indices->resize(static_cast<size_t>(expert_ids.size));
  for (int64_t i = 0; i < expert_ids.size; ++i) {
    const int64_t e = expert_ids.data[i];
    int64_t& slot = used[static_cast<size_t>(e)];
    (*sorted_indices)[static_cast<size_t>(i)] =
        slot < capacity ? static_cast<I>(e * capacity + slot++) : I{-1};
  }
  return {};
}

// The same with expert_ids as a std::vector.
template <class I, class E>
Status route_padded(const std::vector<E>& expert_ids, int64_t num_topk, int64_t num_experts,
                    int64_t capacity, std::vector<I>* sorted_indices) {
  return route_padded(IndexView<E>(expert_ids), num_topk, num_experts, capacity, sorted_indices);
}

// The forward permute: permuted[S[t*K + k]] = tokens[t] for every kept copy. tokens is [N, H];
// permuted is [R, H] (dropless) or [E*C, H] (padded), and rows no copy lands in (capacity
// padding) are set to zero. The shape and index rules are permute_grad's, with permuted in G's
// place and tokens in out's; permuted, the one output, must not overlap tokens or sorted_indices.
template <class T, class I>
Status permute(ConstMatrixView<T> tokens, IndexView<I> sorted_indices, int64_t num_topk, Mode mode,
               MatrixView<T> permuted) {
  static_assert(kIsElement<T>, "mpg: element type must be float, Eigen::half or Eigen::bfloat16");
  // check_shape_rules only reads the Problem; its out slot holds the (read-only) tokens.
  detail::Problem p = detail::make_problem(
      ConstMatrixView<T>(permuted), sorted_indices, num_topk, mode,
      MatrixView<T>(const_cast<T*>(tokens.data), tokens.rows, tokens.cols, tokens.row_stride));
  p.names.grad = "permuted";
  p.names.out = "tokens";
  if (Status s = detail::check_shape_rules(p); !s.ok()) return s;
  const int64_t elem_size = p.elem_size();
  const std::array<detail::Operand, 3> operands = {
      detail::output("permuted", p.grad, elem_size), detail::input("tokens", p.out, elem_size),
      detail::input("sorted_indices", p.indices, p.num_indices, size_of(p.index_type))};
  if (Status s = detail::check_no_overlap(operands); !s.ok()) return s;
  std::vector<uint8_t> scratch(
      detail::index_scratch_bytes(mode, sorted_indices.size, permuted.rows));
  if (Status s = detail::check_indices(sorted_indices, mode, permuted.rows, scratch.data());
      !s.ok()) {
    return s;
  }
  if (mode == Mode::kPadded) {
    for (int64_t r = 0; r < permuted.rows; ++r) {
      std::fill(permuted.row(r), permuted.row(r) + permuted.cols, T(0.0f));
    }
  }
  for (int64_t i = 0; i < sorted_indices.size; ++i) {
    const int64_t s = sorted_indices.data[i];
    if (s < 0 || s >= permuted.rows) continue;  // dropped
    const T* src = tokens.row(i / num_topk);
    std::copy(src, src + tokens.cols, permuted.row(s));
  }
  return {};
}

// The same call with the template arguments deduced: tokens as any view convertible to
// ConstMatrixView<T> (e.g. MatrixView(ptr, N, H)), indices as an IndexView or a std::vector.
template <class Tokens, class Indices, class T>
auto permute(const Tokens& tokens, const Indices& sorted_indices, int64_t num_topk, Mode mode,
             MatrixView<T> permuted)
    -> std::enable_if_t<std::is_convertible_v<const Tokens&, ConstMatrixView<T>>,
                        decltype(detail::as_index_view(sorted_indices), Status())> {
  return permute(ConstMatrixView<T>(tokens), detail::as_index_view(sorted_indices), num_topk, mode,
                 permuted);
}

// Eigen forms: tokens and permuted as Eigen matrices (permuted may be a temporary Block or Map),
// with permute_grad's rules for which Eigen objects are accepted (view_of, mutable_view_of).
template <class TokensDerived, class Indices, class Permuted,
          class = std::enable_if_t<
              std::is_base_of_v<Eigen::DenseBase<std::decay_t<Permuted>>, std::decay_t<Permuted>>>>
auto permute(const Eigen::DenseBase<TokensDerived>& tokens, const Indices& sorted_indices,
             int64_t num_topk, Mode mode, Permuted&& permuted)
    -> decltype(detail::as_index_view(sorted_indices), Status()) {
  using T = typename std::decay_t<Permuted>::Scalar;
  static_assert(std::is_same_v<typename TokensDerived::Scalar, T>,
                "mpg: tokens and permuted must have the same scalar type");
  return permute(view_of(tokens), detail::as_index_view(sorted_indices), num_topk, mode,
                 mutable_view_of(std::forward<Permuted>(permuted)));
}

}  // namespace mpg
