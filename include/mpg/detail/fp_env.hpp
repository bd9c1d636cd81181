#pragma once
#include "mpg/detail/guard.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace mpg::detail {

// SPEC section 3 forbids flush-to-zero and denormals-are-zero. A caller built with -ffast-math
// (or a framework that sets MXCSR) may have them on, so every thread that computes runs with
// the IEEE default (round to nearest even, no FTZ/DAZ) and restores the caller's state after.
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
#else
  // Elsewhere the default environment is assumed; user-provided so const objects are allowed.
  ScopedIeeeFpEnv() {}
#endif
 public:
  ScopedIeeeFpEnv(const ScopedIeeeFpEnv&) = delete;
  ScopedIeeeFpEnv& operator=(const ScopedIeeeFpEnv&) = delete;
};

}  // namespace mpg::detail
