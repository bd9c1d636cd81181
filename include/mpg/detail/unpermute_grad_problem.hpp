#pragma once
#include "mpg/detail/guard.hpp"

#include <array>
#include <cstdint>
#include <limits>

#include "mpg/detail/problem.hpp"
#include "mpg/detail/validate.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"

namespace mpg::detail {

// One MoeTokenUnpermuteGrad call with its element types still run-time values (both API
// layers build one, then validate it and dispatch on its dtypes).
struct UnpermuteGradProblem {
  using Matrix = Problem::Matrix;
  DType dtype = DType::kFloat32;        // X, g and dX
  DType probs_dtype = DType::kFloat32;  // P and dP (meaningless without probs)
  IndexType index_type = IndexType::kInt32;
  bool has_probs = false;
  Matrix tokens;                  // X  [R, H]                  permuted_tokens
  Matrix tokens_grad;             // g  [N, H]                  unpermuted_tokens_grad
  const void* indices = nullptr;  // S [N*K]         sorted_indices
  int64_t num_indices = 0;
  Matrix probs;                   // P  [N, K] (has_probs)
  Matrix permuted_grad;           // dX [N*K, H]           permuted_tokens_grad_out (written)
  Matrix probs_grad;              // dP [N, K] (has_probs)  probs_grad_out (written)
  bool probs_grad_given = false;  // the aclnn layer may pass dP without P (an error)

  int64_t topk() const { return has_probs ? probs.cols : 1; }
  int64_t num_tokens() const { return has_probs ? probs.rows : num_indices; }
};

// Every operand, inputs and outputs, for the overlap checks (an absent probs pair is empty).
inline std::array<Operand, 6> unpermute_grad_operands(const UnpermuteGradProblem& p) {
  const int64_t elem = size_of(p.dtype);
  const int64_t probs_elem = size_of(p.probs_dtype);
  return {output("permuted_tokens_grad_out", p.permuted_grad, elem),
          p.has_probs ? output("probs_grad_out", p.probs_grad, probs_elem) : Operand{},
          input("permuted_tokens", p.tokens, elem),
          input("unpermuted_tokens_grad", p.tokens_grad, elem),
          input("sorted_indices", p.indices, p.num_indices, size_of(p.index_type)),
          p.has_probs ? input("probs", p.probs, probs_elem) : Operand{}};
}

// Every check that needs no index value (docs/contract.md sections 4 and 10): the first phase of
// the two-phase API, and the typed API before it reads S.
inline Status check_unpermute_grad_shapes(const UnpermuteGradProblem& p) {
  const int64_t elem = size_of(p.dtype);
  const int64_t probs_elem = size_of(p.probs_dtype);
  if (p.has_probs != p.probs_grad_given) {
    return p.has_probs ? error(ErrorCode::kNullPointer,
                               "probs_grad_out is null but probs is given: both or neither")
                       : error(ErrorCode::kInvalidArgument,
                               "probs_grad_out is given but probs is null: both or neither");
  }
  if (Status s = check_matrix("permuted_tokens", p.tokens, elem); !s.ok()) return s;
  if (Status s = check_matrix("unpermuted_tokens_grad", p.tokens_grad, elem); !s.ok()) return s;
  if (Status s = check_matrix("permuted_tokens_grad_out", p.permuted_grad, elem); !s.ok()) {
    return s;
  }
  if (p.has_probs) {
    if (Status s = check_matrix("probs", p.probs, probs_elem); !s.ok()) return s;
    if (Status s = check_matrix("probs_grad_out", p.probs_grad, probs_elem); !s.ok()) return s;
  }
  const int64_t index_size = size_of(p.index_type);
  if (p.num_indices < 0 || p.num_indices > std::numeric_limits<int64_t>::max() / index_size) {
    return error(ErrorCode::kShapeMismatch, "sorted_indices has ", p.num_indices,
                 " elements: must be in [0, 2^63 / ", index_size, ")");
  }
  if (p.indices == nullptr && p.num_indices > 0) {
    return error(ErrorCode::kNullPointer, "sorted_indices data is null but it has ", p.num_indices,
                 " elements");
  }
  const int64_t n = p.num_tokens();
  const int64_t k = p.topk();
  if (p.has_probs) {
    if (k < 1) {
      return error(ErrorCode::kInvalidArgument, "probs has shape [", p.probs.rows, ", ",
                   p.probs.cols, "]: its second dim is num_topk and must be >= 1");
    }
    int64_t copies = 0;
    if (!checked_mul(n, k, &copies) || copies != p.num_indices) {
      return error(ErrorCode::kShapeMismatch, "sorted_indices has ", p.num_indices,
                   " elements but probs [", n, ", ", k, "] needs N * K = ", n, " * ", k);
    }
    if (p.probs_grad.rows != n || p.probs_grad.cols != k) {
      return error(ErrorCode::kShapeMismatch, "probs_grad_out has shape [", p.probs_grad.rows, ", ",
                   p.probs_grad.cols, "] but must be probs' shape [", n, ", ", k, "]");
    }
  }
  const int64_t hidden = p.tokens_grad.cols;
  if (p.tokens_grad.rows != n) {
    return error(
        ErrorCode::kShapeMismatch, "unpermuted_tokens_grad has ", p.tokens_grad.rows,
        " rows but must have N = ", n,
        p.has_probs ? " (probs' first dim)" : " (len(sorted_indices), K = 1 without probs)");
  }
  if (p.tokens.cols != hidden) {
    return error(ErrorCode::kShapeMismatch, "permuted_tokens has hidden size ", p.tokens.cols,
                 " but unpermuted_tokens_grad has hidden size ", hidden);
  }
  if (p.tokens.rows > p.num_indices) {
    return error(ErrorCode::kShapeMismatch, "permuted_tokens has ", p.tokens.rows,
                 " rows, more than len(sorted_indices) = ", p.num_indices);
  }
  if (p.permuted_grad.rows != p.num_indices || p.permuted_grad.cols != hidden) {
    return error(ErrorCode::kShapeMismatch, "permuted_tokens_grad_out has shape [",
                 p.permuted_grad.rows, ", ", p.permuted_grad.cols, "] but must be [", p.num_indices,
                 ", ", hidden, "] (len(sorted_indices), H)");
  }
  return check_no_overlap(unpermute_grad_operands(p));
}

// Typed views of a validated problem's matrices.
template <class T>
ConstMatrixView<T> const_matrix(const Problem::Matrix& m) {
  return {static_cast<const T*>(m.data), m.rows, m.cols, m.row_stride};
}
template <class T>
MatrixView<T> mutable_matrix(const Problem::Matrix& m) {
  // The caller handed this matrix as writable memory; the problem only erased its type.
  return {static_cast<T*>(const_cast<void*>(m.data)), m.rows, m.cols, m.row_stride};
}

}  // namespace mpg::detail
