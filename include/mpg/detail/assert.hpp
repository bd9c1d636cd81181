#pragma once
#include "mpg/detail/guard.hpp"

#include <cstdio>
#include <cstdlib>

// Internal invariants only; caller errors are Status values. MPG_ASSERT is always on (cheap,
// off the hot path); MPG_DASSERT only in debug builds (inside kernels).
#define MPG_ASSERT(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "mpg internal error: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

#ifdef NDEBUG
#define MPG_DASSERT(cond) \
  do {                    \
  } while (0)
#else
#define MPG_DASSERT(cond) MPG_ASSERT(cond)
#endif
