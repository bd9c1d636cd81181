// mpg: element types, modes and the non-owning views the kernels work on.
//
// Every dtype mpg knows is one row of one table (DTypeTraits below): its enum value, C++ type,
// size, name and aclnn code. kIsElement, dtype_of, size_of, name_of, the run-time dispatcher,
// the aclnn mapping, the tests' type lists and the fuzzer all read that table. A C++ type that
// has no row fails to compile wherever it is used as a dtype.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "mpg/detail/fp_flags.hpp"

namespace mpg {

using half = Eigen::half;
using bfloat16 = Eigen::bfloat16;

// Element type of a data tensor. The three float types are the arithmetic ones (every op that
// adds or multiplies accepts them); int8 is a token type that only copying ops accept (the
// forward permute's tokens).
enum class DType : int32_t { kFloat32, kFloat16, kBFloat16, kInt8 };
// Element type of an index tensor (sorted_indices, expert ids).
enum class IndexType : int32_t { kInt32, kInt64 };

// How dropped copies are encoded (docs/contract.md, "Modes").
enum class Mode : int32_t {
  kDropless,  // S is a permutation of [0, N*K); a value >= R (rows of G) was dropped.
  kPadded,    // S is in [-1, E*C); -1 was dropped for exceeding capacity.
};

template <class... T>
struct TypeList {};

// The table, one specialization per dtype. The primary template is left undefined on purpose.
template <class T>
struct DTypeTraits;
template <>
struct DTypeTraits<float> {
  static constexpr DType dtype = DType::kFloat32;
  static constexpr const char* name = "float32";
  static constexpr int32_t aclnn_code = 0;  // ACL_FLOAT
  static constexpr bool arithmetic = true;
};
template <>
struct DTypeTraits<half> {
  static constexpr DType dtype = DType::kFloat16;
  static constexpr const char* name = "float16";
  static constexpr int32_t aclnn_code = 1;  // ACL_FLOAT16
  static constexpr bool arithmetic = true;
};
template <>
struct DTypeTraits<bfloat16> {
  static constexpr DType dtype = DType::kBFloat16;
  static constexpr const char* name = "bfloat16";
  static constexpr int32_t aclnn_code = 27;  // ACL_BF16
  static constexpr bool arithmetic = true;
};
template <>
struct DTypeTraits<int8_t> {
  static constexpr DType dtype = DType::kInt8;
  static constexpr const char* name = "int8";
  static constexpr int32_t aclnn_code = 2;  // ACL_INT8
  static constexpr bool arithmetic = false;
};

// The rows in enum order, and the arithmetic subset.
using AllDTypes = TypeList<float, half, bfloat16, int8_t>;
using ElementTypeList = TypeList<float, half, bfloat16>;

// The index table, in the same shape.
template <class I>
struct IndexTraits;
template <>
struct IndexTraits<int32_t> {
  static constexpr IndexType index_type = IndexType::kInt32;
  static constexpr const char* name = "int32";
  static constexpr int32_t aclnn_code = 3;  // ACL_INT32
};
template <>
struct IndexTraits<int64_t> {
  static constexpr IndexType index_type = IndexType::kInt64;
  static constexpr const char* name = "int64";
  static constexpr int32_t aclnn_code = 9;  // ACL_INT64
};
using AllIndexTypes = TypeList<int32_t, int64_t>;

namespace detail {

template <class T>
struct TypeTag {
  using type = T;
};

template <class List, class T>
struct Contains;
template <class... U, class T>
struct Contains<TypeList<U...>, T> : std::bool_constant<(std::is_same_v<U, T> || ...)> {};

// Rows must be listed in enum order, so a DType's row is found by its value.
template <class... T>
constexpr bool rows_in_order(TypeList<T...>) {
  int32_t i = 0;
  return ((static_cast<int32_t>(DTypeTraits<T>::dtype) == i++) && ...);
}
template <class... I>
constexpr bool index_rows_in_order(TypeList<I...>) {
  int32_t i = 0;
  return ((static_cast<int32_t>(IndexTraits<I>::index_type) == i++) && ...);
}
static_assert(rows_in_order(AllDTypes{}), "mpg: AllDTypes must list every DType in enum order");
static_assert(index_rows_in_order(AllIndexTypes{}),
              "mpg: AllIndexTypes must list every IndexType in enum order");

// Calls f(TypeTag<T>{}) for the row of List whose DType is `dtype` (whose IndexType is
// `index_type`). The value must be one of List's: callers validate first.
template <class F, class T, class... Rest>
constexpr decltype(auto) visit_dtype(TypeList<T, Rest...>, DType dtype, F&& f) {
  if constexpr (sizeof...(Rest) == 0) {
    return f(TypeTag<T>{});  // the only row left: validated input ends here
  } else {
    if (dtype == DTypeTraits<T>::dtype) return f(TypeTag<T>{});
    return visit_dtype(TypeList<Rest...>{}, dtype, std::forward<F>(f));
  }
}
template <class F, class I, class... Rest>
constexpr decltype(auto) visit_index_type(TypeList<I, Rest...>, IndexType index_type, F&& f) {
  if constexpr (sizeof...(Rest) == 0) {
    return f(TypeTag<I>{});
  } else {
    if (index_type == IndexTraits<I>::index_type) return f(TypeTag<I>{});
    return visit_index_type(TypeList<Rest...>{}, index_type, std::forward<F>(f));
  }
}

template <class... T>
constexpr bool is_one_of(TypeList<T...>, DType dtype) {
  return ((DTypeTraits<T>::dtype == dtype) || ...);
}
template <class... I>
constexpr bool is_one_of(TypeList<I...>, IndexType index_type) {
  return ((IndexTraits<I>::index_type == index_type) || ...);
}

}  // namespace detail

// Types the arithmetic ops accept (float, Eigen::half, Eigen::bfloat16), and every token type
// (those plus int8, for copying ops).
template <class T>
inline constexpr bool kIsElement = detail::Contains<ElementTypeList, T>::value;
template <class T>
inline constexpr bool kIsToken = detail::Contains<AllDTypes, T>::value;
template <class I>
inline constexpr bool kIsIndex = detail::Contains<AllIndexTypes, I>::value;

template <class T>
constexpr DType dtype_of() {
  static_assert(kIsToken<T>,
                "mpg: element type must be float, Eigen::half, Eigen::bfloat16 (or int8_t for "
                "copying ops)");
  return DTypeTraits<T>::dtype;
}
template <class I>
constexpr IndexType index_type_of() {
  static_assert(kIsIndex<I>, "mpg: index type must be int32_t or int64_t");
  return IndexTraits<I>::index_type;
}

// A valid DType or IndexType value (a cast from an int may not be one).
constexpr bool is_valid(DType dtype) {
  return detail::is_one_of(AllDTypes{}, dtype);
}
constexpr bool is_valid(IndexType index_type) {
  return detail::is_one_of(AllIndexTypes{}, index_type);
}
// Whether the arithmetic ops accept dtype.
constexpr bool is_arithmetic(DType dtype) {
  return detail::is_one_of(ElementTypeList{}, dtype);
}

// Bytes per element; 0 for a value that is not a DType (IndexType).
constexpr int64_t size_of(DType dtype) {
  if (!is_valid(dtype)) return 0;
  return detail::visit_dtype(AllDTypes{}, dtype,
                             [](auto t) -> int64_t { return sizeof(typename decltype(t)::type); });
}
constexpr int64_t size_of(IndexType index_type) {
  if (!is_valid(index_type)) return 0;
  return detail::visit_index_type(AllIndexTypes{}, index_type, [](auto i) -> int64_t {
    return sizeof(typename decltype(i)::type);
  });
}

constexpr const char* name_of(DType dtype) {
  if (!is_valid(dtype)) return "unknown";
  return detail::visit_dtype(AllDTypes{}, dtype,
                             [](auto t) { return DTypeTraits<typename decltype(t)::type>::name; });
}
constexpr const char* name_of(IndexType index_type) {
  if (!is_valid(index_type)) return "unknown";
  return detail::visit_index_type(AllIndexTypes{}, index_type, [](auto i) {
    return IndexTraits<typename decltype(i)::type>::name;
  });
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

namespace detail {
// An IndexView or a std::vector as an IndexView: what the deduced overloads accept as indices.
template <class I>
IndexView<I> as_index_view(IndexView<I> v) {
  return v;
}
template <class I>
IndexView<I> as_index_view(const std::vector<I>& v) {
  return v;
}
}  // namespace detail

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
