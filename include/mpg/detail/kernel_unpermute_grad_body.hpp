// The MoeTokenUnpermuteGrad kernel, written once over the vector traits `Vec` of a kernel set.
// Deliberately NO include guard: kernel_body.hpp includes it inside each kernel set's namespace
// and target region (see there why), and the set's Kernels row names its entry point.
// Everything it needs is included by gather_sum.hpp before the region opens.
//
// Per token: g widened to fp32 once (fp32 g read in place); per copy one pass that writes the dX
// row (g * p, narrowed) and the products x * g into an fp32 row in L1; then the reduction tree of
// docs/contract.md section 10 over that row. When the tree is pair levels only (H = 64, 512 or
// 4096), its first three levels are added in registers during that pass instead, and the token's
// kept copies, up to 8, make their passes together (unpermute_grad_copies_fused). Vec::mul is a
// rounded product, so nothing can be contracted into an FMA. The folds are element-wise adds (any
// lane width gives the same bits); the pair stage uses Vec::pair_add.

#ifndef MPG_KERNEL_NAMESPACE
#error "kernel_unpermute_grad_body.hpp is included by kernel_body.hpp"
#endif

namespace mpg::detail::MPG_KERNEL_NAMESPACE {

// dst[i] = dst[i] + src[i] for i < n: one fold of the tree.
MPG_ALWAYS_INLINE void tree_fold(float* dst, const float* src, int64_t n) {
  constexpr int64_t kLanes = Vec::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Vec::template store<float>(
        dst + i, Vec::add(Vec::template load<float>(dst + i), Vec::template load<float>(src + i)));
  }
  if constexpr (kLanes > 1) {
    if (i < n) {
      const auto sum = Vec::add(Vec::template load_partial<float>(dst + i, n - i),
                                Vec::template load_partial<float>(src + i, n - i));
      Vec::template store_partial<float>(dst + i, sum, n - i);
    }
  }
}

// e[i] = e[2i] + e[2i+1] for i < n_out, in place: each vector step loads e[2i .. 2i + 2W)
// before it stores e[i .. i + W), and later steps read only above 2(i + W).
MPG_ALWAYS_INLINE void tree_pairs(float* e, int64_t n_out) {
  constexpr int64_t kLanes = Vec::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n_out; i += kLanes) {
    const auto low = Vec::template load<float>(e + 2 * i);
    const auto high = Vec::template load<float>(e + 2 * i + kLanes);
    Vec::template store<float>(e + i, Vec::pair_add(low, high));
  }
  for (; i < n_out; ++i) e[i] = e[2 * i] + e[2 * i + 1];  // the last levels, below one vector
}

// The first three pair levels over 8 vectors (8 * kLanes consecutive values), in two halves:
// pair_levels2 of v[0..3] and of v[4..7], then pair_level3 of both, the kLanes level-3 sums in
// order. Through the set's own where it has cheaper ones (kHasPairLevels2); the halves' layout
// is the set's.
template <class V, class = void>
struct HasPairLevels2 : std::false_type {};
template <class V>
struct HasPairLevels2<V, std::void_t<decltype(V::kHasPairLevels2)>>
    : std::bool_constant<V::kHasPairLevels2> {};

template <class V = Vec>  // templates, so that the branch not taken is not compiled
MPG_ALWAYS_INLINE typename V::F pair_levels2(const typename V::F* v) {
  if constexpr (HasPairLevels2<V>::value) {
    return V::pair_levels2(v);
  } else {
    return V::pair_add(V::pair_add(v[0], v[1]), V::pair_add(v[2], v[3]));
  }
}
template <class V = Vec>
MPG_ALWAYS_INLINE typename V::F pair_level3(typename V::F low, typename V::F high) {
  if constexpr (HasPairLevels2<V>::value) {
    return V::pair_level3(low, high);
  } else {
    return V::pair_add(low, high);
  }
}

// A set with kTakesNarrowing = true takes stream_line<T, kKnown>, what the caller knows of the
// values (Narrowing): from kNoLowNan its bf16 rounding keeps the NaNs without its NaN fix-up
// (their carry out of the low half is at most 0x8000). The others take stream_line<T>. A set
// with kOrdinaryIsCheaper = true narrows Narrowing::kOrdinary lines for less, enough to pay for
// proving it once per step (Vec::abs_range).
template <class V, class = void>
struct TakesNarrowing : std::false_type {};
template <class V>
struct TakesNarrowing<V, std::void_t<decltype(V::kTakesNarrowing)>>
    : std::bool_constant<V::kTakesNarrowing> {};
template <class V, class = void>
struct OrdinaryIsCheaper : std::false_type {};
template <class V>
struct OrdinaryIsCheaper<V, std::void_t<decltype(V::kOrdinaryIsCheaper)>>
    : std::bool_constant<V::kOrdinaryIsCheaper> {};
template <class T, Narrowing kKnown, class V = Vec>
MPG_ALWAYS_INLINE void stream_line_of(T* p, const typename V::F* v) {
  if constexpr (kKnown != Narrowing::kAny && TakesNarrowing<V>::value) {
    V::template stream_line<T, kKnown>(p, v);
  } else {
    V::template stream_line<T>(p, v);
  }
}
template <class V = Vec>
MPG_ALWAYS_INLINE AbsRange abs_range_of(const float* p, int vectors) {
  if constexpr (OrdinaryIsCheaper<V>::value) {
    return V::abs_range(p, vectors);
  } else {
    (void)p, (void)vectors;
    return {};
  }
}

// Three pair levels in one pass, in registers: e[i] = the level-3 sum of e[8i .. 8i + 8) for
// i < n_out (a multiple of kLanes), in place as tree_pairs. Fewer passes over e, same adds.
MPG_ALWAYS_INLINE void tree_pairs3(float* e, int64_t n_out) {
  using F = typename Vec::F;
  constexpr int64_t kLanes = Vec::kLanes;
  for (int64_t i = 0; i < n_out; i += kLanes) {
    F v[8];
    MPG_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = Vec::template load<float>(e + 8 * i + j * kLanes);
    Vec::template store<float>(e + i, pair_level3(pair_levels2(v), pair_levels2(v + 4)));
  }
}

// The pair levels of the tree over the p values at e (p a power of two): e[0] at the end.
MPG_ALWAYS_INLINE float tree_pair_levels(float* e, int64_t p) {
  for (; p % (8 * Vec::kLanes) == 0; p /= 8) tree_pairs3(e, p / 8);
  for (; p > 1; p /= 2) tree_pairs(e, p / 2);
  return e[0];
}

// tree(e) over e[0, length); e holds tree_scratch_floats(length) floats and is clobbered.
MPG_ALWAYS_INLINE float tree_sum(float* e, int64_t length) {
  const TreeShape shape = tree_shape(length);
  if (length < 64) {
    std::fill(e + length, e + 64, 0.0f);
  } else {
    int64_t n = length;
    while (n > shape.threshold) {
      const int64_t half = tree_fold_half(n);
      tree_fold(e, e + half, n - half);
      n = half;
    }
    tree_fold(e, e + shape.pairs, n - shape.pairs);
  }
  return tree_pair_levels(e, shape.pairs);
}

// Whether a kept copy can take unpermute_grad_copies_fused: the tree is pair levels only
// (hidden is 64, 512 or 4096: no fold), the first three of them run in one pass of
// 8 * kLanes columns (tree_pair_levels starts with tree_pairs3), and such a step is whole
// 64-byte lines of dX.
template <class T>
inline constexpr bool kFusedSteps =
    Vec::kLanes > 1 && 8 * Vec::kLanes* int64_t{sizeof(T)} % kLineBytes == 0;
template <class T>
inline bool fusable_tree(int64_t hidden) {
  return kFusedSteps<T> && hidden == tree_shape(hidden).pairs && hidden % (8 * Vec::kLanes) == 0;
}

// One copy's dX row (g * p narrowed, or +0.0 when the copy is dropped) and its products x * g
// in e (a dropped copy's x is a +0.0 row: -0.0 where g < 0, NaN where g is inf or NaN, as the
// contract defines them). With kStream, the whole 64-byte lines of the dX row are written
// non-temporally: dX is as large as X and is not read back. X rows are gathered, so the hardware
// prefetcher misses their starts: the in-row prefetch runs Vec::kCopyPrefetchBytes ahead, past the
// row end (the next row in memory is the same expert's next token, read soon after), into L2
// only where to_l2 (Vec::prefetch_to_l2()).
template <class T, bool kKept, bool kStream>
MPG_ALWAYS_INLINE void unpermute_grad_copy(const T* x, const float* g32, float p, T* dx, float* e,
                                           int64_t hidden, bool to_l2) {
  using F = typename Vec::F;
  constexpr int64_t kLanes = Vec::kLanes;
  constexpr int64_t kLineColumns = kLineBytes / static_cast<int64_t>(sizeof(T));
  constexpr int kVectorsPerLine = static_cast<int>(kLineColumns / kLanes);
  const F pv = Vec::set1(p);
  // By value: the stores below may alias anything, so captured references would be reloaded.
  const auto column = [=](int64_t h, F* d, auto partial, int64_t n) {
    constexpr bool kPartial = decltype(partial)::value;
    const F gv = kPartial ? Vec::template load_partial<float>(g32 + h, n)
                          : Vec::template load<float>(g32 + h);
    F xv = Vec::zero();
    if constexpr (kKept) {
      xv = kPartial ? Vec::template load_partial<T>(x + h, n) : Vec::template load<T>(x + h);
      *d = Vec::mul(gv, pv);
    } else {
      *d = Vec::zero();
    }
    if constexpr (kPartial) {
      Vec::template store_partial<float>(e + h, Vec::mul(xv, gv), n);
    } else {
      Vec::template store<float>(e + h, Vec::mul(xv, gv));
    }
  };
  // Columns [h, end) in vectors, then one partial vector, with plain stores.
  const auto plain = [&](int64_t h, int64_t end) {
    for (; h + kLanes <= end; h += kLanes) {
      if constexpr (kKept) {
        if (h % kLineColumns == 0)
          prefetch_line(x + h + Vec::kCopyPrefetchBytes / int64_t{sizeof(T)}, to_l2);
      }
      F d;
      column(h, &d, std::false_type{}, 0);
      Vec::template store<T>(dx + h, d);
    }
    if constexpr (kLanes > 1) {
      if (h < end) {
        F d;
        column(h, &d, std::true_type{}, end - h);
        Vec::template store_partial<T>(dx + h, d, end - h);
      }
    }
  };
  if constexpr (!kStream) {
    plain(0, hidden);
  } else {
    // A misaligned row streams the lines it fully covers.
    int64_t h = elements_before_line(dx, hidden);
    plain(0, h);
    const int64_t line_end = h + (hidden - h) / kLineColumns * kLineColumns;
    for (; h < line_end; h += kLineColumns) {
      if constexpr (kKept) {
        prefetch_line(x + h + Vec::kCopyPrefetchBytes / int64_t{sizeof(T)}, to_l2);
      }
      F d[kVectorsPerLine];
      MPG_UNROLL
      for (int v = 0; v < kVectorsPerLine; ++v) column(h + v * kLanes, &d[v], std::false_type{}, 0);
      Vec::template stream_line<T>(dx + h, d);
    }
    plain(h, hidden);
  }
}

// dX columns [begin, end) of a copy, g * p narrowed, with plain stores.
template <class T>
MPG_ALWAYS_INLINE void store_scaled(T* dx, const float* g32, typename Vec::F pv, int64_t begin,
                                    int64_t end) {
  constexpr int64_t kLanes = Vec::kLanes;
  int64_t h = begin;
  for (; h + kLanes <= end; h += kLanes) {
    Vec::template store<T>(dx + h, Vec::mul(Vec::template load<float>(g32 + h), pv));
  }
  if constexpr (kLanes > 1) {
    if (h < end) {
      const auto d = Vec::mul(Vec::template load_partial<float>(g32 + h, end - h), pv);
      Vec::template store_partial<T>(dx + h, d, end - h);
    }
  }
}

// Copies per fused group: as many row streams as the gathers of permute_grad keep at K = 8, and
// their hidden / 8 level-3 sums each fill e's hidden floats.
inline constexpr int kFusedGroupCopies = MPG_FUSED_GROUP_COPIES_OR(8);
static_assert(kFusedGroupCopies >= 1 && kFusedGroupCopies <= 8,
              "a group's level-3 sums must fit in e's hidden floats");

// A kept copy of a fused group (unpermute_grad_copies_fused): its X row, its weight, its dX row
// and where its level-3 sums go.
template <class T>
struct FusedCopy {
  const T* x;
  float p;
  T* dx;
  float* e;
};

// g[t] as fp32 is g32. A g in T that still needs widening comes as widen.from, and the fused
// pass (below) widens it into widen.to (= g32) one step ahead of the step that reads it (a
// streamed line reaches up to a line past its step), its prefetch as far ahead as X's. Widened
// all at once before the pass, its row read cold from DRAM with no X load in flight, it took 12%
// of the bf16 op's time (rdtsc around the phases, 4096 x 8 x 4096, 1 thread).
template <class T>
struct WidenAhead {
  const T* from = nullptr;  // null: g32 is ready
  float* to = nullptr;
};

// Whether 4 vectors of T (half a step of the fused pass) are whole 64-byte lines.
template <class T>
inline constexpr bool kHalfStepIsLines = (4 * Vec::kLanes * int64_t{sizeof(T)}) % kLineBytes == 0;

// Kept copies when fusable_tree<T>(hidden): the same dX rows and the same trees as
// unpermute_grad_copy then tree_sum, but the first three pair levels are added in registers as
// the products come, so only hidden / 8 level-3 sums per copy go to its e and the products
// never make a round trip through L1. The copies advance together, one step of 8 * kLanes
// columns each in turn: one row at a time kept too few misses in flight (the hardware
// prefetcher restarts on every 4 KiB page of a gathered row, and software prefetches alone are
// held to the few line-fill buffers). With kStream, each dX row is written as
// unpermute_grad_copy writes it (plain up to its first line boundary, whole lines streamed, a
// plain tail), its lines computed apart from the products' vectors: g * p needs only g, so a
// misaligned row costs one more load of g per vector, not a second pass; with kLineAligned
// (every dX row starts on a line, and a half step is whole lines) the lines are the products'
// own g * p vectors, which saved that load and 0.04-0.05 of the bf16 op's efficiency
// (4096 x 8 x 4096, 1 and 2 threads, 2 rounds x 3, 2026-12-05). They are narrowed as kKnown
// allows (kNoLowNan: no g * p is a NaN with low bits), and as Narrowing::kOrdinary in the steps
// where products_ordinary proves it from |g|'s range and the weights' (where the set gains from
// it). Leaves each copy's level-3 sums in its e.
template <class T, bool kStream, Narrowing kKnown, bool kLineAligned>
MPG_ALWAYS_INLINE void unpermute_grad_copies_fused(const FusedCopy<T>* copies, int count,
                                                   const float* g32, WidenAhead<T> widen,
                                                   int64_t hidden, const WeightRange& weights,
                                                   bool to_l2) {
  using F = typename Vec::F;
  constexpr int64_t kLanes = Vec::kLanes;
  constexpr int64_t kStep = 8 * kLanes;
  constexpr int64_t kLineColumns = kLineBytes / static_cast<int64_t>(sizeof(T));
  constexpr int kVectorsPerLine = static_cast<int>(kLineColumns / kLanes);
  static_assert(kStep % kLineColumns == 0, "a step is whole lines of dX");
  static_assert(!kLineAligned || (kStream && kHalfStepIsLines<T>), "lines from the halves");
  // Ordinary products proven once per step for all the copies: a check per copy and step (two
  // copies of the copy's body in the loop) gained less (see kernel_avx512.hpp's notes).
  constexpr bool kProveOrdinary = kStream && kKnown == Narrowing::kNoLowNan &&
                                  std::is_same_v<T, bfloat16> && OrdinaryIsCheaper<Vec>::value;
  const auto widen_step = [widen, to_l2](int64_t h) {
    if constexpr (Vec::kCopyPrefetchBytes > 0) {
      MPG_UNROLL
      for (int64_t c = 0; c < kStep; c += kLineColumns) {
        prefetch_line(widen.from + h + c + Vec::kCopyPrefetchBytes / int64_t{sizeof(T)}, to_l2);
      }
    }
    MPG_UNROLL
    for (int v = 0; v < 8; ++v) {
      Vec::template store<float>(widen.to + h + v * kLanes,
                                 Vec::template load<T>(widen.from + h + v * kLanes));
    }
  };
  if (widen.from != nullptr) widen_step(0);
  // dX columns [head, tail) of each copy are streamed, set below for the group's copies only:
  // zero-initialized, the arrays took one aligned 64-byte store, which faulted under ASan's
  // use-after-return stack (its frames are 32-byte aligned).
  int64_t head[kFusedGroupCopies];
  int64_t tail[kFusedGroupCopies];
  if constexpr (kStream && !kLineAligned) {
    for (int i = 0; i < count; ++i) {
      head[i] = elements_before_line(copies[i].dx, hidden);
      tail[i] = head[i] + (hidden - head[i]) / kLineColumns * kLineColumns;
      store_scaled<T>(copies[i].dx, g32, Vec::set1(copies[i].p), 0, head[i]);
    }
  }
  // The copies' step at column h, its dX lines narrowed as kStepKnown.
  const auto step = [&](int64_t h, auto step_known) {
    constexpr Narrowing kStepKnown = decltype(step_known)::value;
    for (int i = 0; i < count; ++i) {
      const T* x = copies[i].x;
      T* dx = copies[i].dx;
      const F pv = Vec::set1(copies[i].p);
      if constexpr (Vec::kCopyPrefetchBytes > 0) {
        MPG_UNROLL
        for (int64_t c = 0; c < kStep; c += kLineColumns) {
          prefetch_line(x + h + c + Vec::kCopyPrefetchBytes / int64_t{sizeof(T)}, to_l2);
        }
      }
      F halves[2];  // in two halves of 4 vectors: fewer registers live at once
      MPG_UNROLL
      for (int half = 0; half < 2; ++half) {
        const int64_t h4 = h + half * 4 * kLanes;
        F products[4];
        F scaled[4];  // g * p, the dX values (kLineAligned)
        MPG_UNROLL
        for (int v = 0; v < 4; ++v) {
          const F gv = Vec::template load<float>(g32 + h4 + v * kLanes);
          products[v] = Vec::mul(Vec::template load<T>(x + h4 + v * kLanes), gv);
          if constexpr (!kStream) Vec::template store<T>(dx + h4 + v * kLanes, Vec::mul(gv, pv));
          if constexpr (kLineAligned) scaled[v] = Vec::mul(gv, pv);
        }
        if constexpr (kLineAligned) {
          MPG_UNROLL
          for (int v = 0; v < 4; v += kVectorsPerLine) {
            stream_line_of<T, kStepKnown>(dx + h4 + v * kLanes, scaled + v);
          }
        }
        halves[half] = pair_levels2(products);
      }
      Vec::template store<float>(copies[i].e + h / 8, pair_level3(halves[0], halves[1]));
      if constexpr (kStream && !kLineAligned) {
        // A fixed count, so that the compiler unrolls it in place (with a data-dependent bound
        // GCC 12 built a 16-way unrolled loop with a jump table per step: by callgrind 3.05
        // instead of 2.54 instructions per column per copy, bf16 on AVX2).
        MPG_UNROLL
        for (int64_t line = 0; line < kStep / kLineColumns; ++line) {
          const int64_t c = head[i] + h + line * kLineColumns;
          if (c + kLineColumns > tail[i]) continue;
          F d[kVectorsPerLine];
          MPG_UNROLL
          for (int v = 0; v < kVectorsPerLine; ++v) {
            d[v] = Vec::mul(Vec::template load<float>(g32 + c + v * kLanes), pv);
          }
          stream_line_of<T, kStepKnown>(dx + c, d);
        }
      }
    }
  };
  for (int64_t h = 0; h < hidden; h += kStep) {
    if (widen.from != nullptr && h + kStep < hidden) widen_step(h + kStep);
    if constexpr (kProveOrdinary) {
      // A misaligned row's lines of this step start up to a line past it (head[i]).
      const int proof_vectors = kLineAligned || h + kStep == hidden ? 8 : 8 + kVectorsPerLine;
      if (products_ordinary(abs_range_of(g32 + h, proof_vectors), weights)) {
        step(h, std::integral_constant<Narrowing, Narrowing::kOrdinary>{});
        continue;
      }
    }
    step(h, std::integral_constant<Narrowing, kKnown>{});
  }
  if constexpr (kStream && !kLineAligned) {
    for (int i = 0; i < count; ++i) {
      store_scaled<T>(copies[i].dx, g32, Vec::set1(copies[i].p), tail[i], hidden);
    }
  }
}

// The kept copies of a fused group: their dX rows, and their trees' values in tree_values.
template <class T>
MPG_ALWAYS_INLINE void unpermute_grad_group(const FusedCopy<T>* copies, int count, const float* g32,
                                            WidenAhead<T> widen, int64_t hidden, bool stream,
                                            bool to_l2, float* tree_values) {
  if constexpr (kFusedSteps<T>) {  // not compiled where no step is whole lines
    // bf16 g has zero low 16 bits, and so has any NaN g * p yields unless p is that NaN; other
    // dtypes or sets take Narrowing::kAny in both streamed branches (one instantiation).
    constexpr Narrowing kWithoutNanWeight =
        std::is_same_v<T, bfloat16> && TakesNarrowing<Vec>::value ? Narrowing::kNoLowNan
                                                                  : Narrowing::kAny;
    WeightRange weights;
    bool nan_weight = false;
    for (int i = 0; i < count; ++i) {
      include_weight(weights, copies[i].p);
      nan_weight = nan_weight || std::isnan(copies[i].p);
    }
    const auto line_aligned = [&] {
      for (int i = 0; i < count; ++i) {
        if (elements_before_line(copies[i].dx, hidden) != 0) return false;
      }
      return true;
    };
    const auto streamed = [&](auto line_aligned_tag) {
      constexpr bool kLineAligned = decltype(line_aligned_tag)::value;
      if (kWithoutNanWeight != Narrowing::kAny && !nan_weight) {
        unpermute_grad_copies_fused<T, true, kWithoutNanWeight, kLineAligned>(
            copies, count, g32, widen, hidden, weights, to_l2);
      } else {
        unpermute_grad_copies_fused<T, true, Narrowing::kAny, kLineAligned>(
            copies, count, g32, widen, hidden, weights, to_l2);
      }
    };
    if (!stream) {
      unpermute_grad_copies_fused<T, false, Narrowing::kAny, false>(copies, count, g32, widen,
                                                                    hidden, weights, to_l2);
    } else if (kHalfStepIsLines<T> && line_aligned()) {
      // true wherever this runs; where kHalfStepIsLines<T> is false, no aligned pass is compiled
      streamed(std::bool_constant<kHalfStepIsLines<T>>{});
    } else {
      streamed(std::false_type{});
    }
    for (int i = 0; i < count; ++i) tree_values[i] = tree_pair_levels(copies[i].e, hidden / 8);
  } else {
    (void)copies, (void)count, (void)g32, (void)widen, (void)hidden, (void)stream, (void)to_l2,
        (void)tree_values;
  }
}

// One copy not taken by a fused group: its dX row and its tree's value.
template <class T>
MPG_ALWAYS_INLINE float unpermute_grad_one_copy(const T* x, const float* g32, float p, T* dx,
                                                float* e, int64_t hidden, bool stream, bool to_l2) {
  if (x != nullptr && stream) {
    unpermute_grad_copy<T, true, true>(x, g32, p, dx, e, hidden, to_l2);
  } else if (x != nullptr) {
    unpermute_grad_copy<T, true, false>(x, g32, p, dx, e, hidden, to_l2);
  } else if (stream) {
    unpermute_grad_copy<T, false, true>(x, g32, p, dx, e, hidden, to_l2);
  } else {
    unpermute_grad_copy<T, false, false>(x, g32, p, dx, e, hidden, to_l2);
  }
  return tree_sum(e, hidden);
}

// Both outputs for tokens [token_begin, token_end).
template <class T, class P, class I>
void unpermute_grad(const UnpermuteGradArgs<T, P, I>& a, int64_t token_begin, int64_t token_end) {
  const int64_t hidden = a.hidden;
  if (hidden == 0) {  // no row to touch (data may be null); the tree of 64 x +0.0 is +0.0
    for (int64_t t = token_begin; a.probs != nullptr && t < token_end; ++t) {
      for (int64_t k = 0; k < a.topk; ++k) a.probs_grad[t * a.probs_grad_stride + k] = P(0.0f);
    }
    return;
  }
  if (a.probs == nullptr) {  // K = 1: dX[S[t]] = g[t] bit for bit, or +0.0 when dropped
    for (int64_t t = token_begin; t < token_end; ++t) {
      const T* g = a.tokens_grad + t * a.tokens_grad_stride;
      const int64_t row = a.indices[t];
      T* dx = a.permuted_grad + row * a.permuted_grad_stride;
      if (row < a.kept_rows) {
        std::copy(g, g + hidden, dx);
      } else {
        std::fill(dx, dx + hidden, T(0.0f));
      }
    }
    return;
  }
  constexpr int64_t kLanes = Vec::kLanes;
  constexpr bool kWiden = !std::is_same_v<T, float>;  // fp32 g is read in place
  std::vector<float> scratch(
      static_cast<size_t>(tree_scratch_floats(hidden) + (kWiden ? hidden : 0)));
  float* e = scratch.data();                         // one copy's products, then its tree
  float* widened = e + tree_scratch_floats(hidden);  // g[t] widened once, read by every copy
  // The head of a row the in-row prefetch does not reach (none without that prefetch).
  const int64_t head_bytes = std::min(Vec::kCopyPrefetchBytes, hidden * int64_t{sizeof(T)});
  const bool to_l2 = Vec::prefetch_to_l2();
  const auto prefetch_head = [&](const T* row) {
    const char* bytes = reinterpret_cast<const char*>(row);
    for (int64_t b = 0; b < head_bytes; b += kLineBytes) prefetch_line(bytes + b, to_l2);
  };
  const bool fused = fusable_tree<T>(hidden);
  for (int64_t t = token_begin; t < token_end; ++t) {
    const T* g = a.tokens_grad + t * a.tokens_grad_stride;
    const float* g32 = nullptr;
    WidenAhead<T> widen;  // g[t] not widened yet: the first fused group widens it as it goes
    if constexpr (kWiden) {
      g32 = widened;
      widen = {g, widened};
    } else {
      g32 = g;  // a copy of it cost 19% of the op's instructions at K = 2 (callgrind)
    }
    const auto widen_all = [&] {
      if (widen.from == nullptr) return;
      int64_t h = 0;
      for (; h + kLanes <= hidden; h += kLanes) {
        Vec::template store<float>(widened + h, Vec::template load<T>(g + h));
      }
      if constexpr (kLanes > 1) {
        if (h < hidden) {
          Vec::template store_partial<float>(
              widened + h, Vec::template load_partial<T>(g + h, hidden - h), hidden - h);
        }
      }
      widen = {};
    };
    const I* s = a.indices + t * a.topk;
    for (int64_t k = 0; k < a.topk;) {
      if (fused && s[k] < a.kept_rows) {
        // The kept copies from k on, up to kFusedGroupCopies, advance together; their level-3
        // sums share e (hidden / 8 floats each).
        FusedCopy<T> group[kFusedGroupCopies];
        float tree_values[kFusedGroupCopies];
        int count = 0;
        for (; k < a.topk && count < kFusedGroupCopies && s[k] < a.kept_rows; ++k, ++count) {
          group[count] = {a.tokens + s[k] * a.tokens_stride,
                          static_cast<float>(a.probs[t * a.probs_stride + k]),
                          a.permuted_grad + s[k] * a.permuted_grad_stride,
                          e + count * (hidden / 8)};
        }
        // The in-step prefetch covers all but the rows' heads: start those together.
        for (int i = 0; i < count; ++i) prefetch_head(group[i].x);
        unpermute_grad_group<T>(group, count, g32, widen, hidden, a.streaming_stores, to_l2,
                                tree_values);
        widen = {};
        for (int i = 0; i < count; ++i) {
          a.probs_grad[t * a.probs_grad_stride + k - count + i] =
              static_cast<P>(0.0f + tree_values[i]);
        }
        continue;
      }
      const int64_t row = s[k];
      const float p = static_cast<float>(a.probs[t * a.probs_stride + k]);
      T* dx = a.permuted_grad + row * a.permuted_grad_stride;
      // The in-row prefetch covers all but the head of the next copy's X row: fetch that now,
      // ahead of this copy's pass and tree.
      const int64_t next = t * a.topk + k + 1;
      if (next < token_end * a.topk && a.indices[next] < a.kept_rows) {
        prefetch_head(a.tokens + a.indices[next] * a.tokens_stride);
      }
      const T* x = row < a.kept_rows ? a.tokens + row * a.tokens_stride : nullptr;
      widen_all();
      const float tree =
          unpermute_grad_one_copy<T>(x, g32, p, dx, e, hidden, a.streaming_stores, to_l2);
      a.probs_grad[t * a.probs_grad_stride + k] = static_cast<P>(0.0f + tree);
      ++k;
    }
  }
  if (a.streaming_stores) Vec::fence();  // streamed dX lines are weakly ordered
}

}  // namespace mpg::detail::MPG_KERNEL_NAMESPACE
