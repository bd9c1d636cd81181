#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>

#include "mpg/detail/gather_sum.hpp"
#include "mpg/types.hpp"

namespace mpg::detail {

// What each op calls its arguments, so that every message names them as the op's documentation
// does (the checks themselves are shared).
struct OperandNames {
  const char* grad = "permuted_output_grad";
  const char* indices = "sorted_indices";
  const char* topk = "num_topk";
  const char* out = "out";
  const char* weights = "probs";
};

// One call with its element types still run-time values: what both API layers validate, and
// what dispatch() turns into a kernel instantiation.
struct Problem {
  struct Matrix {
    const void* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t row_stride = 0;  // elements
    bool empty() const { return rows == 0 || cols == 0; }
  };
  DType dtype = DType::kFloat32;
  IndexType index_type = IndexType::kInt32;
  Mode mode = Mode::kDropless;
  Matrix grad;
  const void* indices = nullptr;
  int64_t num_indices = 0;
  int64_t topk = 0;
  Matrix out;  // written, despite the const void*: the typed views restore the type
  // How a token's kept copies are summed (docs/contract.md section 7), and whether each is first
  // multiplied by its weight weights[t][k] ([N, K], weights_dtype, independent of dtype).
  Order order = Order::kSequential;
  bool weighted = false;
  Matrix weights;
  DType weights_dtype = DType::kFloat32;
  OperandNames names;

  int64_t elem_size() const { return size_of(dtype); }
  int64_t num_tokens() const { return topk > 0 ? num_indices / topk : 0; }
};

template <class T, class I>
Problem make_problem(ConstMatrixView<T> grad, IndexView<I> indices, int64_t num_topk, Mode mode,
                     MatrixView<T> out) {
  Problem p;
  p.dtype = dtype_of<T>();
  p.index_type = index_type_of<I>();
  p.mode = mode;
  p.grad = {grad.data, grad.rows, grad.cols, grad.row_stride};
  p.indices = indices.data;
  p.num_indices = indices.size;
  p.topk = num_topk;
  p.out = {out.data, out.rows, out.cols, out.row_stride};
  return p;
}

// A weighted problem: K = weights.cols, N = weights.rows (MoeTokenUnpermute with probs).
template <class T, class I, class P>
Problem make_weighted_problem(ConstMatrixView<T> grad, IndexView<I> indices,
                              ConstMatrixView<P> weights, Mode mode, MatrixView<T> out) {
  Problem p = make_problem(grad, indices, weights.cols, mode, out);
  p.weighted = true;
  p.weights = {weights.data, weights.rows, weights.cols, weights.row_stride};
  p.weights_dtype = dtype_of<P>();
  return p;
}

// The typed views of a problem whose dtype is T and index type is I.
template <class T>
ConstMatrixView<T> grad_view(const Problem& p) {
  return {static_cast<const T*>(p.grad.data), p.grad.rows, p.grad.cols, p.grad.row_stride};
}
template <class T>
MatrixView<T> out_view(const Problem& p) {
  // The caller handed out as writable memory; Problem only erased its type.
  return {static_cast<T*>(const_cast<void*>(p.out.data)), p.out.rows, p.out.cols, p.out.row_stride};
}
inline WeightsView weights_view(const Problem& p) {
  return {p.weights.data, p.weights_dtype, p.weights.row_stride};
}
template <class I>
IndexView<I> index_view(const Problem& p) {
  return {static_cast<const I*>(p.indices), p.num_indices};
}

}  // namespace mpg::detail
