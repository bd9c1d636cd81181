// The AVX-512 vector traits, for the kernel sets of kernel_avx512.hpp. Deliberately NO include
// guard, as kernel_body.hpp: kernel_avx512.hpp includes it once per set, inside the set's
// namespace and target region, where Target::kNativeBf16 says whether the region has
// AVX512_BF16 (whose conversion then narrows bf16 outputs, see has_bf16_special).

namespace mpg::detail::MPG_KERNEL_NAMESPACE {

struct Vec {
  using F = __m512;
  static constexpr int64_t kLanes = 16;
  // 8 accumulators (128 columns): two add ports x 4 cycles latency need 8 independent sums when
  // the rows come from cache; that leaves 24 of the 32 zmm registers for loads and conversions.
  static constexpr int kBlockVectors = MPG_BLOCK_VECTORS_OR(8);
  // 1 KiB ahead, past the row end; 256 bytes on Zen 4, whose gathers lost up to a fifth of
  // their speed with 1 KiB. Measured: see the notes at the end of kernel_avx512.hpp.
  static constexpr int64_t kPrefetchBytes = MPG_PREFETCH_BYTES_OR(1024);
  static constexpr int64_t kPrefetchBytesZen4 = MPG_PREFETCH_BYTES_OR(256);
  static int64_t prefetch_bytes() {
    return cpu_features().amd_zen4 ? kPrefetchBytesZen4 : kPrefetchBytes;
  }
  static constexpr int64_t kCopyPrefetchBytes = MPG_PREFETCH_BYTES_OR(1024);  // see the notes
  // The in-row prefetches fill L2 only (PREFETCHT1) on Zen 4, where that took a sixth off
  // MoeTokenUnpermuteGrad's two-thread time; L1 elsewhere. Measured: see the notes.
  static bool prefetch_to_l2() { return MPG_PREFETCH_TO_L2_OR(cpu_features().amd_zen4); }

  MPG_ALWAYS_INLINE static F zero() { return _mm512_setzero_ps(); }
  MPG_ALWAYS_INLINE static F set1(float x) { return _mm512_set1_ps(x); }
  MPG_ALWAYS_INLINE static F add(F a, F b) { return _mm512_add_ps(a, b); }
  // GCC lowers _mm512_mul_ps to a plain vector multiply that -ffp-contract=fast would fuse with
  // the following add: the empty asm keeps the rounded product (see product_fp32).
  MPG_ALWAYS_INLINE static F mul(F a, F b) {
    F p = _mm512_mul_ps(a, b);
    asm("" : "+v"(p));
    return p;
  }

  // acc + a * b, rounded once: only where a * b is exact (sum_group's kFused), since it then
  // has the bits of add(acc, mul(a, b)). Saving the multiply took 4-7% off MoeTokenUnpermute's
  // one-thread time on the Zen 5 guest (2026-12-07, 3 interleaved rounds of 3, -O2 | native):
  // fp16 2048 x 8 x 7168 with fp16 probs 10.35 | 10.93 ms to 9.95 | 10.13, bf16 4096 x 8 x 4096
  // with bf16 probs 12.95 | 13.32 ms to 12.44 | 12.69 (a variant fusing every copy).
  static constexpr bool kHasFma = true;
  MPG_ALWAYS_INLINE static F fmadd(F a, F b, F acc) { return _mm512_fmadd_ps(a, b, acc); }

  // Adjacent-lane sums of a then b: the even lanes of (a, b) plus the odd lanes.
  MPG_ALWAYS_INLINE static F pair_add(F a, F b) {
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_add_ps(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b));
  }

  MPG_ALWAYS_INLINE static F widen16(__m256i bits, std::true_type /*bf16*/) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  MPG_ALWAYS_INLINE static F widen16(__m256i bits, std::false_type /*fp16*/) {
    return _mm512_cvtph_ps(bits);
  }

  template <class T>
  MPG_ALWAYS_INLINE static F load(const T* p) {
    if constexpr (std::is_same_v<T, float>) {
      return _mm512_loadu_ps(p);
    } else {
      return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                     std::is_same<T, bfloat16>{});
    }
  }
  template <class T>
  MPG_ALWAYS_INLINE static F load_partial(const T* p, int64_t n) {
    const auto mask = static_cast<__mmask16>((1u << n) - 1);
    if constexpr (std::is_same_v<T, float>) {
      return _mm512_maskz_loadu_ps(mask, p);
    } else {
      return widen16(_mm256_maskz_loadu_epi16(mask, p), std::is_same<T, bfloat16>{});
    }
  }

  // fp32 -> bf16 bits in the low half of each 32-bit lane, round to nearest even: add 0x7FFF
  // plus the lowest kept bit, truncate. The carry turns the largest finite values into inf
  // exactly when RNE overflows. Right for every value but a NaN with nonzero low 16 bits, which
  // the carry can turn into an infinity or a zero.
  MPG_ALWAYS_INLINE static __m512i round_bf16_epi32(F x) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    return _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  }
  // The same for every value: NaN -> the quiet NaN of its sign (Eigen's choice).
  MPG_ALWAYS_INLINE static __m512i narrow_bf16_epi32(F x) {
    const __m512i quiet_nan = _mm512_ternarylogic_epi32(
        _mm512_srli_epi32(_mm512_castps_si512(x), 16), _mm512_set1_epi32(0x8000),
        _mm512_set1_epi32(0x7FC0), 0xEA);  // (a & b) | c
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi32(round_bf16_epi32(x), nan, quiet_nan);
  }
  // The AVX512_BF16 set's conversion (VCVTNEPS2BF16) rounds to nearest even but treats
  // subnormal inputs as zero and keeps a NaN's payload where the contract (and narrow_bf16_epi32)
  // gives the quiet NaN of its sign: vectors holding either take the integer rounding.
  MPG_ALWAYS_INLINE static bool has_bf16_special(F x) {
    constexpr int kNanOrSubnormal = 0x01 | 0x20 | 0x80;  // VFPCLASSPS: QNaN, denormal, SNaN
    return _mm512_fpclass_ps_mask(x, kNanOrSubnormal) != 0;
  }
  template <class Bf16Vector>
  MPG_ALWAYS_INLINE static auto bf16_bits(Bf16Vector v) {
    if constexpr (sizeof(v) == 32) {
      return __builtin_bit_cast(__m256i, v);
    } else {
      return __builtin_bit_cast(__m512i, v);
    }
  }
  // 16 fp32 lanes narrowed to 16-bit T's bits.
  template <class T>
  MPG_ALWAYS_INLINE static __m256i narrow16(F x) {
    if constexpr (std::is_same_v<T, bfloat16>) {
      if constexpr (Target::kNativeBf16) {
        if (!has_bf16_special(x)) return bf16_bits(_mm512_cvtneps_pbh(x));
      }
      return _mm512_cvtepi32_epi16(narrow_bf16_epi32(x));
    } else {
      return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
  }
  // 32 fp32 lanes, a then b, narrowed to 16-bit T's bits. bf16: both halves rounded in 32-bit
  // lanes and packed (values <= 0xFFFF: the saturating pack is exact; it interleaves 128-bit
  // blocks, the permute puts them back), the NaN fix-up only when a lane is a NaN, and with
  // what the caller knows (kKnown) fewer checks: no NaN compare from kNoLowNan, no VFPCLASSPS
  // guard of the AVX512_BF16 conversion with kOrdinary.
  template <class T, Narrowing kKnown = Narrowing::kAny>
  MPG_ALWAYS_INLINE static __m512i narrow32(F a, F b) {
    if constexpr (std::is_same_v<T, bfloat16>) {
      if constexpr (Target::kNativeBf16) {
        if (kKnown == Narrowing::kOrdinary || (!has_bf16_special(a) && !has_bf16_special(b))) {
          return bf16_bits(_mm512_cvtne2ps_pbh(b, a));  // b goes to the high half
        }
      }
      const bool any_nan = kKnown == Narrowing::kAny && _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) != 0;
      const __m512i packed = any_nan
                                 ? _mm512_packus_epi32(narrow_bf16_epi32(a), narrow_bf16_epi32(b))
                                 : _mm512_packus_epi32(round_bf16_epi32(a), round_bf16_epi32(b));
      return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), packed);
    } else {
      return _mm512_inserti64x4(_mm512_castsi256_si512(narrow16<T>(a)), narrow16<T>(b), 1);
    }
  }

  template <class T>
  MPG_ALWAYS_INLINE static void store(T* p, F v) {
    if constexpr (std::is_same_v<T, float>) {
      _mm512_storeu_ps(p, v);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow16<T>(v));
    }
  }
  template <class T>
  MPG_ALWAYS_INLINE static void store_partial(T* p, F v, int64_t n) {
    const auto mask = static_cast<__mmask16>((1u << n) - 1);
    if constexpr (std::is_same_v<T, float>) {
      _mm512_mask_storeu_ps(p, mask, v);
    } else {
      _mm256_mask_storeu_epi16(p, mask, narrow16<T>(v));
    }
  }
  // One aligned 64-byte line from v[0] (fp32) or v[0], v[1] (16-bit), non-temporal, narrowed
  // as kKnown allows (see narrow32).
  static constexpr bool kTakesNarrowing = true;
  template <class T, Narrowing kKnown = Narrowing::kAny>
  MPG_ALWAYS_INLINE static void stream_line(T* p, const F* v) {
    if constexpr (std::is_same_v<T, float>) {
      _mm512_stream_ps(p, v[0]);
    } else {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(p), narrow32<T, kKnown>(v[0], v[1]));
    }
  }
  // Narrowing::kOrdinary saves this set a VFPCLASSPS per vector, worth the range of |v| over
  // 8 vectors (abs_range) to prove it; the integer rounding gains nothing more from it.
  static constexpr bool kOrdinaryIsCheaper = Target::kNativeBf16;
  MPG_ALWAYS_INLINE static AbsRange abs_range(const float* p, int vectors) {
    const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i one = _mm512_set1_epi32(1);
    __m512i max_bits = _mm512_setzero_si512();
    __m512i min_bits_less_1 = _mm512_set1_epi32(-1);  // a zero wraps to the largest: ignored
    for (int i = 0; i < vectors; ++i) {
      const __m512i bits = _mm512_and_si512(_mm512_loadu_si512(p + i * kLanes), magnitude);
      max_bits = _mm512_max_epu32(max_bits, bits);
      min_bits_less_1 = _mm512_min_epu32(min_bits_less_1, _mm512_sub_epi32(bits, one));
    }
    return {_mm512_reduce_max_epu32(max_bits), _mm512_reduce_min_epu32(min_bits_less_1) + 1};
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

}  // namespace mpg::detail::MPG_KERNEL_NAMESPACE
