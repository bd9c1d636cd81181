#pragma once
#include "mpg/detail/guard.hpp"

#include "mpg/options.hpp"

// The x86 kernels are compiled with per-function target attributes, so they exist in every
// x86-64 GCC/Clang build, whatever -march says; the CPU is asked at run time which may run.
// MPG_PORTABLE_ONLY (CMake option of the same name) compiles no SIMD kernel set at all: only
// the portable one exists, on every CPU.
#if !defined(MPG_PORTABLE_ONLY) && (defined(__x86_64__) || defined(_M_X64)) && \
    (defined(__GNUC__) || defined(__clang__))
#define MPG_HAVE_X86_KERNELS 1
#include <cpuid.h>
// Function attributes that let one translation unit hold code for several ISAs. Everything the
// intrinsics are inlined into must carry the same attribute (lambdas do not inherit it).
#define MPG_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#define MPG_TARGET_AVX512 __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512vl")))
// Fully unrolls a loop over an array of vector accumulators so that they live in registers:
// GCC at -O2 leaves such a loop rolled and keeps the array on the stack.
#define MPG_UNROLL _Pragma("GCC unroll 16")
#else
#define MPG_HAVE_X86_KERNELS 0
#endif

namespace mpg::detail {

struct CpuFeatures {
  bool avx2 = false;    // AVX2 + F16C (fp16 conversions)
  bool avx512 = false;  // AVX-512 F + BW + VL (masked 16-bit loads and stores)
};

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
#endif
  return f;
}

inline const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect_cpu_features();
  return features;
}

inline bool cpu_supports(Isa isa) {
  switch (isa) {
    case Isa::kAuto:
    case Isa::kPortable: return true;
    case Isa::kAvx2: return cpu_features().avx2;
    case Isa::kAvx512: return cpu_features().avx512;
  }
  return false;
}

// The best kernel set this CPU runs.
inline Isa best_isa() {
  if (cpu_supports(Isa::kAvx512)) return Isa::kAvx512;
  if (cpu_supports(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kPortable;
}

}  // namespace mpg::detail
