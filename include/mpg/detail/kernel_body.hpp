// The walk over tokens and the microkernel, written once over a vector-traits type `Vec`.
// Deliberately NO include guard: each kernel set's file (kernel_avx512.hpp, kernel_avx2.hpp,
// kernel_portable.hpp, ...) includes it once, inside its own namespace MPG_KERNEL_NAMESPACE and
// its own target region (MPG_BEGIN_TARGET), so every function here is compiled for that ISA and
// the traits' intrinsics inline into it (a template defined outside the region could not inline
// them: GCC and clang refuse target-specific always_inline callees). Highway does the same.
// Everything this file needs is included by gather_sum.hpp before the region opens.
//
// Vec provides (F = the fp32 vector type, kLanes lanes, kBlockVectors accumulators per block):
//   zero(), set1(float), add(F, F), mul(F, F) (rounded product the compiler cannot contract),
//   load<T>(p), load_partial<T>(p, n), store<T>(p, v), store_partial<T>(p, v, n),
//   stream_line<T>(p, const F* v) (one 64-byte aligned line, non-temporal), stream_bytes(dst,
//   src, n) (n raw bytes, as non-temporal as the ISA allows: a streamed row's partial lines),
//   prefetch(p) (into L1), prefetch_l2(p) (into L2 only), fence(),
//   prefetch_bytes(), the in-row prefetch distance of the K-row walk on this CPU (kPrefetchBytes
//   where it does not depend on the CPU), and kCopyPrefetchBytes, that of MoeTokenUnpermuteGrad,
//   which reads one row at a time; prefetch_to_l2(), whether both fill L2 only on this CPU;
//   pair_add(a, b): the sums of adjacent lanes of the 2 * kLanes values a then b, in order,
//   [a0+a1, a2+a3, .., b0+b1, ..] (with one lane: a0+b0), for MoeTokenUnpermuteGrad's tree;
//   optionally, with kHasPairLevels2 = true, pair_levels2(const F* v) and pair_level3(F, F): a
//   cheaper pair_add tree of three levels over 8 vectors in two halves (see
//   kernel_unpermute_grad_body.hpp's pair_levels2); with kTakesNarrowing = true,
//   stream_line<T, Narrowing>(p, v): the narrowing of lines whose values the caller knows more
//   of (see Narrowing and kernel_unpermute_grad_body.hpp's stream_line_of), and with
//   kOrdinaryIsCheaper = true also abs_range(p, vectors), the range of |v| (AbsRange); with
//   kHasFma = true, fmadd(a, b, acc): acc + a * b rounded once (see sum_group).
// load_partial/store_partial touch only the n < kLanes elements at p.

#ifndef MPG_KERNEL_NAMESPACE
#error "kernel_body.hpp is included by a kernel set's file, with MPG_KERNEL_NAMESPACE defined"
#endif

namespace mpg::detail::MPG_KERNEL_NAMESPACE {

inline constexpr int64_t kLineBytes = 64;

// How many of the n elements at p lie before p's first 64-byte line boundary (0 when p is on
// one): a streamed row's head, stored apart from its whole lines.
template <class T>
MPG_ALWAYS_INLINE int64_t elements_before_line(const T* p, int64_t n) {
  const auto misalignment = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % kLineBytes);
  return std::min(n, (kLineBytes - misalignment) % kLineBytes / int64_t{sizeof(T)});
}

// One term of the sum: kVectors vectors (or, in the tail, one vector of n < kLanes) of a row,
// widened to fp32 and, when weighted, multiplied by the copy's weight (product rounded to fp32).
template <class T, bool kPartial, bool kWeighted>
MPG_ALWAYS_INLINE typename Vec::F load_term(const T* p, float w, int64_t n) {
  typename Vec::F x;
  if constexpr (kPartial) {
    x = Vec::template load_partial<T>(p, n);
  } else {
    (void)n;
    x = Vec::template load<T>(p);
  }
  if constexpr (kWeighted) {
    x = Vec::mul(x, Vec::set1(w));
  } else {
    (void)w;
  }
  return x;
}

// One line prefetched, into L2 only where the CPU wants it (Vec::prefetch_to_l2()).
MPG_ALWAYS_INLINE void prefetch_line(const void* p, bool to_l2) {
  if (to_l2) {
    Vec::prefetch_l2(p);
  } else {
    Vec::prefetch(p);
  }
}

// Prefetches the kBlockBytes of a row that lie prefetch.bytes past row (0 = none), one per line.
// The hardware prefetcher loses every row start (rows are gathered, not consecutive). The distance
// deliberately runs past the end of a row: in an expert-sorted G the next row in memory is the same
// expert's next token, read soon after (see the traits files for the measured distances; one may
// depend on the CPU, so it is a run-time value).
template <int64_t kBlockBytes>
MPG_ALWAYS_INLINE void prefetch_ahead(const void* row, InRowPrefetch prefetch) {
  if constexpr (kBlockBytes >= kLineBytes) {
    if (prefetch.bytes > 0) {
      const char* ahead = static_cast<const char*>(row) + prefetch.bytes;
      MPG_UNROLL
      for (int64_t b = 0; b < kBlockBytes; b += kLineBytes) {
        prefetch_line(ahead + b, prefetch.to_l2);
      }
    }
  } else {
    (void)row;
    (void)prefetch;
  }
}

template <class V, class = void>
struct HasFma : std::false_type {};
template <class V>
struct HasFma<V, std::void_t<decltype(V::kHasFma)>> : std::bool_constant<V::kHasFma> {};
template <class V = Vec>  // a template, so that a set without fmadd never compiles the call
MPG_ALWAYS_INLINE typename V::F fmadd(typename V::F a, typename V::F b, typename V::F acc) {
  return V::fmadd(a, b, acc);
}

// Sums group g of the token's plan (one sequential sum, the contract's assign-first / +0.0 rule)
// over columns [h0, h0 + kVectors * kLanes) into acc. This is the only place that rule exists.
// kFused (weighted, plan.products_exact(), a set with fmadd): the terms after the first are
// added with one fused multiply-add each, the same bits as a rounded product then an add, since
// the product is exact (product_is_exact). It saves a multiply per vector and copy.
template <class T, int kVectors, bool kPartial, bool kWeighted, bool kFused = false>
MPG_ALWAYS_INLINE void sum_group(const TokenPlan<T>& plan, int64_t g, int64_t h0, int64_t n,
                                 InRowPrefetch prefetch, typename Vec::F* acc) {
  constexpr int64_t kLanes = Vec::kLanes;
  constexpr int64_t kBlockBytes = kVectors * kLanes * static_cast<int64_t>(sizeof(T));
  const T* const* rows = plan.rows();
  const float* weights = plan.weights();
  int64_t k = plan.group_begin(g);
  const int64_t end = plan.group_end(g);
  if (plan.assigns(g)) {
    const T* row = rows[k] + h0;
    MPG_UNROLL
    for (int v = 0; v < kVectors; ++v) {
      acc[v] = load_term<T, kPartial, kWeighted>(row + v * kLanes, weights[k], n);
    }
    if constexpr (!kPartial) prefetch_ahead<kBlockBytes>(row, prefetch);
    ++k;
  } else {
    MPG_UNROLL
    for (int v = 0; v < kVectors; ++v) acc[v] = Vec::zero();
  }
  for (; k < end; ++k) {
    const T* row = rows[k] + h0;
    if constexpr (kFused) {
      static_assert(kWeighted && !kPartial, "fused terms are whole vectors of weighted copies");
      const typename Vec::F w = Vec::set1(weights[k]);
      MPG_UNROLL
      for (int v = 0; v < kVectors; ++v) {
        acc[v] = fmadd(Vec::template load<T>(row + v * kLanes), w, acc[v]);
      }
    } else {
      MPG_UNROLL
      for (int v = 0; v < kVectors; ++v) {
        acc[v] =
            Vec::add(acc[v], load_term<T, kPartial, kWeighted>(row + v * kLanes, weights[k], n));
      }
    }
    if constexpr (!kPartial) prefetch_ahead<kBlockBytes>(row, prefetch);
  }
}

// Bins [kFirst, kFirst + kCount) of the plan combined as a perfect binary tree, left + right,
// with the bin count known at compile time: the pending left subtrees stay in registers (at most
// log2(kCount) + 1 blocks live, 24 vectors for 4 bins of 8).
template <class T, int kVectors, bool kPartial, bool kWeighted, int64_t kFirst, int64_t kCount>
MPG_ALWAYS_INLINE void sum_bin_tree(const TokenPlan<T>& plan, int64_t h0, int64_t n,
                                    InRowPrefetch prefetch, typename Vec::F* acc) {
  if constexpr (kCount == 1) {
    sum_group<T, kVectors, kPartial, kWeighted>(plan, kFirst, h0, n, prefetch, acc);
  } else {
    sum_bin_tree<T, kVectors, kPartial, kWeighted, kFirst, kCount / 2>(plan, h0, n, prefetch, acc);
    typename Vec::F right[kVectors];
    sum_bin_tree<T, kVectors, kPartial, kWeighted, kFirst + kCount / 2, kCount / 2>(
        plan, h0, n, prefetch, right);
    MPG_UNROLL
    for (int v = 0; v < kVectors; ++v) acc[v] = Vec::add(acc[v], right[v]);
  }
}

// The microkernel: columns [h0, h0 + kVectors * kLanes) of one out row, in fp32, in the order O.
// Binary bins: the bins are summed one after another and combined as a perfect binary tree
// (bin[i] = bin[i] + bin[i + s] for s = 1, 2, 4, ...) evaluated depth-first, always left +
// right. Up to 4 bins (top-k < 16) the tree is unrolled with its subtrees in registers; beyond,
// a small stack in L1 holds them: after bin b, as many merges as b has trailing one bits. The
// stack alone cost Zen 5 12-19% in cache (16 x 8 x 4096 bf16) and 0.76-0.79 against 0.90-1.04
// of the yardstick on the DRAM rows of bench_init_routing_v2_grad (K = 8, 1 thread, 2026-12-06,
// 3 interleaved rounds).
template <class T, Order O, int kVectors, bool kPartial, bool kWeighted, bool kFused = false>
MPG_ALWAYS_INLINE void sum_block(const TokenPlan<T>& plan, int64_t h0, int64_t n,
                                 InRowPrefetch prefetch, typename Vec::F* acc) {
  static_assert(!kFused || O == Order::kSequential, "weighted sums are sequential");
  if constexpr (O == Order::kSequential) {
    sum_group<T, kVectors, kPartial, kWeighted, kFused>(plan, 0, h0, n, prefetch, acc);
  } else if (plan.num_groups() == 4) {
    sum_bin_tree<T, kVectors, kPartial, kWeighted, 0, 4>(plan, h0, n, prefetch, acc);
  } else if (plan.num_groups() == 2) {
    sum_bin_tree<T, kVectors, kPartial, kWeighted, 0, 2>(plan, h0, n, prefetch, acc);
  } else if (plan.num_groups() == 1) {
    sum_bin_tree<T, kVectors, kPartial, kWeighted, 0, 1>(plan, h0, n, prefetch, acc);
  } else {
    typename Vec::F stack[7][kVectors];  // log2(kMaxBins) + 1 pending subtrees
    int depth = 0;
    const int64_t bins = plan.num_groups();
    int64_t b = 0;
    do {  // bins >= 1 (binary_bins_count): acc is always written, as GCC can then see
      sum_group<T, kVectors, kPartial, kWeighted>(plan, b, h0, n, prefetch, acc);
      for (int64_t m = b; (m & 1) != 0; m >>= 1) {
        --depth;
        MPG_UNROLL
        for (int v = 0; v < kVectors; ++v) acc[v] = Vec::add(stack[depth][v], acc[v]);
      }
      if (b + 1 < bins) {
        MPG_UNROLL
        for (int v = 0; v < kVectors; ++v) stack[depth][v] = acc[v];
        ++depth;
      }
    } while (++b < bins);
  }
}

// The walk: out rows [token_begin, token_end). Per token the plan is gathered once, then the
// row is produced in blocks of kBlockVectors vectors, then single vectors, then one partial
// vector. With streaming stores, a row's blocks start at its first line boundary, so that each
// one is whole lines, streamed; the columns before it are stored plainly like the tail (a
// misaligned row, e.g. of a std::vector whose data sits 16 bytes past a line, streams all but
// two lines; bench_permute_grad's rows are such, and there streaming them instead of storing
// them plainly took the 2-thread efficiency from 0.80-0.94 to 0.92-1.02, AVX2, 2 rounds).
// Streamed lines are fenced at the end: they are weakly ordered, and the caller or the thread
// pool's hand-back reads out next. The summation is per column, so where the blocks start
// changes no bit.
template <class T, class I, Mode M, Order O, bool kWeighted>
void gather_sum(const GatherSumArgs<T, I>& a, int64_t token_begin, int64_t token_end) {
  using F = typename Vec::F;
  constexpr int64_t kLanes = Vec::kLanes;
  constexpr int kBlockVectors = Vec::kBlockVectors;
  constexpr int64_t kBlockColumns = kBlockVectors * kLanes;
  constexpr int64_t kLineColumns = kLineBytes / static_cast<int64_t>(sizeof(T));
  constexpr int kVectorsPerLine = static_cast<int>(kLineColumns / kLanes);
  static_assert(kBlockColumns % kLineColumns == 0, "a block is whole cache lines of T");
  TokenPlan<T> plan(a.topk);
  const InRowPrefetch prefetch{Vec::prefetch_bytes(), Vec::prefetch_to_l2()};
  // Columns [h0, end) of the token's row in single vectors, then one partial vector.
  const auto plain_columns = [&](T* out, int64_t h0, int64_t end) {
    for (; h0 + kLanes <= end; h0 += kLanes) {
      F acc[1];
      sum_block<T, O, 1, false, kWeighted>(plan, h0, 0, prefetch, acc);
      Vec::template store<T>(out + h0, acc[0]);
    }
    if constexpr (kLanes > 1) {
      if (h0 < end) {
        F acc[1];
        sum_block<T, O, 1, true, kWeighted>(plan, h0, end - h0, prefetch, acc);
        Vec::template store_partial<T>(out + h0, acc[0], end - h0);
      }
    }
  };
  // The row's whole blocks from h0; returns where they end.
  const auto blocks = [&](T* out, int64_t h0, auto fused) {
    for (; h0 + kBlockColumns <= a.hidden; h0 += kBlockColumns) {
      F acc[kBlockVectors];
      sum_block<T, O, kBlockVectors, false, kWeighted, decltype(fused)::value>(plan, h0, 0,
                                                                               prefetch, acc);
      if (a.streaming_stores) {
        MPG_UNROLL
        for (int v = 0; v < kBlockVectors; v += kVectorsPerLine) {
          Vec::template stream_line<T>(out + h0 + v * kLanes, acc + v);
        }
      } else {
        MPG_UNROLL
        for (int v = 0; v < kBlockVectors; ++v)
          Vec::template store<T>(out + h0 + v * kLanes, acc[v]);
      }
    }
    return h0;
  };
  // fp32 tokens never have exact products (product_is_exact), and no op weights binary bins: no
  // fused blocks are compiled for them.
  constexpr bool kMayFuse =
      kWeighted && O == Order::kSequential && !std::is_same_v<T, float> && HasFma<Vec>::value;
  for (int64_t t = token_begin; t < token_end; ++t) {
    plan.template gather<M, O, kWeighted, kMayFuse>(a, t);
    T* out = a.out + t * a.out_stride;
    int64_t h0 = 0;
    if (a.streaming_stores) {
      h0 = elements_before_line(out, a.hidden);
      plain_columns(out, 0, h0);
    }
    if constexpr (kMayFuse) {
      h0 = plan.products_exact() ? blocks(out, h0, std::true_type{})
                                 : blocks(out, h0, std::false_type{});
    } else {
      h0 = blocks(out, h0, std::false_type{});
    }
    plain_columns(out, h0, a.hidden);
  }
  if (a.streaming_stores) Vec::fence();
}

// Whole arrays through the traits' conversions (n elements, any n): for the conversion tests.
template <class T>
void widen(const T* in, float* out, int64_t n) {
  constexpr int64_t kLanes = Vec::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    Vec::template store<float>(out + i, Vec::template load<T>(in + i));
  if constexpr (kLanes > 1) {
    if (i < n) {
      Vec::template store_partial<float>(out + i, Vec::template load_partial<T>(in + i, n - i),
                                         n - i);
    }
  }
}
template <class T>
void narrow(const float* in, T* out, int64_t n) {
  constexpr int64_t kLanes = Vec::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    Vec::template store<T>(out + i, Vec::template load<float>(in + i));
  if constexpr (kLanes > 1) {
    if (i < n) {
      Vec::template store_partial<T>(out + i, Vec::template load_partial<float>(in + i, n - i),
                                     n - i);
    }
  }
}

// One row of `bytes` raw bytes, bit for bit whatever the dtype (int8 included). Streamed: whole
// 64-byte lines with streaming stores (four per iteration), the bytes before the first
// line-aligned destination byte and after the last whole line through Vec::stream_bytes (no read
// for ownership of their lines where the ISA has word-sized streaming stores). The lines travel
// in fp32 vectors only as a carrier: load<float> and stream_line<float> are plain moves in the
// vector sets (no conversion, no NaN quieting). The portable set always copies with memcpy: it
// has no streaming store, and its one-float carrier would be a scalar float access to bytes of
// another type (an aliasing violation, and an x87 load would quiet signaling NaNs).
MPG_ALWAYS_INLINE void copy_row(uint8_t* dst, const uint8_t* src, int64_t bytes, bool stream) {
  if constexpr (Vec::kLanes > 1) {
    using F = typename Vec::F;
    constexpr int kVectorsPerLine =
        static_cast<int>(kLineBytes / static_cast<int64_t>(sizeof(float)) / Vec::kLanes);
    constexpr int64_t kLinesPerStep = 4;
    if (stream) {
      int64_t i = elements_before_line(dst, bytes);
      Vec::stream_bytes(dst, src, i);
      for (; i + kLinesPerStep * kLineBytes <= bytes; i += kLinesPerStep * kLineBytes) {
        F lines[kLinesPerStep * kVectorsPerLine];
        const auto* from = reinterpret_cast<const float*>(src + i);
        MPG_UNROLL
        for (int v = 0; v < kLinesPerStep * kVectorsPerLine; ++v) {
          lines[v] = Vec::template load<float>(from + v * Vec::kLanes);
        }
        MPG_UNROLL
        for (int64_t l = 0; l < kLinesPerStep; ++l) {
          Vec::template stream_line<float>(reinterpret_cast<float*>(dst + i + l * kLineBytes),
                                           lines + l * kVectorsPerLine);
        }
      }
      for (; i + kLineBytes <= bytes; i += kLineBytes) {
        F line[kVectorsPerLine];
        const auto* from = reinterpret_cast<const float*>(src + i);
        MPG_UNROLL
        for (int v = 0; v < kVectorsPerLine; ++v) {
          line[v] = Vec::template load<float>(from + v * Vec::kLanes);
        }
        Vec::template stream_line<float>(reinterpret_cast<float*>(dst + i), line);
      }
      Vec::stream_bytes(dst + i, src + i, bytes - i);
      return;
    }
  } else {
    (void)stream;
  }
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

// MoeTokenPermute's row copies for token rows [token_begin, token_end): each token row is read
// once, in order, and written to the ranks of its kept copies. Measured against copying in
// output order (rank by rank, reading each token row K times): token order is ~2x faster at
// bf16 4096 x 8 x 4096, as the scattered reads defeat the prefetcher and cost K times the read
// traffic once the tokens leave the cache. Streamed (outputs of kStreamingStoreBytes or more:
// they are not read back by this call, and caching them would evict the token rows still to be
// read), fenced at the end as streaming stores are weakly ordered. Measured at bf16 4096 x 8 x
// 4096 (1 thread): 64-byte streaming stores beat 16-byte ones by ~10% and plain stores by ~25%.
template <class E>
void copy_rows(const TokenPermuteArgs<E>& a, int64_t token_begin, int64_t token_end) {
  for (int64_t t = token_begin; t < token_end; ++t) {
    const uint8_t* src = a.tokens + t * a.tokens_stride;
    const int32_t* ranks = a.sorted_indices + t * a.topk;
    for (int64_t k = 0; k < a.topk; ++k) {
      const int64_t rank = ranks[k];
      if (rank < a.num_rows) {
        copy_row(a.permuted + rank * a.permuted_stride, src, a.row_bytes, a.streaming_stores);
      }
    }
  }
  if (a.streaming_stores) Vec::fence();
}

}  // namespace mpg::detail::MPG_KERNEL_NAMESPACE

#include "mpg/detail/kernel_unpermute_grad_body.hpp"

namespace mpg::detail::MPG_KERNEL_NAMESPACE {

// Whether set S compiles its own kernel for these element types. A Target with Delegate and
// kOwns<Ts...> owns only those types' kernels and takes the others' from Delegate (a set whose
// traits differ from Delegate's only for some types: avx512_bf16).
template <class S, class... Ts>
constexpr bool owns_kernel() {
  if constexpr (HasDelegate<S>::value) {
    return S::template kOwns<Ts...>;
  } else {
    return true;
  }
}

// This kernel set's entry points, for the table in kernel_table.hpp (S = Target: a template
// parameter, so that a Target without Delegate never has it looked up).
template <class S>
struct KernelEntries : S {
  using Traits = Vec;
  template <class T, class I, Mode M, Order O, bool kWeighted>
  static constexpr GatherSumKernel<T, I> kGatherSum = [] {
    if constexpr (owns_kernel<S, T>()) {
      return &gather_sum<T, I, M, O, kWeighted>;
    } else {
      return S::Delegate::template kGatherSum<T, I, M, O, kWeighted>;
    }
  }();
  template <class T>
  static constexpr void (*kWiden)(const T*, float*, int64_t) = [] {
    if constexpr (owns_kernel<S>()) {
      return &widen<T>;
    } else {
      return S::Delegate::template kWiden<T>;
    }
  }();
  template <class T>
  static constexpr void (*kNarrow)(const float*, T*, int64_t) = [] {
    if constexpr (owns_kernel<S, T>()) {
      return &narrow<T>;
    } else {
      return S::Delegate::template kNarrow<T>;
    }
  }();
  template <class T, class P, class I>
  static constexpr UnpermuteGradKernel<T, P, I> kUnpermuteGrad = [] {
    if constexpr (owns_kernel<S, T, P>()) {
      return &unpermute_grad<T, P, I>;
    } else {
      return S::Delegate::template kUnpermuteGrad<T, P, I>;
    }
  }();
  template <class E>
  static constexpr CopyRowsKernel<E> kCopyRows = [] {
    if constexpr (owns_kernel<S>()) {
      return &copy_rows<E>;
    } else {
      return S::Delegate::template kCopyRows<E>;
    }
  }();
};
struct Kernels : KernelEntries<Target> {};

}  // namespace mpg::detail::MPG_KERNEL_NAMESPACE
