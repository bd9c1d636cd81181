#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>
#include <type_traits>
#include <utility>

#include "mpg/types.hpp"

namespace mpg::detail {

template <Mode M>
using ModeTag = std::integral_constant<Mode, M>;

// The one place where run-time (dtype, index dtype, mode) becomes a template instantiation:
// calls f(TypeTag<T>{}, TypeTag<I>{}, ModeTag<M>{}) with T from the arithmetic rows of the dtype
// table (types.hpp). Inputs are validated values: an arithmetic dtype, a valid index type.
template <class F>
decltype(auto) dispatch(DType dtype, IndexType index_type, Mode mode, F&& f) {
  const auto with_mode = [&](auto t, auto i) -> decltype(auto) {
    if (mode == Mode::kPadded) return f(t, i, ModeTag<Mode::kPadded>{});
    return f(t, i, ModeTag<Mode::kDropless>{});
  };
  return visit_dtype(ElementTypeList{}, dtype, [&](auto t) -> decltype(auto) {
    return visit_index_type(AllIndexTypes{}, index_type,
                            [&](auto i) -> decltype(auto) { return with_mode(t, i); });
  });
}

}  // namespace mpg::detail
