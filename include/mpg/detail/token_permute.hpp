#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>

#include "mpg/detail/execute.hpp"
#include "mpg/detail/overlap.hpp"
#include "mpg/detail/problem.hpp"
#include "mpg/detail/token_permute_args.hpp"
#include "mpg/detail/token_permute_fast.hpp"
#include "mpg/detail/token_permute_reference.hpp"
#include "mpg/detail/validate.hpp"
#include "mpg/options.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"

namespace mpg::detail {

// Rows of permute_tokens_out: num_out_tokens <= 0 counts from the end of the N*K copies, then
// the count is clamped to [0, N*K]. Never an error (the device clamps the same way).
inline int64_t token_permute_rows(int64_t num_out_tokens, int64_t num_copies) {
  int64_t n = num_out_tokens;
  if (n <= 0) {
    // n + num_copies cannot overflow: n <= 0 and num_copies >= 0.
    n += num_copies;
  }
  return std::clamp<int64_t>(n, 0, num_copies);
}

// Ranks are written as int32: N*K copies need ranks up to N*K - 1.
inline constexpr int64_t kMaxCopies = int64_t{1} << 31;

// One MoeTokenPermute call with the token type erased: the op only moves rows of
// elem_size * H bytes, so the kernels depend on the expert-id type alone.
struct TokenPermuteProblem {
  int64_t elem_size = 0;  // bytes per token element (4, 2 or 1)
  IndexType id_type = IndexType::kInt32;
  Problem::Matrix tokens;  // [N, H]
  const void* expert_ids = nullptr;
  int64_t num_ids = 0;  // N*K, row-major [N, K]
  int64_t topk = 0;
  int64_t num_out_tokens = 0;  // as the caller gave it; rows() applies the rule
  Problem::Matrix permuted;    // [n, H], written
  int32_t* sorted_indices = nullptr;
  int64_t num_sorted = 0;  // must be N*K

  int64_t num_tokens() const { return topk > 0 ? num_ids / topk : 0; }
  int64_t rows() const { return token_permute_rows(num_out_tokens, num_ids); }
};

// Both outputs, then the inputs: each output is checked against every other operand.
inline std::array<Operand, 4> token_permute_operands(const TokenPermuteProblem& p) {
  return {output("permute_tokens_out", p.permuted, p.elem_size),
          output("sorted_indices_out", p.sorted_indices, p.num_sorted, sizeof(int32_t)),
          input("tokens", p.tokens, p.elem_size),
          input("indices", p.expert_ids, p.num_ids, size_of(p.id_type))};
}

// Everything knowable without reading expert ids (phase one of the two-phase API).
inline Status check_token_permute_shapes(const TokenPermuteProblem& p) {
  if (Status s = check_matrix("tokens", p.tokens, p.elem_size); !s.ok()) return s;
  if (Status s = check_matrix("permute_tokens_out", p.permuted, p.elem_size); !s.ok()) return s;
  if (p.topk < 1) {
    return error(ErrorCode::kInvalidArgument, "num_topk = ", p.topk, " must be >= 1");
  }
  if (p.num_ids < 0 || p.num_ids % p.topk != 0) {
    return error(ErrorCode::kShapeMismatch, "indices has ", p.num_ids,
                 " elements, which is not a non-negative multiple of num_topk = ", p.topk);
  }
  if (p.num_ids > kMaxCopies) {
    return error(ErrorCode::kShapeMismatch, "indices has ", p.num_ids,
                 " elements: at most 2^31 copies (sorted_indices_out holds int32 ranks)");
  }
  if (p.expert_ids == nullptr && p.num_ids > 0) {
    return error(ErrorCode::kNullPointer, "indices data is null but it has ", p.num_ids,
                 " elements");
  }
  if (p.tokens.rows != p.num_tokens()) {
    return error(ErrorCode::kShapeMismatch, "tokens has ", p.tokens.rows,
                 " rows but indices has N = ", p.num_tokens(), " rows of num_topk = ", p.topk);
  }
  if (p.permuted.rows != p.rows()) {
    return error(ErrorCode::kShapeMismatch, "permute_tokens_out has ", p.permuted.rows,
                 " rows but must have n = ", p.rows(), " (num_out_tokens = ", p.num_out_tokens,
                 " with N*K = ", p.num_ids, ")");
  }
  if (p.permuted.cols != p.tokens.cols) {
    return error(ErrorCode::kShapeMismatch, "permute_tokens_out has hidden size ", p.permuted.cols,
                 " but tokens has hidden size ", p.tokens.cols);
  }
  if (p.num_sorted != p.num_ids) {
    return error(ErrorCode::kShapeMismatch, "sorted_indices_out has ", p.num_sorted,
                 " elements but must have N*K = ", p.num_ids);
  }
  if (p.sorted_indices == nullptr && p.num_sorted > 0) {
    return error(ErrorCode::kNullPointer, "sorted_indices_out data is null but it has ",
                 p.num_sorted, " elements");
  }
  return check_no_overlap(token_permute_operands(p));
}

// The device sorts expert ids as fp32 keys, exact below 2^24; it reserves 2^24 - 1.
inline constexpr int64_t kExpertIdLimit = (int64_t{1} << 24) - 1;

// Phase two's check of the values, before any output byte is written. Returns the largest id
// (-1 when there are none), which sizes the sort's histogram.
template <class E>
Status check_expert_ids(IndexView<E> ids, int64_t topk, int64_t* max_id) {
  E largest = -1;
  bool bad = false;
  for (int64_t i = 0; i < ids.size; ++i) {  // branch-free body: vectorizes
    const E e = ids.data[i];
    bad |= e < 0 || e >= static_cast<E>(kExpertIdLimit);
    largest = std::max(largest, e);
  }
  if (bad) {
    for (int64_t i = 0; i < ids.size; ++i) {
      const int64_t e = ids.data[i];
      if (e < 0 || e >= kExpertIdLimit) {
        return error(ErrorCode::kIndexOutOfRange, "indices[", i / topk, "][", i % topk,
                     "] (element ", i, ") = ", e, " is out of range [0, ", kExpertIdLimit,
                     "): expert ids must be in [0, 2^24 - 1) (the device sorts them as fp32 "
                     "keys)");
      }
    }
  }
  *max_id = static_cast<int64_t>(largest);
  return {};
}

// Scratch (the two-phase workspace) the fast path needs: see token_permute_fast.hpp.
inline uint64_t token_permute_scratch_bytes(int64_t num_ids) {
  return num_ids == 0 ? 0 : expert_sort_scratch_bytes(num_ids);
}

// After check_token_permute_shapes() and check_options() passed: check the expert ids, then
// compute. `scratch` holds token_permute_scratch_bytes() bytes (any alignment).
inline Status execute_token_permute(const TokenPermuteProblem& p, uint8_t* scratch,
                                    const Options& options) {
  const auto run = [&](auto id_tag) -> Status {
    using E = typename decltype(id_tag)::type;
    const IndexView<E> ids(static_cast<const E*>(p.expert_ids), p.num_ids);
    int64_t max_id = -1;
    if (Status s = check_expert_ids(ids, p.topk, &max_id); !s.ok()) return s;
    const TokenPermuteArgs<E> args{static_cast<const uint8_t*>(p.tokens.data),
                                   p.tokens.row_stride * p.elem_size,
                                   p.tokens.cols * p.elem_size,
                                   ids.data,
                                   p.topk,
                                   p.num_tokens(),
                                   static_cast<uint8_t*>(const_cast<void*>(p.permuted.data)),
                                   p.permuted.row_stride * p.elem_size,
                                   p.rows(),
                                   p.sorted_indices};
    if (options.path == Path::kReference) {
      reference_token_permute(args);
    } else {
      fast_token_permute(args, max_id, scratch, options);
    }
    return {};
  };
  return visit_index_type(AllIndexTypes{}, p.id_type, run);
}

// The typed API's path: validates and computes with scratch of its own.
inline Status validate_and_execute_token_permute(const TokenPermuteProblem& p,
                                                 const Options& options) {
  if (Status s = check_options(options); !s.ok()) return s;
  if (Status s = check_token_permute_shapes(p); !s.ok()) return s;
  // Uninitialized: the sort clears what it uses (a zero-filled vector cost a pass of its own).
  const uint64_t bytes =
      options.path == Path::kReference ? 0 : token_permute_scratch_bytes(p.num_ids);
  const std::unique_ptr<uint8_t[]> scratch(bytes > 0 ? new uint8_t[bytes] : nullptr);
  return execute_token_permute(p, scratch.get(), options);
}

}  // namespace mpg::detail
