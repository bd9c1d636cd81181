// The yardstick's chunk loop (bench/bandwidth.hpp), written once over the 64-byte line
// operations of one ISA: Acc, zero(), add_line(), lanes_sum(), stream_line() and fence(),
// defined in namespace mpg::bench::detail::MPG_BENCH_YARDSTICK_NAMESPACE before this file is
// included there. Deliberately NO include guard: bandwidth.hpp includes it once per ISA, inside
// that ISA's target region, so that the whole loop is compiled for the ISA with its line
// operations inlined. (Calling per-ISA functions from portable code costs a call and an
// accumulator reduction per read step; with interleaved writes that is one per 0.5-4 KiB, and
// it slowed the plain -O2 yardstick by up to 20% on write-heavy rows.)

#ifndef MPG_BENCH_YARDSTICK_NAMESPACE
#error "yardstick_body.hpp is included by bandwidth.hpp"
#endif

namespace mpg::bench::detail::MPG_BENCH_YARDSTICK_NAMESPACE {

// kReadStep bytes from q, line j into acc[j].
template <bool kPrefetch>
MPG_ALWAYS_INLINE void read_step(Acc* acc, const unsigned char* q) {
  prefetch_step<kPrefetch>(q);
  MPG_UNROLL
  for (int j = 0; j < 8; ++j) acc[j] = add_line(acc[j], q + j * kLine);
}

// One chunk: reads n bytes (a multiple of kReadStep) from `in` as `streams` equal sequential
// streams in lockstep, kReadStep bytes of each in turn (one stream keeps too few misses in
// flight on some cores: on an AMD EPYC of earlier runs, 4-8 streams read 20-45% faster than
// one), then the few steps left over as one stream; writes w bytes (a multiple of kLine) to
// `out` after the reads or, kInterleave, in proportion between read rounds.
template <bool kPrefetch, bool kInterleave>
uint64_t move_lines(const unsigned char* in, int64_t n, int streams, unsigned char* out,
                    int64_t w) {
  Acc acc[8];
  MPG_UNROLL
  for (Acc& a : acc) a = zero();
  const int64_t rounds = n / (streams * kReadStep);
  const int64_t stride = rounds * kReadStep;
  int64_t written = 0;
  for (int64_t r = 0; r < rounds; ++r) {
    for (int s = 0; s < streams; ++s) read_step<kPrefetch>(acc, in + s * stride + r * kReadStep);
    if constexpr (kInterleave) {  // the share of the writes that goes with the reads so far
      const int64_t due = w * (r + 1) / rounds / kLine * kLine;
      for (; written < due; written += kLine) stream_line(out + written);
    }
  }
  for (int64_t i = stride * streams; i < n; i += kReadStep) read_step<kPrefetch>(acc, in + i);
  for (; written < w; written += kLine) stream_line(out + written);
  fence();
  uint64_t sum = 0;
  for (const Acc& a : acc) sum += lanes_sum(a);
  return sum;
}

inline uint64_t move_chunk(const Plan& plan, const unsigned char* in, int64_t n, unsigned char* out,
                           int64_t w) {
  if (plan.prefetch) {
    return plan.interleave ? move_lines<true, true>(in, n, plan.streams, out, w)
                           : move_lines<true, false>(in, n, plan.streams, out, w);
  }
  return plan.interleave ? move_lines<false, true>(in, n, plan.streams, out, w)
                         : move_lines<false, false>(in, n, plan.streams, out, w);
}

// Not the yardstick: the bare gather of bench_bandwidth's BM_Gather rows. Tokens
// [token_begin, token_end), each gathering its kept[t] rows (rows[t * topk + j], row_bytes
// long, a multiple of kGatherStepBytes) in steps of kGatherStepBytes across the rows, with a
// prefetch kGatherPrefetchBytes ahead in each row, and streaming the step's lines to its out
// row: the access pattern of permute_grad's walk, without conversions or arithmetic.
inline uint64_t gather_lines(const unsigned char* const* rows, const int32_t* kept, int64_t topk,
                             int64_t row_bytes, int64_t token_begin, int64_t token_end,
                             unsigned char* out) {
  constexpr int kLines = static_cast<int>(kGatherStepBytes / kLine);
  Acc acc[kLines];
  MPG_UNROLL
  for (Acc& a : acc) a = zero();
  for (int64_t t = token_begin; t < token_end; ++t) {
    const unsigned char* const* token_rows = rows + t * topk;
    unsigned char* out_row = out + t * row_bytes;
    for (int64_t c = 0; c < row_bytes; c += kGatherStepBytes) {
      for (int32_t j = 0; j < kept[t]; ++j) {
        const unsigned char* q = token_rows[j] + c;
        MPG_UNROLL
        for (int l = 0; l < kLines; ++l) __builtin_prefetch(q + kGatherPrefetchBytes + l * kLine);
        MPG_UNROLL
        for (int l = 0; l < kLines; ++l) acc[l] = add_line(acc[l], q + l * kLine);
      }
      MPG_UNROLL
      for (int j = 0; j < kLines; ++j) stream_line(out_row + c + j * kLine);
    }
  }
  fence();
  uint64_t sum = 0;
  for (const Acc& a : acc) sum += lanes_sum(a);
  return sum;
}

}  // namespace mpg::bench::detail::MPG_BENCH_YARDSTICK_NAMESPACE
