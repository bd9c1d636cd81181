#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>
#include <cstring>

#include "mpg/detail/cpu.hpp"
#include "mpg/detail/gather_sum.hpp"
#include "mpg/types.hpp"

// The portable kernel set, for any CPU and the last fallback of the run-time choice: scalar
// traits (one fp32 lane), conversions through Eigen's scalar constructors (exact, RNE, keep
// subnormals). Same walk and microkernel as every other set (kernel_body.hpp), no target region.

namespace mpg::detail::portable {

struct Target {
  static constexpr Isa kIsa = Isa::kPortable;
  static bool supported() { return true; }
};

struct Vec {
  using F = float;
  static constexpr int64_t kLanes = 1;
  // 32 columns per block: whole cache lines of any T; the compiler keeps what fits in registers.
  static constexpr int kBlockVectors = 32;
  static constexpr int64_t kPrefetchBytes = MPG_PREFETCH_BYTES_OR(2048);  // as AVX-512
  static int64_t prefetch_bytes() { return kPrefetchBytes; }              // the same on every CPU
  static bool prefetch_to_l2() { return MPG_PREFETCH_TO_L2_OR(false); }   // L1 on every CPU
  static constexpr int64_t kCopyPrefetchBytes = kPrefetchBytes;           // not measured apart

  static F zero() { return 0.0f; }
  static F set1(float x) { return x; }
  static F add(F a, F b) { return a + b; }
  static F mul(F a, F b) { return product_fp32(a, b); }
  static F pair_add(F a, F b) { return a + b; }  // one lane each: the pair is (a0, b0)
  template <class T>
  static F load(const T* p) {
    return static_cast<float>(*p);
  }
  template <class T>
  static F load_partial(const T* p, int64_t /*n*/) {
    return load(p);
  }
  template <class T>
  static void store(T* p, F v) {
    *p = static_cast<T>(v);
  }
  template <class T>
  static void store_partial(T* p, F v, int64_t /*n*/) {
    store(p, v);
  }
  template <class T>
  static void stream_line(T* p, const F* v) {
    for (int64_t i = 0; i < kLineBytes / static_cast<int64_t>(sizeof(T)); ++i) store(p + i, v[i]);
  }
  static void stream_bytes(void* dst, const void* src, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n));
  }
  static void prefetch(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p);
#else
    (void)p;
#endif
  }
  static void prefetch_l2(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p, 0, 2);
#else
    (void)p;
#endif
  }
  static void fence() {}
  static constexpr int64_t kLineBytes = 64;
};

}  // namespace mpg::detail::portable

#define MPG_KERNEL_NAMESPACE portable
#include "mpg/detail/kernel_body.hpp"
#undef MPG_KERNEL_NAMESPACE
