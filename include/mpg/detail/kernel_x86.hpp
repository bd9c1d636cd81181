#pragma once
#include "mpg/detail/guard.hpp"

#include "mpg/detail/cpu.hpp"

#if MPG_HAVE_X86_KERNELS
#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "mpg/detail/kernel_args.hpp"
#include "mpg/detail/mode.hpp"

// What the AVX2 and AVX-512 kernels share: the walk over tokens and the prefetch of the next
// token's rows. Only baseline x86-64 instructions here, so these inline into either ISA's
// target-attribute functions.
namespace mpg::detail::x86 {

inline constexpr int kLineBytes = 64;

// The same `bytes` of columns of the next token's rows, from column h0: one token ahead is far
// enough to hide DRAM latency and near enough to still be in cache when used.
template <class T>
static inline void prefetch_next(const KeptRows<T>& next, int64_t h0, int bytes) {
  for (int64_t r = 0; r < next.count(); ++r) {
    const char* g = reinterpret_cast<const char*>(next.rows()[r] + h0);
    MPG_UNROLL
    for (int b = 0; b < bytes; b += kLineBytes) _mm_prefetch(g + b, _MM_HINT_T0);
  }
}

template <class T>
using SumBlock = void (*)(const KeptRows<T>& kept, const KeptRows<T>& next, int64_t h0, T* out,
                          bool streaming);
template <class T>
using SumTail = void (*)(const KeptRows<T>& kept, int64_t h0, int64_t hidden, T* out);

// Out rows [token_begin, token_end): full blocks of kBlockColumns through Block, the rest
// through Tail. The kept rows of token t+1 are gathered while t is summed, for the prefetch.
// Always inlined, so Block and Tail inline into the calling ISA's target-attribute function.
template <class T, class I, Mode M, int64_t kBlockColumns, SumBlock<T> Block, SumTail<T> Tail>
__attribute__((always_inline)) inline void for_each_token(const GatherSumArgs<T, I>& a,
                                                          int64_t token_begin, int64_t token_end) {
  KeptRows<T> rows_a(a.topk);
  KeptRows<T> rows_b(a.topk);
  KeptRows<T>* kept = &rows_a;
  KeptRows<T>* next = &rows_b;
  if (token_begin < token_end) kept->template gather<M>(a, token_begin);
  const int64_t full_end = a.hidden - a.hidden % kBlockColumns;
  for (int64_t t = token_begin; t < token_end; ++t) {
    if (t + 1 < token_end) {
      next->template gather<M>(a, t + 1);
    } else {
      next->clear();
    }
    T* out = a.out + t * a.out_stride;
    for (int64_t h0 = 0; h0 < full_end; h0 += kBlockColumns) {
      Block(*kept, *next, h0, out, a.streaming_stores);
    }
    Tail(*kept, full_end, a.hidden, out);
    std::swap(kept, next);
  }
  // Streaming stores are weakly ordered: make them visible before the caller (or the thread
  // pool's hand-back) reads out.
  if (a.streaming_stores) _mm_sfence();
}

}  // namespace mpg::detail::x86

#endif  // MPG_HAVE_X86_KERNELS
