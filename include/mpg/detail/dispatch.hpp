#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>
#include <type_traits>
#include <utility>

#include "mpg/detail/assert.hpp"
#include "mpg/detail/problem.hpp"
#include "mpg/types.hpp"

namespace mpg::detail {

template <Mode M>
using ModeTag = std::integral_constant<Mode, M>;
template <Order O>
using OrderTag = std::integral_constant<Order, O>;
template <bool kWeighted>
using WeightedTag = std::bool_constant<kWeighted>;

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

// MoeTokenUnpermuteGrad's switch: calls f(TypeTag<T>{}, TypeTag<P>{}, TypeTag<I>{}) with T the
// token dtype and P the probs dtype, both from the arithmetic rows of the dtype table, and I the
// index type. Without probs the caller passes float32 for P (the kernels then never read it).
template <class F>
decltype(auto) dispatch(DType dtype, DType probs_dtype, IndexType index_type, F&& f) {
  return visit_dtype(ElementTypeList{}, dtype, [&](auto t) -> decltype(auto) {
    return visit_dtype(ElementTypeList{}, probs_dtype, [&](auto w) -> decltype(auto) {
      return visit_index_type(AllIndexTypes{}, index_type,
                              [&](auto i) -> decltype(auto) { return f(t, w, i); });
    });
  });
}

// The sums the kernels compute: an order (docs/contract.md section 7) and whether each copy is
// weighted. A set of them (a bitmask) says which a caller can meet, so that a program calling only
// mpg::permute_grad does not compile the binary-bins and weighted kernels too.
enum SumKind : unsigned {
  kSequentialSum = 1u,  // PermuteGrad; Unpermute without probs
  kBinaryBinsSum = 2u,  // InitRoutingV2Grad (never weighted)
  kWeightedSum = 4u,    // Unpermute with probs: sequential, each copy times its weight
};
inline constexpr unsigned kEverySum = kSequentialSum | kBinaryBinsSum | kWeightedSum;

inline SumKind sum_kind(const Problem& p) {
  if (p.order == Order::kBinaryBins) return kBinaryBinsSum;
  return p.weighted ? kWeightedSum : kSequentialSum;
}

// The same switch for a whole problem, its sum included: calls f(TypeTag<T>{}, TypeTag<I>{},
// ModeTag<M>{}, OrderTag<O>{}, WeightedTag<W>{}), instantiating only the sums in kSums (the
// problem's must be one of them). The weights' dtype is not a template parameter: the kernels
// widen a token's K weights once, whatever their type, so it would only multiply instantiations.
template <unsigned kSums, class F>
decltype(auto) dispatch(const Problem& p, F&& f) {
  static_assert(kSums != 0 && (kSums & ~kEverySum) == 0, "mpg: kSums must be a set of SumKind");
  MPG_ASSERT((kSums & sum_kind(p)) != 0);
  constexpr bool kBins = (kSums & kBinaryBinsSum) != 0;
  constexpr bool kWeighted = (kSums & kWeightedSum) != 0;
  constexpr bool kSequential = (kSums & kSequentialSum) != 0;
  return dispatch(p.dtype, p.index_type, p.mode, [&](auto t, auto i, auto m) -> decltype(auto) {
    // Each enabled sum is tested in turn; the last enabled one needs no test.
    if constexpr (kBins && (kWeighted || kSequential)) {
      if (p.order == Order::kBinaryBins) {
        return f(t, i, m, OrderTag<Order::kBinaryBins>{}, WeightedTag<false>{});
      }
    } else if constexpr (kBins) {
      return f(t, i, m, OrderTag<Order::kBinaryBins>{}, WeightedTag<false>{});
    }
    if constexpr (kWeighted && kSequential) {
      if (p.weighted) return f(t, i, m, OrderTag<Order::kSequential>{}, WeightedTag<true>{});
    } else if constexpr (kWeighted) {
      return f(t, i, m, OrderTag<Order::kSequential>{}, WeightedTag<true>{});
    }
    if constexpr (kSequential) {
      return f(t, i, m, OrderTag<Order::kSequential>{}, WeightedTag<false>{});
    }
  });
}

}  // namespace mpg::detail
