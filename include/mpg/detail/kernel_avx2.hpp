#pragma once
#include "mpg/detail/guard.hpp"

#include "mpg/detail/cpu.hpp"

#if MPG_HAVE_X86_KERNELS
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "mpg/detail/kernel_args.hpp"
#include "mpg/detail/kernel_portable.hpp"
#include "mpg/detail/kernel_x86.hpp"
#include "mpg/detail/mode.hpp"
#include "mpg/types.hpp"

// AVX2 + F16C kernel, the same design as the AVX-512 one (see kernel_avx512.hpp): kept-row
// pointers gathered once per token, blocks of the hidden dimension summed in fp32 registers in
// ascending k with one vaddps per copy, non-temporal stores on whole aligned lines when asked.
// AVX2 has no masked 16-bit loads, so the last columns run in single vectors and then, below
// 8 columns, through the portable scalar code (exact Eigen conversions).

// GCC 12 warns inside its own intrinsics (_mm512_undefined_* reads itself, GCC bug 105593)
// once they are inlined into target-attribute functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace mpg::detail::avx2 {

// 8 accumulators (64 columns): enough independent adds to cover 2 ports x 4 cycles, and half of
// the 16 ymm registers left for loads and the bf16 rounding temporaries.
inline constexpr int kVectors = 8;
inline constexpr int64_t kBlockColumns = kVectors * 8;

// The 8 elements at p, widened to fp32 exactly.
template <class T>
MPG_TARGET_AVX2 static inline __m256 load8(const T* p) {
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

// fp32 -> bf16 bits in the low half of each 32-bit lane, round to nearest even with integer
// ops (see narrow_bf16 in kernel_avx512.hpp for why not VCVTNEPS2BF16); NaN -> signed qNaN.
MPG_TARGET_AVX2 static inline __m256i narrow_bf16_epi32(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i quiet_nan =
      _mm256_or_si256(_mm256_and_si256(high, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7FC0));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, quiet_nan, nan);
}

// 8 fp32 lanes narrowed to 16-bit T.
template <class T>
MPG_TARGET_AVX2 static inline __m128i narrow8(__m256 x) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    const __m256i r = narrow_bf16_epi32(x);  // values <= 0xFFFF: the saturating pack is exact
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  } else {
    return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}

// 32 bytes of T from the accumulators starting at acc[0].
template <class T>
MPG_TARGET_AVX2 static inline __m256i narrow32_bytes(const __m256* acc) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_castps_si256(acc[0]);
  } else {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(narrow8<T>(acc[0])), narrow8<T>(acc[1]),
                                   1);
  }
}

// Stores 64 bytes (one cache line's worth of T) from the accumulators starting at acc[0];
// non-temporal only where asked and the destination is a whole aligned line.
template <class T>
MPG_TARGET_AVX2 static inline void store_line(T* p, const __m256* acc, bool streaming) {
  constexpr int kVectorsPer32Bytes = static_cast<int>(32 / (8 * sizeof(T)));
  const __m256i lo = narrow32_bytes<T>(acc);
  const __m256i hi = narrow32_bytes<T>(acc + kVectorsPer32Bytes);
  __m256i* dst = reinterpret_cast<__m256i*>(p);
  if (streaming && (reinterpret_cast<uintptr_t>(p) & 63) == 0) {
    _mm256_stream_si256(dst, lo);
    _mm256_stream_si256(dst + 1, hi);
  } else {
    _mm256_storeu_si256(dst, lo);
    _mm256_storeu_si256(dst + 1, hi);
  }
}

template <class T>
MPG_TARGET_AVX2 static inline void store8(T* p, __m256 x) {
  if constexpr (std::is_same_v<T, float>) {
    _mm256_storeu_ps(p, x);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), narrow8<T>(x));
  }
}

// One full block of columns [h0, h0 + kBlockColumns), prefetching the same columns of the next
// token's rows (one token ahead: far enough for DRAM latency, near enough to stay cached).
template <class T>
MPG_TARGET_AVX2 static inline void sum_block(const KeptRows<T>& kept, const KeptRows<T>& next,
                                             int64_t h0, T* out, bool streaming) {
  __m256 acc[kVectors];
  const T* const* rows = kept.rows();
  int64_t k = 0;
  if (kept.assigns_first()) {
    MPG_UNROLL
    for (int v = 0; v < kVectors; ++v) acc[v] = load8(rows[0] + h0 + 8 * v);
    k = 1;
  } else {
    MPG_UNROLL
    for (int v = 0; v < kVectors; ++v) acc[v] = _mm256_setzero_ps();
  }
  for (; k < kept.count(); ++k) {
    const T* g = rows[k] + h0;
    MPG_UNROLL
    for (int v = 0; v < kVectors; ++v) acc[v] = _mm256_add_ps(acc[v], load8(g + 8 * v));
  }
  x86::prefetch_next(next, h0, kBlockColumns * static_cast<int>(sizeof(T)));
  constexpr int kVectorsPerLine = static_cast<int>(x86::kLineBytes / (8 * sizeof(T)));
  MPG_UNROLL
  for (int v = 0; v < kVectors; v += kVectorsPerLine) {
    store_line(out + h0 + 8 * v, acc + v, streaming);
  }
}

// Columns [h0, hidden) when fewer than a block remain: whole vectors, then scalar.
template <class T>
MPG_TARGET_AVX2 static inline void sum_tail(const KeptRows<T>& kept, int64_t h0, int64_t hidden,
                                            T* out) {
  const T* const* rows = kept.rows();
  const int64_t first_added = kept.assigns_first() ? 1 : 0;
  for (; h0 + 8 <= hidden; h0 += 8) {
    __m256 acc = first_added ? load8(rows[0] + h0) : _mm256_setzero_ps();
    for (int64_t k = first_added; k < kept.count(); ++k) {
      acc = _mm256_add_ps(acc, load8(rows[k] + h0));
    }
    store8(out + h0, acc);
  }
  if (h0 < hidden) portable::sum_columns(rows, kept.count(), kept.assigns_first(), out, h0, hidden);
}

template <class T, class I, Mode M>
MPG_TARGET_AVX2 void gather_sum(const GatherSumArgs<T, I>& a, int64_t token_begin,
                                int64_t token_end) {
  x86::for_each_token<T, I, M, kBlockColumns, &sum_block<T>, &sum_tail<T>>(a, token_begin,
                                                                           token_end);
}

}  // namespace mpg::detail::avx2

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // MPG_HAVE_X86_KERNELS
