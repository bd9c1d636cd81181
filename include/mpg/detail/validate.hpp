#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>

#include "mpg/detail/assert.hpp"
#include "mpg/detail/overlap.hpp"
#include "mpg/detail/problem.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"

namespace mpg::detail {

template <class... Args>
Status error(ErrorCode code, const Args&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  return Status(code, message.str());
}

// a * b without signed overflow; false when it does not fit.
inline bool checked_mul(int64_t a, int64_t b, int64_t* product) {
  return !__builtin_mul_overflow(a, b, product);
}

// Bytes spanned by a rows x cols view with the given row stride, or -1 when it does not fit in
// int64 (a descriptor no real buffer can back).
inline int64_t extent_bytes(int64_t rows, int64_t cols, int64_t row_stride, int64_t elem_size) {
  if (rows == 0 || cols == 0) return 0;
  int64_t last_row = 0;
  int64_t elems = 0;
  int64_t bytes = 0;
  if (!checked_mul(rows - 1, row_stride, &last_row) ||
      __builtin_add_overflow(last_row, cols, &elems) || !checked_mul(elems, elem_size, &bytes)) {
    return -1;
  }
  return bytes;
}

inline ByteRows byte_rows(const Problem::Matrix& m, int64_t elem_size) {
  return ByteRows{reinterpret_cast<uintptr_t>(m.data), m.rows, m.cols * elem_size,
                  m.row_stride * elem_size};
}

// One tensor argument of an op, by name, as the bytes it covers. Every op lists all of its
// operands, inputs and outputs alike, and check_no_overlap() checks them the same way.
struct Operand {
  const char* name = "";
  ByteRows bytes;
  bool writable = false;
};
inline Operand input(const char* name, const Problem::Matrix& m, int64_t elem_size) {
  return {name, byte_rows(m, elem_size), false};
}
inline Operand output(const char* name, const Problem::Matrix& m, int64_t elem_size) {
  return {name, byte_rows(m, elem_size), true};
}
// A contiguous array of `count` elements of `elem_size` bytes.
inline Operand input(const char* name, const void* data, int64_t count, int64_t elem_size) {
  return {name, ByteRows{reinterpret_cast<uintptr_t>(data), 1, count * elem_size, 0}, false};
}
inline Operand output(const char* name, void* data, int64_t count, int64_t elem_size) {
  return {name, ByteRows{reinterpret_cast<uintptr_t>(data), 1, count * elem_size, 0}, true};
}

// Every writable operand against every other operand, inputs and outputs: writing one must not
// change another's bytes. Inputs may share memory with each other (reading twice is harmless).
// Operands are checked in the order given; the message names the writable one first.
template <class Operands>
Status check_no_overlap(const Operands& operands) {
  for (auto w = std::begin(operands); w != std::end(operands); ++w) {
    if (!w->writable) continue;
    for (auto o = std::begin(operands); o != std::end(operands); ++o) {
      if (o == w || (o->writable && o < w)) continue;  // each pair of outputs once
      if (overlaps(w->bytes, o->bytes)) {
        return error(ErrorCode::kOverlap, w->name, " overlaps ", o->name, " in memory");
      }
    }
  }
  return {};
}

// The workspace is written by the second phase, so it must not share a byte with any operand.
template <class Operands>
Status check_workspace_overlap(const Operands& operands, const void* workspace, uint64_t bytes) {
  const ByteRows scratch{reinterpret_cast<uintptr_t>(workspace), 1, static_cast<int64_t>(bytes), 0};
  for (const Operand& o : operands) {
    if (overlaps(scratch, o.bytes)) {
      return error(ErrorCode::kOverlap, "workspace overlaps ", o.name, " in memory");
    }
  }
  return {};
}

// Checks of one matrix argument that do not depend on the others: non-negative sizes, a stride
// that keeps rows apart, an extent that fits in 64-bit byte offsets, and data when non-empty.
inline Status check_matrix(const char* name, const Problem::Matrix& m, int64_t elem_size) {
  if (m.rows < 0 || m.cols < 0) {
    return error(ErrorCode::kShapeMismatch, name, " has shape [", m.rows, ", ", m.cols,
                 "]: dimensions must be >= 0");
  }
  if (m.data == nullptr && !m.empty()) {
    return error(ErrorCode::kNullPointer, name, " data is null but the tensor has ", m.rows, " x ",
                 m.cols, " elements");
  }
  if (m.rows > 1 && m.row_stride < m.cols) {
    return error(ErrorCode::kInvalidArgument, name, " row stride ", m.row_stride,
                 " is smaller than its row length ", m.cols, ": rows would overlap");
  }
  const int64_t extent = extent_bytes(m.rows, m.cols, m.row_stride, elem_size);
  if (extent < 0 || reinterpret_cast<uintptr_t>(m.data) >
                        std::numeric_limits<uintptr_t>::max() - static_cast<uint64_t>(extent)) {
    return error(ErrorCode::kShapeMismatch, name, " with shape [", m.rows, ", ", m.cols,
                 "] and row stride ", m.row_stride, " does not fit in the address space");
  }
  return {};
}

// A problem's operands, in the order their overlaps are reported: out, G, S, and the weights
// when there are any (else an empty operand, which overlaps nothing).
inline std::array<Operand, 4> operands(const Problem& p) {
  const OperandNames& n = p.names;
  return {output(n.out, p.out, p.elem_size()), input(n.grad, p.grad, p.elem_size()),
          input(n.indices, p.indices, p.num_indices, size_of(p.index_type)),
          p.weighted ? input(n.weights, p.weights, size_of(p.weights_dtype)) : Operand{}};
}

// The shape rules (docs/contract.md, "Bad input"), everything but overlaps, in the op's own
// argument names (p.names).
inline Status check_shape_rules(const Problem& p) {
  const OperandNames& n = p.names;
  if (Status s = check_matrix(n.grad, p.grad, p.elem_size()); !s.ok()) return s;
  if (Status s = check_matrix(n.out, p.out, p.elem_size()); !s.ok()) return s;
  if (p.weighted) {
    if (!is_arithmetic(p.weights_dtype)) {
      return error(ErrorCode::kUnsupportedDtype, n.weights, " dtype ", name_of(p.weights_dtype),
                   " is not supported: must be float32, float16 or bfloat16");
    }
    if (Status s = check_matrix(n.weights, p.weights, size_of(p.weights_dtype)); !s.ok()) return s;
  }
  const auto index_size = size_of(p.index_type);
  if (p.num_indices < 0 || p.num_indices > std::numeric_limits<int64_t>::max() / index_size) {
    return error(ErrorCode::kShapeMismatch, n.indices, " has ", p.num_indices,
                 " elements: must be in [0, 2^63 / ", index_size, ")");
  }
  if (p.indices == nullptr && p.num_indices > 0) {
    return error(ErrorCode::kNullPointer, n.indices, " data is null but it has ", p.num_indices,
                 " elements");
  }
  if (p.topk < 1) {
    return error(ErrorCode::kInvalidArgument, n.topk, " = ", p.topk, " must be >= 1");
  }
  if (p.num_indices % p.topk != 0) {
    return error(ErrorCode::kShapeMismatch, n.indices, " has ", p.num_indices,
                 " elements, which is not a multiple of ", n.topk, " = ", p.topk);
  }
  if (p.weighted && p.weights.rows != p.num_tokens()) {
    return error(ErrorCode::kShapeMismatch, n.weights, " has shape [", p.weights.rows, ", ",
                 p.weights.cols, "] but must be [N, K] with N = len(", n.indices,
                 ") / K = ", p.num_indices, " / ", p.topk, " = ", p.num_tokens());
  }
  if (p.out.rows != p.num_tokens()) {
    return error(ErrorCode::kShapeMismatch, n.out, " has ", p.out.rows,
                 " rows but must have N = len(", n.indices, ") / ", n.topk, " = ", p.num_indices,
                 " / ", p.topk, " = ", p.num_tokens());
  }
  if (p.out.cols != p.grad.cols) {
    return error(ErrorCode::kShapeMismatch, n.out, " has hidden size ", p.out.cols, " but ", n.grad,
                 " has hidden size ", p.grad.cols);
  }
  if (p.mode == Mode::kDropless && p.grad.rows > p.num_indices) {
    return error(ErrorCode::kShapeMismatch, n.grad, " has ", p.grad.rows, " rows, more than N * ",
                 n.topk, " = ", p.num_indices, " (dropless mode)");
  }
  return {};
}

// Everything about a gather-sum problem that can be checked without reading index values: all
// of it happens in the first phase of the two-phase API.
inline Status check_shapes(const Problem& p) {
  if (Status s = check_shape_rules(p); !s.ok()) return s;
  return check_no_overlap(operands(p));
}

// Index values a mode accepts: [lo, hi), each at most once (-1 in padded mode excepted).
inline int64_t index_bitmap_bits(Mode mode, int64_t num_indices, int64_t grad_rows) {
  return mode == Mode::kDropless ? num_indices : grad_rows;
}
// Never negative and below 2^60 whatever the arguments (shapes are checked before, but the
// compiler cannot know that where it inlines a refused problem), so the memset is bounded.
inline uint64_t index_bitmap_bytes(Mode mode, int64_t num_indices, int64_t grad_rows) {
  const int64_t bits = std::max<int64_t>(0, index_bitmap_bits(mode, num_indices, grad_rows));
  return static_cast<uint64_t>(bits / 8 + (bits % 8 != 0 ? 1 : 0));
}
// A sorted copy of the indices, as int64 (+7 bytes to align it inside any workspace).
inline uint64_t index_sort_bytes(int64_t num_indices) {
  return static_cast<uint64_t>(num_indices) * sizeof(int64_t) + alignof(int64_t) - 1;
}
// Scratch bytes check_indices needs: a bitmap over the admissible values, unless the values
// range much wider than there are indices (a padded G of 2^31 rows read by a few tokens), where
// a sorted copy of the indices is smaller.
inline uint64_t index_scratch_bytes(Mode mode, int64_t num_indices, int64_t grad_rows) {
  return std::min(index_bitmap_bytes(mode, num_indices, grad_rows), index_sort_bytes(num_indices));
}

// The first i whose value (other than -1) appeared before: the position every duplicate error
// names, whichever scratch found it. Error path only, so it may allocate.
template <class I>
Status duplicate_error(IndexView<I> indices, const char* name) {
  std::unordered_map<int64_t, int64_t> first_seen;
  for (int64_t i = 0; i < indices.size; ++i) {
    const int64_t s = indices.data[i];
    if (s < 0) continue;
    const auto [it, inserted] = first_seen.emplace(s, i);
    if (!inserted) {
      return error(ErrorCode::kDuplicateIndex, name, "[", i, "] = ", s, " duplicates ", name, "[",
                   it->second, "]: every index other than -1 may appear once");
    }
  }
  MPG_ASSERT(false && "duplicate_error called without a duplicate");
  return {};
}

// The second phase: values in range (the first offender is named), then no duplicates.
// `scratch` holds index_scratch_bytes() bytes (the two-phase API's workspace, any alignment);
// its contents on entry do not matter.
template <class I>
Status check_indices(IndexView<I> indices, Mode mode, int64_t grad_rows, uint8_t* scratch,
                     const OperandNames& names = {}) {
  const int64_t lo = mode == Mode::kDropless ? 0 : -1;
  const int64_t hi = mode == Mode::kDropless ? indices.size : grad_rows;
  for (int64_t i = 0; i < indices.size; ++i) {
    const int64_t s = indices.data[i];
    if (s < lo || s >= hi) {
      return error(ErrorCode::kIndexOutOfRange, names.indices, "[", i, "] = ", s,
                   " is out of range [", lo, ", ", hi, ")",
                   mode == Mode::kDropless ? " (dropless mode: a permutation of [0, N*K))"
                                           : " (padded mode: -1 or a row of [E*C, H])");
    }
  }
  const uint64_t bitmap_bytes = index_bitmap_bytes(mode, indices.size, grad_rows);
  if (bitmap_bytes <= index_sort_bytes(indices.size)) {
    if (bitmap_bytes > 0) std::memset(scratch, 0, bitmap_bytes);
    for (int64_t i = 0; i < indices.size; ++i) {
      const int64_t s = indices.data[i];
      if (s < 0) continue;  // -1: dropped in padded mode, may repeat
      uint8_t& byte = scratch[s >> 3];
      const auto bit = static_cast<uint8_t>(1u << (s & 7));
      if (byte & bit) return duplicate_error(indices, names.indices);
      byte |= bit;
    }
    return {};
  }
  void* space = scratch;
  size_t space_bytes = index_sort_bytes(indices.size);
  auto* sorted = static_cast<int64_t*>(std::align(
      alignof(int64_t), sizeof(int64_t) * static_cast<size_t>(indices.size), space, space_bytes));
  MPG_ASSERT(sorted != nullptr);
  int64_t count = 0;
  for (int64_t i = 0; i < indices.size; ++i) {
    if (indices.data[i] >= 0) sorted[count++] = indices.data[i];
  }
  std::sort(sorted, sorted + count);
  if (std::adjacent_find(sorted, sorted + count) != sorted + count) {
    return duplicate_error(indices, names.indices);
  }
  return {};
}

}  // namespace mpg::detail
