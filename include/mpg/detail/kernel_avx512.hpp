#pragma once
#include "mpg/detail/guard.hpp"

#include "mpg/detail/cpu.hpp"

#if MPG_HAVE_X86_KERNELS
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "mpg/detail/kernel_args.hpp"
#include "mpg/detail/kernel_x86.hpp"
#include "mpg/detail/mode.hpp"
#include "mpg/types.hpp"

// AVX-512 (F + BW + VL) kernel, compiled through target attributes so that it exists in builds
// without -march flags; fast.hpp calls it only when the CPU has those features.
//
// Design. Per token, the kept rows' pointers are gathered once (KeptRows). The hidden dimension
// is walked in blocks of kVectors x 16 columns; for each block all kept rows are added into
// fp32 accumulators held in registers, in ascending k, one vaddps per element and copy (no FMA,
// no reassociation), then the block is narrowed and stored. Row-at-a-time (one token finishes
// before the next starts) keeps the write stream sequential and each G row a sequential read.
// The last partial block uses masked loads and stores, which never touch memory past the row.
// Measured on DRAM-sized shapes (Zen 4, 1 thread): the software prefetch of the next token's
// rows doubles throughput (the gathered rows defeat the hardware prefetcher at every row
// start); a variant keeping 1024 accumulators in an L1 buffer and adding whole row chunks ran
// at about half the speed of register blocks.
//
// Conversions. bf16 -> fp32 is a shift, fp16 -> fp32 is VCVTPH2PS: both exact. fp32 -> fp16 is
// VCVTPS2PH with round-to-nearest-even, exact for subnormals, overflow and inf. fp32 -> bf16 is
// done with integer ops, NOT VCVTNEPS2BF16: that instruction treats subnormal inputs as zero
// (DAZ) and flushes subnormal results, which SPEC section 3 forbids.

// GCC 12 warns inside its own intrinsics (_mm512_undefined_* reads itself, GCC bug 105593)
// once they are inlined into target-attribute functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace mpg::detail::avx512 {

// 8 accumulators (128 columns): two add ports x 4 cycles latency need 8 independent sums when
// the rows come from cache; that leaves 24 of the 32 zmm registers for loads and conversions.
inline constexpr int kVectors = 8;
inline constexpr int64_t kBlockColumns = kVectors * 16;

// The 16 elements at p, widened to fp32 exactly; a masked load reads only the active lanes.
template <class T>
MPG_TARGET_AVX512 static inline __m512 load16(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (std::is_same_v<T, bfloat16>) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    } else {
      return _mm512_cvtph_ps(bits);
    }
  }
}

template <class T>
MPG_TARGET_AVX512 static inline __m512 load16_masked(const T* p, __mmask16 mask) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_maskz_loadu_ps(mask, p);
  } else {
    const __m256i bits = _mm256_maskz_loadu_epi16(mask, p);
    if constexpr (std::is_same_v<T, bfloat16>) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    } else {
      return _mm512_cvtph_ps(bits);
    }
  }
}

// fp32 -> bf16 bits, round to nearest even: add 0x7FFF plus the lowest kept bit, truncate. The
// carry turns the largest finite values into inf exactly when RNE overflows. NaN would carry
// into the sign or become inf, so it is replaced by the quiet NaN of its sign (Eigen's choice).
MPG_TARGET_AVX512 static inline __m256i narrow_bf16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __m512i quiet_nan =
      _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x8000)),
                      _mm512_set1_epi32(0x7FC0));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet_nan));
}

// 16 fp32 lanes narrowed to T's bits (fp32 stays in a zmm).
template <class T>
MPG_TARGET_AVX512 static inline __m256i narrow16(__m512 x) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return narrow_bf16(x);
  } else {
    return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}

// Stores 64 bytes (one cache line's worth of T) starting at lane 0 of acc[0]; non-temporal only
// where asked and the destination is a whole aligned line, so no line is half streamed.
template <class T>
MPG_TARGET_AVX512 static inline void store_line(T* p, const __m512* acc, bool streaming) {
  __m512i line;
  if constexpr (std::is_same_v<T, float>) {
    line = _mm512_castps_si512(acc[0]);
  } else {
    line = _mm512_inserti64x4(_mm512_castsi256_si512(narrow16<T>(acc[0])), narrow16<T>(acc[1]), 1);
  }
  if (streaming && (reinterpret_cast<uintptr_t>(p) & 63) == 0) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), line);
  } else {
    _mm512_storeu_si512(p, line);
  }
}

template <class T>
MPG_TARGET_AVX512 static inline void store16_masked(T* p, __m512 x, __mmask16 mask) {
  if constexpr (std::is_same_v<T, float>) {
    _mm512_mask_storeu_ps(p, mask, x);
  } else {
    _mm256_mask_storeu_epi16(p, mask, narrow16<T>(x));
  }
}

// One full block: columns [h0, h0 + kBlockColumns) of one out row. While the block's rows are
// being added, the same columns of the next token's rows are prefetched: one token ahead is far
// enough to hide DRAM latency and near enough to still be in cache when used.
template <class T>
MPG_TARGET_AVX512 static inline void sum_block(const KeptRows<T>& kept, const KeptRows<T>& next,
                                               int64_t h0, T* out, bool streaming) {
  __m512 acc[kVectors];
  const T* const* rows = kept.rows();
  int64_t k = 0;
  if (kept.assigns_first()) {
    MPG_UNROLL
    for (int v = 0; v < kVectors; ++v) acc[v] = load16(rows[0] + h0 + 16 * v);
    k = 1;
  } else {
    MPG_UNROLL
    for (int v = 0; v < kVectors; ++v) acc[v] = _mm512_setzero_ps();
  }
  for (; k < kept.count(); ++k) {
    const T* g = rows[k] + h0;
    MPG_UNROLL
    for (int v = 0; v < kVectors; ++v) acc[v] = _mm512_add_ps(acc[v], load16(g + 16 * v));
  }
  x86::prefetch_next(next, h0, kBlockColumns * static_cast<int>(sizeof(T)));
  constexpr int kVectorsPerLine = static_cast<int>(x86::kLineBytes / (16 * sizeof(T)));
  MPG_UNROLL
  for (int v = 0; v < kVectors; v += kVectorsPerLine) {
    store_line(out + h0 + 16 * v, acc + v, streaming);
  }
}

// Columns [h0, hidden) when fewer than a block remain: one masked vector at a time.
template <class T>
MPG_TARGET_AVX512 static inline void sum_tail(const KeptRows<T>& kept, int64_t h0, int64_t hidden,
                                              T* out) {
  const T* const* rows = kept.rows();
  const int64_t first_added = kept.assigns_first() ? 1 : 0;
  for (; h0 < hidden; h0 += 16) {
    const int64_t n = hidden - h0 < 16 ? hidden - h0 : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
    __m512 acc = first_added ? load16_masked(rows[0] + h0, mask) : _mm512_setzero_ps();
    for (int64_t k = first_added; k < kept.count(); ++k) {
      acc = _mm512_add_ps(acc, load16_masked(rows[k] + h0, mask));
    }
    store16_masked(out + h0, acc, mask);
  }
}

template <class T, class I, Mode M>
MPG_TARGET_AVX512 void gather_sum(const GatherSumArgs<T, I>& a, int64_t token_begin,
                                  int64_t token_end) {
  x86::for_each_token<T, I, M, kBlockColumns, &sum_block<T>, &sum_tail<T>>(a, token_begin,
                                                                           token_end);
}

}  // namespace mpg::detail::avx512

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // MPG_HAVE_X86_KERNELS
