#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>
#include <string_view>

#include "mpg/detail/cpu.hpp"
#include "mpg/detail/gather_sum.hpp"
#include "mpg/detail/kernel_avx2.hpp"
#include "mpg/detail/kernel_avx512.hpp"
#include "mpg/detail/kernel_neon.hpp"
#include "mpg/detail/kernel_portable.hpp"
#include "mpg/options.hpp"

// The table of kernel sets. Each row is a kernel set's `Kernels` (kernel_body.hpp compiled for
// one ISA): kIsa, supported(), and the entry points kGatherSum<T, I, M, O, kWeighted>,
// kWiden<T>, kNarrow<T>, kUnpermuteGrad<T, P, I>, kCopyRows<E>. The table drives the run-time
// choice (first supported row wins, so rows are best first), the Options check, the tests (every
// row's bit-exact tests) and the benchmarks (one forced row per ISA).
//
// Adding an ISA: a traits file like kernel_avx2.hpp (a Target with kIsa and supported(), a Vec,
// and the three lines that include kernel_body.hpp in its namespace and target region), its
// include and row here, and its Isa value and name in options.hpp. A set that differs from
// another only for some element types (avx512_bf16) names it as its Target's Delegate.

namespace mpg::detail {

template <class... Sets>
struct KernelSetList {};

using KernelSets = KernelSetList<
#if MPG_HAVE_X86_KERNELS
    avx512_bf16::Kernels, avx512::Kernels, avx2::Kernels,
#endif
#if MPG_HAVE_NEON_KERNELS
    neon::Kernels,
#endif
    portable::Kernels>;

// Calls f(Set{}) for each row, best first, until f returns true; returns whether one did.
template <class F, class... Sets>
bool find_kernel_set(KernelSetList<Sets...> /*table*/, F&& f) {
  return (f(Sets{}) || ...);
}
template <class F>
bool find_kernel_set(F&& f) {
  return find_kernel_set(KernelSets{}, f);
}

// Whether isa is a value of the Isa enum (not necessarily built or supported here).
constexpr bool is_isa_value(Isa isa) {
  return std::string_view(name_of(isa)) != "unknown";
}

// Whether the fast path may run isa here: kAuto always; otherwise it must have a row in this
// build, the CPU must have it, and tests must not have masked it (set_disabled_isas_for_test).
inline bool cpu_supports(Isa isa) {
  if (isa == Isa::kAuto) return true;
  return find_kernel_set(
      [&](auto set) { return set.kIsa == isa && set.supported() && !isa_disabled(isa); });
}

// The best kernel set this CPU runs (the portable one at worst).
inline Isa best_isa() {
  Isa best = Isa::kPortable;
  find_kernel_set([&](auto set) {
    if (!set.supported() || isa_disabled(set.kIsa)) return false;
    best = set.kIsa;
    return true;
  });
  return best;
}

inline Isa resolve_isa(Isa requested) {
  return requested == Isa::kAuto ? best_isa() : requested;
}

// The entry point of the row for isa (resolved, supported: the Options check ran before).
template <class T, class I, Mode M, Order O, bool kWeighted>
GatherSumKernel<T, I> select_gather_sum(Isa isa) {
  GatherSumKernel<T, I> kernel = &portable::gather_sum<T, I, M, O, kWeighted>;
  find_kernel_set([&](auto set) {
    if (set.kIsa != isa) return false;
    kernel = decltype(set)::template kGatherSum<T, I, M, O, kWeighted>;
    return true;
  });
  return kernel;
}

// The same for MoeTokenUnpermuteGrad's entry point.
template <class T, class P, class I>
UnpermuteGradKernel<T, P, I> select_unpermute_grad(Isa isa) {
  UnpermuteGradKernel<T, P, I> kernel = &portable::unpermute_grad<T, P, I>;
  find_kernel_set([&](auto set) {
    if (set.kIsa != isa) return false;
    kernel = decltype(set)::template kUnpermuteGrad<T, P, I>;
    return true;
  });
  return kernel;
}

// The same for MoeTokenPermute's row copies.
template <class E>
CopyRowsKernel<E> select_copy_rows(Isa isa) {
  CopyRowsKernel<E> kernel = &portable::copy_rows<E>;
  find_kernel_set([&](auto set) {
    if (set.kIsa != isa) return false;
    kernel = decltype(set)::template kCopyRows<E>;
    return true;
  });
  return kernel;
}

}  // namespace mpg::detail
