#pragma once
#include "mpg/detail/guard.hpp"

#include "mpg/detail/cpu.hpp"

#if MPG_HAVE_X86_KERNELS
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "mpg/detail/gather_sum.hpp"
#include "mpg/detail/stream_bytes.hpp"
#include "mpg/types.hpp"

// The AVX-512 (F + BW + VL) kernel sets, with and without AVX512_BF16: their vector traits are
// kernel_avx512_vec.hpp's; the walk and the microkernel are kernel_body.hpp's, compiled inside
// each set's target region below.
//
// Conversions. bf16 -> fp32 is a shift, fp16 -> fp32 is VCVTPH2PS: both exact. fp32 -> fp16 is
// VCVTPS2PH with round-to-nearest-even, exact for subnormals, overflow and inf. fp32 -> bf16 is
// done with integer ops in the AVX-512 set. The AVX512_BF16 set uses VCVTNE2PS2BF16 where it gives
// the same bits: it treats subnormal inputs as zero (DAZ) and keeps NaN payloads, which the
// contract forbids, so vectors holding a subnormal or a NaN take the integer ops (one VFPCLASSPS
// per vector tells). Tails use masked loads and stores, which never touch memory past the row.

namespace mpg::detail::avx512 {
struct Target {
  static constexpr Isa kIsa = Isa::kAvx512;
  static constexpr bool kNativeBf16 = false;
  static bool supported() { return cpu_features().avx512; }
};
struct Kernels;
}  // namespace mpg::detail::avx512

// The same traits with AVX512_BF16's conversion for bf16 outputs (and AVX512DQ's VFPCLASSPS,
// which every CPU with AVX512_BF16 has). Only kernels that narrow to
// bf16 differ, so this set compiles only those and takes the rest from the AVX-512 set
// (Delegate, kOwns: see kernel_body.hpp's Kernels).
namespace mpg::detail::avx512_bf16 {
struct Target {
  static constexpr Isa kIsa = Isa::kAvx512Bf16;
  static constexpr bool kNativeBf16 = true;
  static bool supported() { return cpu_features().avx512_bf16; }
  using Delegate = avx512::Kernels;
  template <class... Ts>
  static constexpr bool kOwns = (std::is_same_v<Ts, bfloat16> || ...);
};
}  // namespace mpg::detail::avx512_bf16

// GCC 12 warns inside its own intrinsics (_mm512_undefined_* reads itself, GCC bug 105593)
// once they are inlined into target-specific functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

MPG_BEGIN_TARGET("avx2,f16c,avx512f,avx512bw,avx512vl")
#define MPG_KERNEL_NAMESPACE avx512
#include "mpg/detail/kernel_avx512_vec.hpp"
#include "mpg/detail/kernel_body.hpp"
#undef MPG_KERNEL_NAMESPACE
MPG_END_TARGET

MPG_BEGIN_TARGET("avx2,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")
#define MPG_KERNEL_NAMESPACE avx512_bf16
#include "mpg/detail/kernel_avx512_vec.hpp"
#include "mpg/detail/kernel_body.hpp"
#undef MPG_KERNEL_NAMESPACE
MPG_END_TARGET

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Measurements behind the constants (efficiency = same-run yardstick time / op time, see
// bench/bandwidth.hpp; variants built and timed side by side by scripts/tune_kernels.sh).
// - kPrefetchBytes = 1024, past the row end. On the AVX-512 machine of 2026-11 (AMD EPYC), bf16
//   4096 x 8 x 4096, 1 thread, with plain stores, a blocked gather with a 2048-byte in-row
//   prefetch read at 0.92 of the sequential read, and letting it run past the row end (into the
//   same expert's next token) took the full op from 0.63 to 0.78; 2048 was kept. On the AVX-512
//   Xeon of 2026-12-04, with streamed rows, scripts/tune_kernels.sh -march=native, 2 rounds x 3,
//   efficiency of the four bench_permute_grad DRAM rows, 1 | 2 threads: 2048 0.83-0.92 |
//   0.86-1.03, 1024 0.84-0.90 | 0.87-0.96, 512 0.83-0.93 | 0.87-0.97; bf16 dropless and padded
//   0.84-0.85 with 2048 against 0.88 with 1024 or 512 on 1 thread, the others within the noise.
//   On the AVX-512 AMD EPYC Zen 5 of 2026-12-06 (2 MiB L2), the same script at -O2 with
//   dispatch, 2 rounds x 3, 1 | 2 threads: 1024 0.86-0.99 | 0.93-0.98, 512 0.77-1.00 |
//   0.87-1.02, 2048 0.79-0.97 | 0.88-1.06, block 4 0.81-0.96 | 0.92-1.08; fp16 2048 x 8 x 7168
//   on 1 thread 0.93 with 1024 against 0.77-0.79 with 512 or 2048. 1024 and 8 stay.
// - kPrefetchBytesZen4 = 256, taken where cpu_features().amd_zen4 (AMD family 19h with
//   AVX-512). On a Zen 4 EPYC guest (2026-12-07: family 25 model 17, 1 MiB L2 per core, 32 MiB
//   L3), scripts/tune_kernels.sh at -O2 with dispatch, 3 rounds x 3, the four bench_permute_grad
//   DRAM rows, 1 | 2 threads: 1024 (the distance above) 0.56-0.65 | 0.72-0.82, 256 0.69-0.76 |
//   0.85-0.88, none 0.67-0.71 | 0.73-0.88; with block 4: 256 0.72-0.80 | 0.90-0.92, 512
//   0.67-0.73 | 0.81-0.88, 1024 0.58-0.66 | 0.77-0.84, none 0.67-0.76 | 0.75-0.91. A first sweep
//   (2 rounds): 512 0.63-0.69 | 0.76-0.83, 2048 0.54-0.62 | 0.57-0.71, 4096 0.53-0.64 |
//   0.69-0.76. In cache (16 x 8 x 4096 bf16, 1 thread) 51.5 GB/s with 256 against 51.7. Then
//   the kept code against the code before, 3 interleaved rounds of 3, the DRAM rows of
//   bench_permute_grad, bench_token_unpermute and bench_init_routing_v2_grad: 1 thread
//   0.70-0.75 against 0.55-0.67, 2 threads 0.78-0.90 against 0.74-0.82. Block 4 as well read
//   0.74-0.81 and 0.75-0.95 there, but the block width is compile-time for every CPU and on the
//   Zen 5 guest it was no better than 8 (above): not taken without a second instantiation.
//   kCopyPrefetchBytes (MoeTokenUnpermuteGrad) stays 1024 on Zen 4: on the same guest
//   (bench_token_unpermute_grad, 3 rounds x 3, 1 | 2 threads) bf16 4096 x 8 x 4096 read 0.51 |
//   0.45 with 1024, 0.56 | 0.74 with 256 and 0.53 | 0.72 with 512, fp32 8192 x 2 x 4096 0.79 |
//   0.77, 0.77 | 0.86 and 0.82 | 0.92; but 512 against 1024 again, 3 interleaved rounds, gave
//   bf16 0.56 | 0.67 against 0.51 | 0.71 and fp32 0.78 | 0.89 against 0.77 | 0.88: within the
//   noise, not worth a second CPU-chosen constant. Chosen at run time by CPU model (256 on
//   Zen 4, as prefetch_bytes()) it was no faster either (2026-12-07, 4 interleaved rounds of 3,
//   median op time bf16 28.6 | 20.0 ms against 28.1 | 19.2): not kept. By op time, not
//   efficiency: the same-run yardstick moved by up to 15% between rounds there.
// - bf16 MoeTokenUnpermuteGrad on Zen 4 (about half the yardstick with L1 prefetches). In cache
//   it is bound by instruction throughput (bench_token_unpermute_grad tokens:16, one thread): it
//   reads 23 GB/s, less than the DRAM yardstick of its bytes (23-38 GB/s); fp32 in cache reads
//   67 GB/s. Both pass about 6 G copy-columns per second; bf16 moves 4.25 bytes per copy-column,
//   fp32 10. In DRAM that is not the whole story: the L2 prefetches (prefetch_to_l2, below) took
//   a seventh off its time.
//   Sampled with perf (cpu-clock; this guest has no hardware counters), the fused step's time
//   sits after its streaming stores and X loads, spread over the step's 24 loads, 16 multiplies,
//   14 permutes, 8 widenings and 4 narrowings per 8 vectors. Changing how the copies are walked
//   did not help (bench_token_unpermute_grad, scripts/tune_kernels.sh, 3 rounds x 3, bf16 |
//   fp32 efficiency on 1 | 2 threads): with MPG_TUNE_FUSED_GROUP_COPIES, 4 copies per fused
//   group 0.55 | 0.65, 0.69 | 0.75 and 2 copies 0.49 | 0.60, 0.73 | 0.78 against 8 copies
//   0.56 | 0.54, 0.71 | 0.74; 2, 4 or 8 steps of one copy before the next copy's 0.54 | 0.63,
//   0.52 | 0.62, 0.43 | 0.60 against 0.52 | 0.64 for one step (fp32 0.67-0.71 | 0.79-0.85
//   alike).
// - prefetch_to_l2() on Zen 4: the in-row prefetches as PREFETCHT1 (L2 only) instead of
//   PREFETCHT0. On the Zen 4 guest (2026-12-08), a standalone copy of the fused bf16 step over
//   4096 x 8 x 4096 (one thread, median of 5 interleaved rounds) read 0.61-0.67 of a sequential
//   read + non-temporal write of its bytes with PREFETCHT0 at 512-4096 bytes or none, 0.72-0.77
//   with PREFETCHT1 or T2 at 1024-4096 (0.63-0.67 at 512); the same gather and streamed stores
//   without the arithmetic read 0.82-0.94 with no prefetch at all. In L1 the step takes about 30
//   TSC cycles per copy and 128 columns, a third of its DRAM time: misses in flight, not the
//   arithmetic, hold the op back there, and an L1 prefetch holds an L1 miss buffer until its
//   line arrives. In the library (-O2 with dispatch, interleaved rounds of 3, median op times
//   1 | 2 threads, the code before -> this one): bf16 MoeTokenUnpermuteGrad 29.9 | 20.3 ->
//   30.3 | 16.8 ms and 32.0 | 21.7 -> 31.3 | 17.2 ms (3 and 4 rounds), fp32 8192 x 2 x 4096
//   30.6 | 18.2 -> 31.7 | 17.2 and 31.1 | 19.5 -> 29.1 | 18.4 ms; bench_permute_grad and
//   bench_token_unpermute every row within 10% both ways (3 rounds). Open: a build of the code
//   before with Vec::prefetch fixed to PREFETCHT1 read the bf16 row on one thread at 23.9-26.0 ms
//   in five runs against 28.4-32.7 for this code, on two threads 16.6-18.4 against 15.7-17.2;
//   a build of this code with prefetch_line fixed to prefetch_l2 (no branch) read 29.2 ms, a
//   template parameter for the level in the fused pass (its loop then the same size as that
//   build's) 28.9, -falign-loops=64 changed neither build. With L2 prefetches,
//   kCopyPrefetchBytes 512 | 1024 | 2048 read bf16 0.59 | 0.69 | 0.66 on one thread, 0.75 |
//   0.77 | 0.72 on two (scripts/tune_kernels.sh, 2 rounds x 3, that compile-time build): 1024
//   stays. Not measured on other CPUs, which keep PREFETCHT0.
// - kCopyPrefetchBytes = 1024 (MoeTokenUnpermuteGrad, 8 copies advancing together): on the
//   AVX-512 Xeon (2026-12-04), bench_token_unpermute_grad -march=native, scripts/tune_kernels.sh,
//   efficiency bf16 4096 x 8 x 4096 on 1 and 2 threads, one run of 2 rounds x 3 each: 512 bytes
//   0.70 0.69, 1024 0.67 0.69, 2048 0.65-0.66 0.66-0.70, 4096 0.62 0.67, 8192 0.57 0.58, none
//   0.45 0.48; fp32 8192 x 2 x 4096 flat from 512 to 2048 (0.90-0.93). The plateau's middle,
//   as the AVX2 set's. On the Zen 5 guest (2026-12-07, -O2 with dispatch, with the VFPCLASSPS
//   guard of that day), bf16 1 | 2 threads, medians of 3 rounds x 3: 1024 0.89 | 0.87, 3072
//   0.78 | 0.77, 4096 0.95 | 0.89, 8192 0.81 | 0.75; a second sweep of 2 rounds: 1024 0.88 |
//   0.85, 2048 0.85 | 0.80, 3072 0.70 | 0.72, 4096 0.89 | 0.82, 5120 0.78 | 0.72, 6144 0.76 |
//   0.71. Not monotonic, 4096 ahead on one thread only, and last on the Xeon: 1024 stays.
// - kBlockVectors = 8: 8 independent sums cover the add latency when rows come from cache.
//   Longer runs per row lose: each row's next 1024, 2048 or 4096 columns summed into an fp32
//   buffer in L1 before the next row's (2026-12-06, bench_permute_grad -march=native, bf16
//   4096 x 8 x 4096, 2 interleaved rounds of 3) read 0.80, 0.74-0.75 and 0.67 against 0.89-0.90
//   on 1 thread, 0.78-0.79, 0.72-0.78 and 0.66-0.71 against 0.89 on 2.
// - Streaming stores from kStreamingStoreBytes (detail/fast.hpp, 8 MiB) up: on the AVX2 machine
//   of kernel_avx2.hpp's notes, never streaming lost up to 0.04 on the DRAM rows (bf16 0.84
//   against 0.88), and streaming the 128 KiB output of the in-cache row (16 x 8 x 4096 bf16)
//   cost 15-20% of its speed (18.7 against 23.4 GB/s, 1 thread): an output that small is read
//   back from cache by the caller. Identical variants differed by up to 0.05 (load 6-8).
// - The AVX512_BF16 set: on the AVX-512 Xeon (2026-12-05), bench_token_unpermute_grad
//   -march=native, bf16 4096 x 8 x 4096, 2 interleaved rounds of 3, efficiency 1 | 2 threads:
//   0.78 | 0.76-0.77 with the integer rounding, 0.79-0.80 | 0.77-0.81 with VCVTNE2PS2BF16 and
//   its VFPCLASSPS guard, 0.80 | 0.79-0.80 without the guard (wrong bits): the guard costs
//   nothing measurable there. On the Zen 5 guest (2026-12-07, -O2 with dispatch, interleaved
//   rounds of 3) it cost 0.06-0.08: 0.87 | 0.82 with it, 0.94 | 0.90 without (6 rounds). One
//   guard per 4 vectors (VFPCLASSPS kept, one branch) gained nothing, so the VFPCLASSPS itself
//   costs. Proving the products ordinary per copy and step (two copies of the step body, a
//   branch per copy) gave 0.88 | 0.84; once per step for all copies (products_ordinary, kept)
//   0.91 | 0.88 against 0.82 | 0.81 with the guard and 0.90 | 0.88 without it (3 rounds;
//   median op time 21.2 | 11.7 ms against 24.7 | 12.9 ms).
// - The pair tree through pair_add (two cross-block permutes per level): a pair_levels2 of
//   in-block shuffles with one permute stage at level 3, as the AVX2 set has, gave the same bits
//   and no gain on the Zen 5 guest (2026-12-06, bench_token_unpermute_grad -O2, 3 interleaved
//   rounds of 3, bf16 1 | 2 threads: 0.79 | 0.81 against 0.88 | 0.80): not kept.
// The AVX2 set's constants are measured separately: see kernel_avx2.hpp.

#endif  // MPG_HAVE_X86_KERNELS
