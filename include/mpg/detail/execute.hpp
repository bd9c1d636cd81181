#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>
#include <vector>

#include "mpg/detail/dispatch.hpp"
#include "mpg/detail/fast.hpp"
#include "mpg/detail/kernel_table.hpp"
#include "mpg/detail/problem.hpp"
#include "mpg/detail/reference.hpp"
#include "mpg/detail/validate.hpp"
#include "mpg/options.hpp"
#include "mpg/status.hpp"

namespace mpg::detail {

inline Status check_options(const Options& options) {
  if (options.num_threads < 0) {
    return error(ErrorCode::kInvalidArgument, "options.num_threads = ", options.num_threads,
                 " must be >= 0 (0 = default)");
  }
  if (options.path != Path::kFast && options.path != Path::kReference) {
    return error(ErrorCode::kInvalidArgument, "options.path = ", static_cast<int>(options.path),
                 " is not a Path value");
  }
  if (!is_isa_value(options.isa)) {
    return error(ErrorCode::kInvalidArgument, "options.isa = ", static_cast<int>(options.isa),
                 " is not an Isa value");
  }
  if (!cpu_supports(options.isa)) {
    return error(ErrorCode::kUnsupportedIsa, "options.isa = ", name_of(options.isa),
                 " is not supported by this CPU or build");
  }
  return {};
}

// Second half of every call, after check_shapes() and check_options() passed: check the index
// values (index_scratch_bytes() of scratch), then compute. Nothing is written to out
// unless every check passed.
template <unsigned kSums>
Status execute(const Problem& p, uint8_t* scratch, const Options& options) {
  return dispatch<kSums>(p, [&](auto t, auto i, auto m, auto o, auto w) -> Status {
    using T = typename decltype(t)::type;
    using I = typename decltype(i)::type;
    constexpr Mode kMode = decltype(m)::value;
    constexpr Order kOrder = decltype(o)::value;
    constexpr bool kWeighted = decltype(w)::value;
    const IndexView<I> indices = index_view<I>(p);
    if (Status s = check_indices(indices, kMode, p.grad.rows, scratch, p.names); !s.ok()) return s;
    if (options.path == Path::kReference) {
      reference_gather_sum<T, I, kMode, kOrder, kWeighted>(grad_view<T>(p), indices, p.topk,
                                                           weights_view(p), out_view<T>(p));
    } else {
      fast_gather_sum<T, I, kMode, kOrder, kWeighted>(grad_view<T>(p), indices, p.topk,
                                                      weights_view(p), out_view<T>(p), options);
    }
    return {};
  });
}

// Validates and computes with scratch of its own: the path of the typed API.
// kSums: the sums (dispatch.hpp) this caller's problems can ask for.
template <unsigned kSums>
Status validate_and_execute(const Problem& p, const Options& options) {
  if (Status s = check_options(options); !s.ok()) return s;
  if (Status s = check_shapes(p); !s.ok()) return s;
  // Small calls keep the scratch on the stack: a heap allocation would dominate them.
  uint8_t stack_scratch[512];
  std::vector<uint8_t> heap_scratch;
  uint8_t* scratch = stack_scratch;
  const uint64_t bytes = index_scratch_bytes(p.mode, p.num_indices, p.grad.rows);
  if (bytes > sizeof(stack_scratch)) {
    heap_scratch.resize(bytes);
    scratch = heap_scratch.data();
  }
  return execute<kSums>(p, scratch, options);
}

}  // namespace mpg::detail
