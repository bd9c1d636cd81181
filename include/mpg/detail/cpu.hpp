#pragma once
#include "mpg/detail/guard.hpp"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "mpg/options.hpp"

// Kernel sets for other ISAs are compiled inside target regions (MPG_BEGIN_TARGET .. END), so
// they exist in every x86-64 GCC/Clang build, whatever -march says; the CPU is asked at run
// time which may run. MPG_PORTABLE_ONLY (CMake option of the same name) compiles no SIMD kernel
// set at all: only the portable one exists, on every CPU.
#if !defined(MPG_PORTABLE_ONLY) && (defined(__x86_64__) || defined(_M_X64)) && \
    (defined(__GNUC__) || defined(__clang__))
#define MPG_HAVE_X86_KERNELS 1
#include <cpuid.h>
#else
#define MPG_HAVE_X86_KERNELS 0
#endif
// The NEON set needs no target region: Advanced SIMD is part of base AArch64.
#if !defined(MPG_PORTABLE_ONLY) && defined(__aarch64__) && defined(__ARM_NEON) && \
    (defined(__GNUC__) || defined(__clang__))
#define MPG_HAVE_NEON_KERNELS 1
#else
#define MPG_HAVE_NEON_KERNELS 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define MPG_PRAGMA(tokens) _Pragma(#tokens)
// Every function defined between MPG_BEGIN_TARGET("avx2,f16c") and MPG_END_TARGET is compiled
// for those features (templates and member functions included), without an attribute on each.
#if defined(__clang__)
#define MPG_BEGIN_TARGET(features) \
  MPG_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define MPG_END_TARGET MPG_PRAGMA(clang attribute pop)
#else
#define MPG_BEGIN_TARGET(features) MPG_PRAGMA(GCC push_options) MPG_PRAGMA(GCC target(features))
#define MPG_END_TARGET MPG_PRAGMA(GCC pop_options)
#endif
#define MPG_ALWAYS_INLINE __attribute__((always_inline)) inline
// Fully unrolls a loop over an array of vector accumulators so that they live in registers:
// GCC at -O2 leaves such a loop rolled and keeps the array on the stack.
#define MPG_UNROLL _Pragma("GCC unroll 16")
#else
#define MPG_BEGIN_TARGET(features)
#define MPG_END_TARGET
#define MPG_ALWAYS_INLINE inline
#define MPG_UNROLL
#endif

namespace mpg::detail {

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + F16C (fp16 conversions)
  bool avx512 = false;       // AVX-512 F + BW + VL (masked 16-bit loads and stores)
  bool avx512_bf16 = false;  // and AVX512_BF16 (VCVTNE2PS2BF16), AVX512DQ (VFPCLASSPS)
  // AMD family 19h with AVX-512, i.e. Zen 4 (Zen 3, the family's other core, has none): its
  // gathers want a shorter in-row prefetch, into L2 (kernel_avx512_vec.hpp's prefetch_bytes and
  // prefetch_to_l2).
  bool amd_zen4 = false;
};

// The display family of a CPUID leaf 1 EAX signature: the base family, plus the extended family
// when the base family is 0xF (AMD 17h is Zen 1-2, 19h Zen 3-4, 1Ah Zen 5; Intel's cores are 6).
constexpr unsigned cpu_family(unsigned leaf1_eax) {
  const unsigned base = (leaf1_eax >> 8) & 0xFu;
  return base == 0xFu ? base + ((leaf1_eax >> 20) & 0xFFu) : base;
}

inline CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if MPG_HAVE_X86_KERNELS
  __builtin_cpu_init();
  // F16C through CPUID leaf 1: clang 14's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  f.avx2 = __builtin_cpu_supports("avx2") && f16c;
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  // AVX512_BF16 is CPUID leaf 7 subleaf 1, EAX bit 5 (the OS's zmm state is checked above).
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512dq") &&
                  __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)) != 0;
  if (f.avx512 && __get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    const bool amd =
        ebx == 0x68747541u && edx == 0x69746E65u && ecx == 0x444D4163u;  // AuthenticAMD
    f.amd_zen4 = amd && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && cpu_family(eax) == 0x19u;
  }
#endif
  return f;
}

inline const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect_cpu_features();
  return features;
}

// Test hook, as Highway's SetSupportedTargetsForTest: the ISAs in this mask (bit
// 1 << int(isa)) are treated as absent from the CPU, so tests exercise kUnsupportedIsa and the
// run-time choice below the best ISA on any machine. Starts from $MPG_DISABLE_ISAS, a comma
// separated list of ISA names (e.g. "avx512" or "avx512,avx2"), read once. The portable set
// cannot be disabled.
inline uint32_t isa_mask_from_names(const char* names) {
  uint32_t mask = 0;
  while (names != nullptr && *names != '\0') {
    const char* end = names;
    while (*end != '\0' && *end != ',') ++end;
    for (int i = 0; i < 32; ++i) {
      const char* name = name_of(static_cast<Isa>(i));
      const auto len = static_cast<size_t>(end - names);
      if (std::strlen(name) == len && std::strncmp(name, names, len) == 0) mask |= 1u << i;
    }
    names = *end == ',' ? end + 1 : end;
  }
  return mask;
}
inline std::atomic<uint32_t>& disabled_isa_mask() {
  static std::atomic<uint32_t> mask{isa_mask_from_names(std::getenv("MPG_DISABLE_ISAS"))};
  return mask;
}
// Masking avx512 masks avx512_bf16 too: that set runs the AVX-512 one's kernels for fp32 and
// fp16, and "no AVX-512" has to mean none of it.
inline bool isa_disabled(Isa isa) {
  const uint32_t mask = disabled_isa_mask().load(std::memory_order_relaxed);
  if (isa == Isa::kAvx512Bf16 && isa_disabled(Isa::kAvx512)) return true;
  return isa != Isa::kPortable && (mask >> static_cast<int>(isa) & 1u) != 0;
}
// Sets the mask (tests only; not thread-safe against concurrent calls that pick an ISA).
inline void set_disabled_isas_for_test(uint32_t mask) {
  disabled_isa_mask().store(mask, std::memory_order_relaxed);
}
inline constexpr uint32_t isa_bit(Isa isa) {
  return 1u << static_cast<int>(isa);
}

}  // namespace mpg::detail
