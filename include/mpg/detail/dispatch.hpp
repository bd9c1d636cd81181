#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>
#include <type_traits>
#include <utility>

#include "mpg/types.hpp"

namespace mpg::detail {

template <class T>
struct TypeTag {
  using type = T;
};
template <Mode M>
using ModeTag = std::integral_constant<Mode, M>;

// The one place where run-time (dtype, index dtype, mode) becomes a template instantiation:
// calls f(TypeTag<T>{}, TypeTag<I>{}, ModeTag<M>{}). Inputs are validated enum values.
template <class F>
decltype(auto) dispatch(DType dtype, IndexType index_type, Mode mode, F&& f) {
  const auto with_mode = [&](auto t, auto i) -> decltype(auto) {
    if (mode == Mode::kPadded) return f(t, i, ModeTag<Mode::kPadded>{});
    return f(t, i, ModeTag<Mode::kDropless>{});
  };
  const auto with_index = [&](auto t) -> decltype(auto) {
    if (index_type == IndexType::kInt64) return with_mode(t, TypeTag<int64_t>{});
    return with_mode(t, TypeTag<int32_t>{});
  };
  switch (dtype) {
    case DType::kFloat16: return with_index(TypeTag<half>{});
    case DType::kBFloat16: return with_index(TypeTag<bfloat16>{});
    case DType::kFloat32: break;
  }
  return with_index(TypeTag<float>{});
}

}  // namespace mpg::detail
