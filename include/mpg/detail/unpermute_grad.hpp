#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>
#include <vector>

#include "mpg/detail/dispatch.hpp"
#include "mpg/detail/execute.hpp"
#include "mpg/detail/fast.hpp"
#include "mpg/detail/kernel_table.hpp"
#include "mpg/detail/reference_unpermute_grad.hpp"
#include "mpg/detail/unpermute_grad_problem.hpp"
#include "mpg/detail/validate.hpp"
#include "mpg/options.hpp"
#include "mpg/status.hpp"

namespace mpg::detail {

// Threads split tokens (run_tokens). Every dX row is written by exactly one copy (S is a
// permutation) and every dP element by its own token, so the bits do not depend on who ran which
// token.
template <class T, class P, class I>
void fast_unpermute_grad(const UnpermuteGradArgs<T, P, I>& args, int64_t num_tokens,
                         const Options& options) {
  const UnpermuteGradKernel<T, P, I> kernel =
      select_unpermute_grad<T, P, I>(resolve_isa(options.isa));
  // X rows read, g read, dX written (and probs read, dP written: small beside them).
  const int64_t bytes_moved =
      num_tokens * args.hidden * static_cast<int64_t>(sizeof(T)) * (2 * args.topk + 1);
  UnpermuteGradArgs<T, P, I> a = args;
  a.streaming_stores = num_tokens * args.topk * args.hidden * static_cast<int64_t>(sizeof(T)) >=
                       kStreamingStoreBytes;
  run_tokens(num_tokens, bytes_moved, options,
             [&](int64_t begin, int64_t end) { kernel(a, begin, end); });
}

// Scratch bytes the index check needs (S is a dropless permutation of [0, len(S))).
inline uint64_t unpermute_grad_scratch_bytes(const UnpermuteGradProblem& p) {
  return index_scratch_bytes(Mode::kDropless, p.num_indices, p.tokens.rows);
}

// After check_unpermute_grad_shapes() and check_options(): check the index values, then
// compute. Nothing is written unless every check passed.
inline Status execute_unpermute_grad(const UnpermuteGradProblem& p, uint8_t* scratch,
                                     const Options& options) {
  return dispatch(p.dtype, p.probs_dtype, p.index_type, [&](auto t, auto w, auto i) -> Status {
    using T = typename decltype(t)::type;
    using P = typename decltype(w)::type;
    using I = typename decltype(i)::type;
    const IndexView<I> indices(static_cast<const I*>(p.indices), p.num_indices);
    if (Status s = check_indices(indices, Mode::kDropless, p.tokens.rows, scratch); !s.ok()) {
      return s;
    }
    const ConstMatrixView<P> probs = p.has_probs ? const_matrix<P>(p.probs) : ConstMatrixView<P>();
    const MatrixView<P> probs_grad =
        p.has_probs ? mutable_matrix<P>(p.probs_grad) : MatrixView<P>();
    if (options.path == Path::kReference) {
      reference_unpermute_grad<T, P, I>(const_matrix<T>(p.tokens), const_matrix<T>(p.tokens_grad),
                                        indices, p.topk(), probs,
                                        mutable_matrix<T>(p.permuted_grad), probs_grad);
      return {};
    }
    UnpermuteGradArgs<T, P, I> a;
    a.tokens = static_cast<const T*>(p.tokens.data);
    a.kept_rows = p.tokens.rows;
    a.tokens_stride = p.tokens.row_stride;
    a.tokens_grad = static_cast<const T*>(p.tokens_grad.data);
    a.tokens_grad_stride = p.tokens_grad.row_stride;
    a.indices = indices.data;
    a.topk = p.topk();
    a.probs = probs.data;
    a.probs_stride = probs.row_stride;
    a.permuted_grad = mutable_matrix<T>(p.permuted_grad).data;
    a.permuted_grad_stride = p.permuted_grad.row_stride;
    a.probs_grad = probs_grad.data;
    a.probs_grad_stride = probs_grad.row_stride;
    a.hidden = p.tokens_grad.cols;
    fast_unpermute_grad(a, p.num_tokens(), options);
    return {};
  });
}

// Validates and computes with scratch of its own: the typed API.
inline Status validate_and_execute_unpermute_grad(const UnpermuteGradProblem& p,
                                                  const Options& options) {
  if (Status s = check_options(options); !s.ok()) return s;
  if (Status s = check_unpermute_grad_shapes(p); !s.ok()) return s;
  // Small calls keep the scratch on the stack, as validate_and_execute() does.
  uint8_t stack_scratch[512];
  std::vector<uint8_t> heap_scratch;
  uint8_t* scratch = stack_scratch;
  if (unpermute_grad_scratch_bytes(p) > sizeof(stack_scratch)) {
    heap_scratch.resize(unpermute_grad_scratch_bytes(p));
    scratch = heap_scratch.data();
  }
  return execute_unpermute_grad(p, scratch, options);
}

}  // namespace mpg::detail
