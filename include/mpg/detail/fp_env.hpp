#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace mpg::detail {

// docs/contract.md section 3 forbids flush-to-zero and denormals-are-zero. A caller built with
// -ffast-math (or a framework that sets MXCSR or FPCR) may have them on, so every thread that
// computes runs with the IEEE default (round to nearest even, no flushing) and restores the
// caller's state after.
class ScopedIeeeFpEnv {
 public:
#if defined(__x86_64__) || defined(__i386__)
  static constexpr unsigned kDefaultCsr = 0x1F80;  // all exceptions masked, RNE, FTZ=DAZ=0
  ScopedIeeeFpEnv() : saved_(_mm_getcsr()) {
    if (saved_ != kDefaultCsr) _mm_setcsr(kDefaultCsr);
  }
  ~ScopedIeeeFpEnv() {
    if (saved_ != kDefaultCsr) _mm_setcsr(saved_);
  }

 private:
  unsigned saved_;
#elif defined(__aarch64__)
  // FPCR fields that must be 0: FIZ, AH, NEP (bits 0-2, FEAT_AFP: input flushing and
  // alternative NaN/flush handling), the trap enables IOE..IXE and IDE (8-12, 15), FZ16 (19),
  // RMode (22-23, 0 = round to nearest even), FZ (24), DN (25, would replace NaN payloads) and
  // AHP (26, Arm's alternative half precision, which has no inf or NaN). Bits a CPU lacks
  // read as 0 and ignore writes. Writing FPCR can stall the pipeline: done only when needed.
  static constexpr uint64_t kNonIeeeBits = 0x07u | (0x1Fu << 8) | (1u << 15) | (1u << 19) |
                                           (3u << 22) | (1u << 24) | (1u << 25) | (1u << 26);
  ScopedIeeeFpEnv() : saved_(read_fpcr()) {
    if ((saved_ & kNonIeeeBits) != 0) write_fpcr(saved_ & ~kNonIeeeBits);
  }
  ~ScopedIeeeFpEnv() {
    if ((saved_ & kNonIeeeBits) != 0) write_fpcr(saved_);
  }

 private:
  static uint64_t read_fpcr() {
    uint64_t value;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(value));
    return value;
  }
  // "memory": no load or store of the computation moves across the change of mode.
  static void write_fpcr(uint64_t value) {
    __asm__ __volatile__("msr fpcr, %0" : : "r"(value) : "memory");
  }
  uint64_t saved_;
#else
  // Elsewhere the default environment is assumed; user-provided so const objects are allowed.
  ScopedIeeeFpEnv() {}
#endif
 public:
  ScopedIeeeFpEnv(const ScopedIeeeFpEnv&) = delete;
  ScopedIeeeFpEnv& operator=(const ScopedIeeeFpEnv&) = delete;
};

}  // namespace mpg::detail
