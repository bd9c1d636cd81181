#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <cstdint>

namespace mpg::detail {

// The bytes a strided 2-D view touches: `rows` runs of `row_bytes`, `stride_bytes` apart.
struct ByteRows {
  uintptr_t begin = 0;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  int64_t stride_bytes = 0;

  bool empty() const { return rows <= 0 || row_bytes <= 0; }
  uintptr_t end() const {  // one past the last byte; callers checked the extent fits
    return begin + static_cast<uintptr_t>((rows - 1) * stride_bytes + row_bytes);
  }
};

// Whether some row of `v` shares a byte with [lo, hi). Rows are equally spaced, so the rows
// that can intersect form one range of row numbers, found by division instead of a loop.
inline bool any_row_intersects(const ByteRows& v, uintptr_t lo, uintptr_t hi) {
  if (v.rows == 1 || v.stride_bytes == 0) return v.begin < hi && lo < v.begin + v.row_bytes;
  // Row i is [begin + i*s, begin + i*s + L); it intersects iff begin + i*s < hi and
  // begin + i*s + L > lo. Work in offsets from v.begin (may be negative for lo).
  const auto s = v.stride_bytes;
  const auto rel_hi = static_cast<int64_t>(hi - v.begin);  // hi > v.begin is checked below
  if (hi <= v.begin) return false;
  const int64_t rel_lo =
      lo >= v.begin ? static_cast<int64_t>(lo - v.begin) : -static_cast<int64_t>(v.begin - lo);
  const int64_t first_after = rel_lo - v.row_bytes;  // need i*s > first_after
  const int64_t i_min = first_after < 0 ? 0 : first_after / s + 1;
  const int64_t i_max = std::min<int64_t>((rel_hi - 1) / s, v.rows - 1);  // need i*s < rel_hi
  return i_min <= i_max;
}

// Exact test for shared bytes between two strided views (interleaved rows do not overlap).
// Cost: O(rows of the shorter view), paid only when the bounding ranges intersect.
inline bool overlaps(const ByteRows& a, const ByteRows& b) {
  if (a.empty() || b.empty()) return false;
  if (a.end() <= b.begin || b.end() <= a.begin) return false;
  const ByteRows& scan = a.rows <= b.rows ? a : b;
  const ByteRows& other = a.rows <= b.rows ? b : a;
  for (int64_t r = 0; r < scan.rows; ++r) {
    const uintptr_t lo = scan.begin + static_cast<uintptr_t>(r * scan.stride_bytes);
    if (any_row_intersects(other, lo, lo + static_cast<uintptr_t>(scan.row_bytes))) return true;
  }
  return false;
}

}  // namespace mpg::detail
