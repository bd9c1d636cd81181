#pragma once
#include "mpg/detail/guard.hpp"

#include "mpg/detail/cpu.hpp"

#if MPG_HAVE_X86_KERNELS
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "mpg/detail/gather_sum.hpp"
#include "mpg/types.hpp"

// The AVX2 + F16C kernel set: only its vector traits live here (8 fp32 lanes in a ymm); the walk
// and the microkernel are kernel_body.hpp's, compiled inside this file's target region. AVX2 has
// no masked 16-bit loads or stores, so a partial vector goes through a small stack buffer, with
// the same conversions as whole vectors.

namespace mpg::detail::avx2 {
struct Target {
  static constexpr Isa kIsa = Isa::kAvx2;
  static bool supported() { return cpu_features().avx2; }
};
}  // namespace mpg::detail::avx2

// GCC 12 warns inside its own intrinsics (_mm256_undefined_* reads itself, GCC bug 105593)
// once they are inlined into target-specific functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

MPG_BEGIN_TARGET("avx2,f16c")
namespace mpg::detail::avx2 {

struct Vec {
  using F = __m256;
  static constexpr int64_t kLanes = 8;
  // 4 accumulators (32 columns, one 64-byte line of a 16-bit row) and no software prefetch:
  // measured, see the notes at the end of this file.
  static constexpr int kBlockVectors = MPG_BLOCK_VECTORS_OR(4);
  static constexpr int64_t kPrefetchBytes = MPG_PREFETCH_BYTES_OR(0);

  MPG_ALWAYS_INLINE static F zero() { return _mm256_setzero_ps(); }
  MPG_ALWAYS_INLINE static F set1(float x) { return _mm256_set1_ps(x); }
  MPG_ALWAYS_INLINE static F add(F a, F b) { return _mm256_add_ps(a, b); }
  // A plain vector multiply for GCC, fused with the next add under -ffp-contract=fast when FMA
  // is enabled (e.g. -march=native): the empty asm keeps the rounded product.
  MPG_ALWAYS_INLINE static F mul(F a, F b) {
    F p = _mm256_mul_ps(a, b);
    asm("" : "+x"(p));
    return p;
  }

  // Adjacent-lane sums of a then b, each left + right (hadd would add right + left, which picks
  // the other NaN's payload when both are NaN): the even and odd lanes per 128-bit half
  // ([a0 a2 b0 b2 | a4 a6 b4 b6] and the odd ones), added, and the 64-bit pairs put in order.
  MPG_ALWAYS_INLINE static F pair_add(F a, F b) {
    const F even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    const F odd = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    const __m256d sums = _mm256_castps_pd(_mm256_add_ps(even, odd));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(sums, 0xD8));
  }

  template <class T>
  MPG_ALWAYS_INLINE static F load(const T* p) {
    if constexpr (std::is_same_v<T, float>) {
      return _mm256_loadu_ps(p);
    } else {
      const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      if constexpr (std::is_same_v<T, bfloat16>) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
      } else {
        return _mm256_cvtph_ps(bits);
      }
    }
  }
  template <class T>
  MPG_ALWAYS_INLINE static F load_partial(const T* p, int64_t n) {
    T buffer[kLanes] = {};
    for (int64_t i = 0; i < n; ++i) buffer[i] = p[i];
    return load<T>(buffer);
  }

  // fp32 -> bf16 bits in the low half of each 32-bit lane, round to nearest even with integer
  // ops (see kernel_avx512.hpp for why not VCVTNEPS2BF16); NaN -> quiet NaN of its sign.
  MPG_ALWAYS_INLINE static __m256i narrow_bf16_epi32(F x) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i quiet_nan = _mm256_or_si256(_mm256_and_si256(high, _mm256_set1_epi32(0x8000)),
                                              _mm256_set1_epi32(0x7FC0));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(rounded, quiet_nan, nan);
  }
  // 8 fp32 lanes narrowed to 16-bit T's bits.
  template <class T>
  MPG_ALWAYS_INLINE static __m128i narrow8(F x) {
    if constexpr (std::is_same_v<T, bfloat16>) {
      const __m256i r = narrow_bf16_epi32(x);  // values <= 0xFFFF: the saturating pack is exact
      return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    } else {
      return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
  }

  // 16 fp32 lanes (a then b) narrowed to 16-bit T's bits. bf16: one 256-bit pack of both
  // (per 128-bit half: a's four, then b's four) and one 64-bit permute to restore the order,
  // instead of a pack and an extract per vector and an insert.
  template <class T>
  MPG_ALWAYS_INLINE static __m256i narrow16(F a, F b) {
    if constexpr (std::is_same_v<T, bfloat16>) {
      const __m256i packed = _mm256_packus_epi32(narrow_bf16_epi32(a), narrow_bf16_epi32(b));
      return _mm256_permute4x64_epi64(packed, 0xD8);
    } else {
      return _mm256_set_m128i(narrow8<T>(b), narrow8<T>(a));
    }
  }

  template <class T>
  MPG_ALWAYS_INLINE static void store(T* p, F v) {
    if constexpr (std::is_same_v<T, float>) {
      _mm256_storeu_ps(p, v);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), narrow8<T>(v));
    }
  }
  template <class T>
  MPG_ALWAYS_INLINE static void store_partial(T* p, F v, int64_t n) {
    T buffer[kLanes];
    store<T>(buffer, v);
    for (int64_t i = 0; i < n; ++i) p[i] = buffer[i];
  }
  // One aligned 64-byte line from v[0], v[1] (fp32) or v[0..3] (16-bit), non-temporal.
  template <class T>
  MPG_ALWAYS_INLINE static void stream_line(T* p, const F* v) {
    __m256i* dst = reinterpret_cast<__m256i*>(p);
    if constexpr (std::is_same_v<T, float>) {
      _mm256_stream_si256(dst, _mm256_castps_si256(v[0]));
      _mm256_stream_si256(dst + 1, _mm256_castps_si256(v[1]));
    } else {
      _mm256_stream_si256(dst, narrow16<T>(v[0], v[1]));
      _mm256_stream_si256(dst + 1, narrow16<T>(v[2], v[3]));
    }
  }
  MPG_ALWAYS_INLINE static void prefetch(const void* p) {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
  }
  MPG_ALWAYS_INLINE static void fence() { _mm_sfence(); }
};

}  // namespace mpg::detail::avx2

#define MPG_KERNEL_NAMESPACE avx2
#include "mpg/detail/kernel_body.hpp"
#undef MPG_KERNEL_NAMESPACE
MPG_END_TARGET

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Measurements behind the constants: scripts/tune_kernels.sh on an AVX2-only AMD EPYC (2 cores,
// 2026-12-03; load average 6-8 from other builds, so each figure is the median of 2 rounds x 3
// repetitions, all variants interleaved). permute_grad efficiency, the eight DRAM rows of
// bench_permute_grad (4 shapes x 1, 2 threads), min .. max:
//   prefetch 2048, block 8 (the AVX-512 choice)   0.89 .. 1.05
//   prefetch 0,    block 8                        1.06 .. 1.15
//   prefetch 2048, block 4                        0.94 .. 1.01
//   prefetch 0,    block 4 (this set)             1.09 .. 1.25
// (a first run: prefetch 1024 0.92-1.03, 4096 0.88-1.04, block 16 0.85-1.02). On this CPU the
// software prefetch only competes with the hardware prefetchers for the same lines, and a block
// of one line per row keeps each row's access a plain sequential stream. In-cache rows
// (16 x 8 x 4096 and 1 x 1 x 64) were within the noise between all variants. Values above 1:
// the op beat the yardstick under load; the idle figures are in README.md.

#endif  // MPG_HAVE_X86_KERNELS
