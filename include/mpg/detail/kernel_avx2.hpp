#pragma once
#include "mpg/detail/guard.hpp"

#include "mpg/detail/cpu.hpp"

#if MPG_HAVE_X86_KERNELS
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "mpg/detail/gather_sum.hpp"
#include "mpg/detail/stream_bytes.hpp"
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
  // 4 accumulators (32 columns, one 64-byte line of a 16-bit row) and an in-row prefetch 512
  // bytes ahead: measured, see the notes at the end of this file.
  static constexpr int kBlockVectors = MPG_BLOCK_VECTORS_OR(4);
  static constexpr int64_t kPrefetchBytes = MPG_PREFETCH_BYTES_OR(512);
  static int64_t prefetch_bytes() { return kPrefetchBytes; }             // the same on every CPU
  static bool prefetch_to_l2() { return MPG_PREFETCH_TO_L2_OR(false); }  // L1 on every CPU
  // MoeTokenUnpermuteGrad reads one X row at a time, not K at once: there the prefetch pays.
  static constexpr int64_t kCopyPrefetchBytes = MPG_PREFETCH_BYTES_OR(1024);

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

  // The first three pair levels over 8 vectors (64 consecutive values) in two steps, with the
  // same adds as pair_add applied level by level, but cheaper: a level's even/odd split within
  // 128-bit halves leaves its sums in an order whose adjacent lanes are still siblings, so the
  // order is restored once, by the last level's cross-half add (21 instructions instead of 28).
  // pair_levels2 of v[0..3]: [v0 0-3, v1 0-3, v2 0-3, v3 0-3 | v0 4-7, v1 4-7, v2 4-7, v3 4-7].
  static constexpr bool kHasPairLevels2 = true;
  MPG_ALWAYS_INLINE static F pair_levels2(const F* v) {
    return pair_level(pair_level(v[0], v[1]), pair_level(v[2], v[3]));
  }
  // The 8 level-3 sums, in order, from pair_levels2 of v[0..3] (low) and of v[4..7] (high).
  MPG_ALWAYS_INLINE static F pair_level3(F low, F high) {
    return _mm256_add_ps(_mm256_permute2f128_ps(low, high, 0x20),
                         _mm256_permute2f128_ps(low, high, 0x31));
  }
  // Per 128-bit half: the even lanes of a then b plus their odd lanes (pair_add without its
  // final permute).
  MPG_ALWAYS_INLINE static F pair_level(F a, F b) {
    return _mm256_add_ps(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
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
  // ops (see kernel_avx512.hpp for why not VCVTNEPS2BF16). Right for every value but a NaN with
  // nonzero low 16 bits, which the carry can turn into an infinity or a zero.
  MPG_ALWAYS_INLINE static __m256i round_bf16_epi32(F x) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  }
  // The same for every value: NaN -> quiet NaN of its sign.
  MPG_ALWAYS_INLINE static __m256i narrow_bf16_epi32(F x) {
    const __m256i high = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
    const __m256i quiet_nan = _mm256_or_si256(_mm256_and_si256(high, _mm256_set1_epi32(0x8000)),
                                              _mm256_set1_epi32(0x7FC0));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(round_bf16_epi32(x), quiet_nan, nan);
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
  // instead of a pack and an extract per vector and an insert; the NaN fix-up only when one
  // compare of a with b finds a NaN in either (5 fewer instructions per 16 values without).
  // From kKnown = Narrowing::kNoLowNan (the caller knows no value is a NaN with low bits), no
  // compare either.
  template <class T, Narrowing kKnown = Narrowing::kAny>
  MPG_ALWAYS_INLINE static __m256i narrow16(F a, F b) {
    if constexpr (std::is_same_v<T, bfloat16>) {
      const bool any_nan =
          kKnown == Narrowing::kAny && _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q)) != 0;
      const __m256i packed = any_nan
                                 ? _mm256_packus_epi32(narrow_bf16_epi32(a), narrow_bf16_epi32(b))
                                 : _mm256_packus_epi32(round_bf16_epi32(a), round_bf16_epi32(b));
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
  // One aligned 64-byte line from v[0], v[1] (fp32) or v[0..3] (16-bit), non-temporal, narrowed
  // as kKnown allows (see narrow16).
  static constexpr bool kTakesNarrowing = true;
  template <class T, Narrowing kKnown = Narrowing::kAny>
  MPG_ALWAYS_INLINE static void stream_line(T* p, const F* v) {
    __m256i* dst = reinterpret_cast<__m256i*>(p);
    if constexpr (std::is_same_v<T, float>) {
      _mm256_stream_si256(dst, _mm256_castps_si256(v[0]));
      _mm256_stream_si256(dst + 1, _mm256_castps_si256(v[1]));
    } else {
      _mm256_stream_si256(dst, narrow16<T, kKnown>(v[0], v[1]));
      _mm256_stream_si256(dst + 1, narrow16<T, kKnown>(v[2], v[3]));
    }
  }
  MPG_ALWAYS_INLINE static void stream_bytes(void* dst, const void* src, int64_t n) {
    stream_bytes_x86(dst, src, n);
  }
  MPG_ALWAYS_INLINE static void prefetch(const void* p) {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
  }
  MPG_ALWAYS_INLINE static void prefetch_l2(const void* p) {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
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
//   prefetch 0,    block 4 (kept until below)     1.09 .. 1.25
// (a first run: prefetch 1024 0.92-1.03, 4096 0.88-1.04, block 16 0.85-1.02). On this CPU the
// software prefetch seemed only to compete with the hardware prefetchers (but see below), and a
// block of one line per row keeps each row's access a plain sequential stream. In-cache rows
// (16 x 8 x 4096 and 1 x 1 x 64) were within the noise between all variants. (Those
// efficiencies were against the one-stream yardstick of that day, which these kernels beat; the
// comparison between variants stands.) Measured since, against the plan-choosing yardstick
// (2026-12-03, idle, scripts/tune_kernels.sh): the next token's row heads prefetched (2, 4 or 8
// lines a row) and the K rows summed 4 or 2 at a time over 16-block chunks (fewer streams at
// once, as the yardstick's 4 streams read faster than 8) gave no gain and 15-30% less,
// respectively; neither was kept.
// - Since out rows that start off a line stream their whole lines (2026-12-03, kernel_body.hpp's
//   gather_sum; bench_permute_grad's rows are such, so all of the above timed plain stores),
//   the prefetch pays (idle, scripts/tune_kernels.sh, 3 rounds x 3 repetitions, efficiency of
//   the four DRAM rows, 1 thread | 2 threads): prefetch 0 0.79-0.92 | 0.95-1.01; 512
//   0.90-1.01 | 0.95-1.04; 1024 0.86-0.93 | 0.94-1.01 (in a first 2-round run: 0 0.84-0.90 |
//   0.95-1.02, 1024 0.88-0.92 | 0.94-0.98, 2048 0.75-0.95 | 0.93-0.97, block 8 0.82-0.89 |
//   0.94-1.00, 2048 with block 8 0.76-0.83 | 0.85-0.93). In-cache rows were within the noise.
// - kCopyPrefetchBytes = 1024 (MoeTokenUnpermuteGrad): bench_token_unpermute_grad, 2 rounds x 3
//   repetitions, GB/s 1 | 2 threads, bf16 4096 x 8 x 4096 and fp32 8192 x 2 x 4096:
//   no prefetch 7.8 | 14.5 and 14.0 | 22.4; 1024: 8.8 | 17.8 and 16.0 | 24.6; 4096: 8.2 | 16.8
//   and 14.8 | 22.6; in a slower second round 512, 1024 and 2048 were within the noise.
// - MoeTokenUnpermuteGrad bf16, tried and not kept (2026-12-03, callgrind, 256 x 8 x 4096, one
//   thread, instructions per column per copy): X, g and dX as even and odd elements (widening
//   in 2 instructions per 16 values, the first pair level one add, dX put in order by a blend
//   instead of a pack and a permute): 2.12 against 2.17 (misaligned dX rows) and 2.12 against
//   2.15 (64-byte aligned ones). The streamed dX lines must widen g again wherever the row's
//   first line boundary is not at a pair boundary, which eats most of the saving; not worth
//   a second layout of g.

#endif  // MPG_HAVE_X86_KERNELS
