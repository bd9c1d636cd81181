#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdio>
#include <cstdlib>

// Internal invariants only; caller errors are Status values. Always on: every use is off the
// hot path.
#define MPG_ASSERT(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "mpg internal error: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
