// mpg: element types, modes and the non-owning views the kernels work on.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

namespace mpg {

// Element type of permuted_output_grad and out (they always share one).
enum class DType : int32_t { kFloat32, kFloat16, kBFloat16 };
// Element type of sorted_indices.
enum class IndexType : int32_t { kInt32, kInt64 };

// How dropped copies are encoded (SPEC section 2).
enum class Mode : int32_t {
  kDropless,  // S is a permutation of [0, N*K); a value >= R (rows of G) was dropped.
  kPadded,    // S is in [-1, E*C); -1 was dropped for exceeding capacity.
};

using half = Eigen::half;
using bfloat16 = Eigen::bfloat16;

template <class T>
inline constexpr bool kIsElement =
    std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;
template <class I>
inline constexpr bool kIsIndex = std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>;

template <class T>
constexpr DType dtype_of() {
  static_assert(kIsElement<T>, "mpg: element type must be float, Eigen::half or Eigen::bfloat16");
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, half>) return DType::kFloat16;
  return DType::kBFloat16;
}

template <class I>
constexpr IndexType index_type_of() {
  static_assert(kIsIndex<I>, "mpg: index type must be int32_t or int64_t");
  return std::is_same_v<I, int32_t> ? IndexType::kInt32 : IndexType::kInt64;
}

constexpr int64_t size_of(DType dtype) {
  return dtype == DType::kFloat32 ? 4 : 2;
}
constexpr int64_t size_of(IndexType itype) {
  return itype == IndexType::kInt32 ? 4 : 8;
}

constexpr const char* name_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}
constexpr const char* name_of(IndexType itype) {
  return itype == IndexType::kInt32 ? "int32" : "int64";
}
constexpr const char* name_of(Mode mode) {
  return mode == Mode::kDropless ? "dropless" : "padded";
}

// A rows x cols matrix whose rows start row_stride elements apart (columns are contiguous).
// Offsets are 64-bit throughout: rows * row_stride routinely exceeds 2^31 on real models.
template <class T>
struct MatrixView {
  T* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // in elements, >= cols

  MatrixView() = default;
  MatrixView(T* data_, int64_t rows_, int64_t cols_, int64_t row_stride_)
      : data(data_), rows(rows_), cols(cols_), row_stride(row_stride_) {}
  MatrixView(T* data_, int64_t rows_, int64_t cols_) : MatrixView(data_, rows_, cols_, cols_) {}
  // A view of T converts to a view of const T.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  MatrixView(const MatrixView<U>& other)  // NOLINT(google-explicit-constructor)
      : data(other.data), rows(other.rows), cols(other.cols), row_stride(other.row_stride) {}

  T* row(int64_t r) const { return data + r * row_stride; }
  bool empty() const { return rows == 0 || cols == 0; }
};

template <class T>
using ConstMatrixView = MatrixView<const T>;

// sorted_indices: N*K values, token t's k-th copy at [t*K + k].
template <class I>
struct IndexView {
  const I* data = nullptr;
  int64_t size = 0;

  IndexView() = default;
  IndexView(const I* data_, int64_t size_) : data(data_), size(size_) {}
  IndexView(const std::vector<I>& v)  // NOLINT(google-explicit-constructor)
      : data(v.data()), size(static_cast<int64_t>(v.size())) {}
};

// A writable run of `size` indices (e.g. MoeTokenPermute's sorted_indices_out).
template <class I>
struct MutableIndexView {
  I* data = nullptr;
  int64_t size = 0;

  MutableIndexView() = default;
  MutableIndexView(I* data_, int64_t size_) : data(data_), size(size_) {}
  MutableIndexView(std::vector<I>& v)  // NOLINT(google-explicit-constructor)
      : data(v.data()), size(static_cast<int64_t>(v.size())) {}
};

}  // namespace mpg
