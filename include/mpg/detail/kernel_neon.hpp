#pragma once
#include "mpg/detail/guard.hpp"

#include "mpg/detail/cpu.hpp"

#if MPG_HAVE_NEON_KERNELS
#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "mpg/detail/gather_sum.hpp"
#include "mpg/types.hpp"

// The AArch64 Advanced SIMD (NEON) kernel set: only its vector traits live here (4 fp32 lanes in
// a q register); the walk and the microkernel are kernel_body.hpp's. Advanced SIMD is part of the
// base AArch64 architecture, so no target region is needed and every AArch64 CPU runs this set.
//
// Conversions. bf16 -> fp32 is a 16-bit shift (USHLL), exact. fp16 <-> fp32 are the base-ARMv8
// FCVTL / FCVTN: they round as FPCR.RMode says and flush as FPCR.FZ/FZ16 say, and
// ScopedIeeeFpEnv (fp_env.hpp) clears all of those on every computing thread, so widening is
// exact and narrowing is round-to-nearest-even with subnormals kept; AHP is cleared too, so the
// format is IEEE half with inf and NaN. fp32 -> bf16 is done with integer ops as on x86, NOT with
// BFCVT: that needs FEAT_BF16 (not in base ARMv8), and its subnormal and NaN results would have
// to be shown to match the reference bit for bit on hardware we do not have. NEON has no
// masked loads or stores: a partial vector goes through a small stack buffer, so nothing past the
// row is touched.

namespace mpg::detail::neon {

struct Target {
  static constexpr Isa kIsa = Isa::kNeon;
  static bool supported() { return true; }  // Advanced SIMD is mandatory on AArch64
};

struct Vec {
  using F = float32x4_t;
  static constexpr int64_t kLanes = 4;
  // 8 accumulators by default (32 columns: two lines of fp32, one of 16-bit T): enough
  // independent adds for the 2-4 FP pipes x 2-4 cycles of current cores, with 24 of the 32 v
  // registers left for loads and the bf16 rounding temporaries. Not measured: no ARM hardware
  // was available (scripts/tune_kernels.sh times variants there; here a block must be a multiple
  // of 8 vectors, whole lines of 16-bit T).
  static constexpr int kBlockVectors = MPG_BLOCK_VECTORS_OR(8);
  // AVX-512's measured distance (kernel_avx512.hpp); not measured on ARM.
  static constexpr int64_t kPrefetchBytes = MPG_PREFETCH_BYTES_OR(2048);
  static int64_t prefetch_bytes() { return kPrefetchBytes; }             // the same on every CPU
  static bool prefetch_to_l2() { return MPG_PREFETCH_TO_L2_OR(false); }  // L1 on every CPU
  static constexpr int64_t kCopyPrefetchBytes = kPrefetchBytes;          // not measured apart

  MPG_ALWAYS_INLINE static F zero() { return vdupq_n_f32(0.0f); }
  MPG_ALWAYS_INLINE static F set1(float x) { return vdupq_n_f32(x); }
  MPG_ALWAYS_INLINE static F add(F a, F b) { return vaddq_f32(a, b); }
  // GCC lowers vmulq_f32 to a plain vector multiply that -ffp-contract=fast would fuse with the
  // following add into FMLA: the empty asm keeps the rounded product (see product_fp32).
  MPG_ALWAYS_INLINE static F mul(F a, F b) {
    F p = vmulq_f32(a, b);
    asm("" : "+w"(p));
    return p;
  }
  // acc + a * b rounded once (FMLA): only where a * b is exact (kernel_body.hpp's sum_group),
  // as on AVX-512. Not timed here (emulation proves bits only).
  static constexpr bool kHasFma = true;
  MPG_ALWAYS_INLINE static F fmadd(F a, F b, F acc) { return vfmaq_f32(acc, a, b); }
  // Adjacent-lane sums of a then b: FADDP adds each pair left + right, [a0+a1, a2+a3, b0+b1,
  // b2+b3].
  MPG_ALWAYS_INLINE static F pair_add(F a, F b) { return vpaddq_f32(a, b); }

  template <class T>
  MPG_ALWAYS_INLINE static const uint16_t* bits(const T* p) {
    return reinterpret_cast<const uint16_t*>(p);
  }
  template <class T>
  MPG_ALWAYS_INLINE static uint16_t* bits(T* p) {
    return reinterpret_cast<uint16_t*>(p);
  }

  template <class T>
  MPG_ALWAYS_INLINE static F load(const T* p) {
    if constexpr (std::is_same_v<T, float>) {
      return vld1q_f32(p);
    } else if constexpr (std::is_same_v<T, bfloat16>) {
      return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(bits(p)), 16));
    } else {
      return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(bits(p))));
    }
  }
  template <class T>
  MPG_ALWAYS_INLINE static F load_partial(const T* p, int64_t n) {
    T buffer[kLanes] = {};
    for (int64_t i = 0; i < n; ++i) buffer[i] = p[i];
    return load<T>(buffer);
  }

  // fp32 -> bf16 bits, round to nearest even: add 0x7FFF plus the lowest kept bit, truncate
  // (the carry turns the largest finite values into inf exactly when RNE overflows). NaN would
  // carry into the sign or become inf, so it is replaced by the quiet NaN of its sign, as in
  // kernel_avx512.hpp's narrow_bf16 (Eigen's choice): the same bits on every set.
  MPG_ALWAYS_INLINE static uint16x4_t narrow_bf16(F x) {
    const uint32x4_t b = vreinterpretq_u32_f32(x);
    const uint32x4_t high = vshrq_n_u32(b, 16);
    const uint32x4_t lsb = vandq_u32(high, vdupq_n_u32(1));
    const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(vaddq_u32(b, vdupq_n_u32(0x7FFF)), lsb), 16);
    const uint32x4_t quiet_nan =
        vorrq_u32(vandq_u32(high, vdupq_n_u32(0x8000)), vdupq_n_u32(0x7FC0));
    const uint32x4_t is_number = vceqq_f32(x, x);  // all ones unless NaN
    return vmovn_u32(vbslq_u32(is_number, rounded, quiet_nan));
  }
  // 4 fp32 lanes narrowed to 16-bit T's bits.
  template <class T>
  MPG_ALWAYS_INLINE static uint16x4_t narrow16(F x) {
    if constexpr (std::is_same_v<T, bfloat16>) {
      return narrow_bf16(x);
    } else {
      return vreinterpret_u16_f16(vcvt_f16_f32(x));
    }
  }

  template <class T>
  MPG_ALWAYS_INLINE static void store(T* p, F v) {
    if constexpr (std::is_same_v<T, float>) {
      vst1q_f32(p, v);
    } else {
      vst1_u16(bits(p), narrow16<T>(v));
    }
  }
  template <class T>
  MPG_ALWAYS_INLINE static void store_partial(T* p, F v, int64_t n) {
    T buffer[kLanes];
    store<T>(buffer, v);
    for (int64_t i = 0; i < n; ++i) p[i] = buffer[i];
  }
  // One aligned 64-byte line from v[0..3] (fp32) or v[0..7] (16-bit), with plain stores: AArch64
  // has no streaming store that bypasses the caches for certain, only STNP's non-temporal hint,
  // which many cores ignore and whose benefit could not be measured here. The walk's "streaming"
  // rows are therefore ordinary writes on this set.
  template <class T>
  MPG_ALWAYS_INLINE static void stream_line(T* p, const F* v) {
    constexpr int kVectorsPerLine = static_cast<int>(64 / (kLanes * sizeof(T)));
    MPG_UNROLL
    for (int i = 0; i < kVectorsPerLine; ++i) store<T>(p + i * kLanes, v[i]);
  }
  // Ordinary stores, as stream_line's.
  MPG_ALWAYS_INLINE static void stream_bytes(void* dst, const void* src, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n));
  }
  MPG_ALWAYS_INLINE static void prefetch(const void* p) {
    __builtin_prefetch(p);
  }  // PRFM PLDL1KEEP
  MPG_ALWAYS_INLINE static void prefetch_l2(const void* p) {
    __builtin_prefetch(p, 0, 2);
  }  // PRFM PLDL2KEEP
  // Nothing to fence: stream_line's stores are ordinary, and the thread pool's hand-back (a
  // mutex) orders them before the caller reads out, as for any other store.
  MPG_ALWAYS_INLINE static void fence() {}
};

}  // namespace mpg::detail::neon

#define MPG_KERNEL_NAMESPACE neon
#include "mpg/detail/kernel_body.hpp"
#undef MPG_KERNEL_NAMESPACE

#endif  // MPG_HAVE_NEON_KERNELS
