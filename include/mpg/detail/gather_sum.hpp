#pragma once
#include "mpg/detail/guard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "mpg/detail/mode.hpp"
#include "mpg/detail/token_permute_args.hpp"  // the other kernels the kernel sets compile
#include "mpg/detail/unpermute_grad_args.hpp"
#include "mpg/types.hpp"

// The one computation behind every gather-and-sum op: out[t] = a fixed-order fp32 sum of the
// kept rows of G named by S[t*K .. t*K+K), optionally each multiplied by a per-copy weight,
// narrowed with RNE. The reduction order and the weights are compile-time parameters of the same
// walk and microkernel (kernel_body.hpp); this header holds what is independent of the ISA.

// Compile-time overrides for timing variants side by side (scripts/tune_kernels.sh), not a
// user setting: MPG_TUNE_PREFETCH_BYTES (the in-row prefetch distance, 0 = none),
// MPG_TUNE_PREFETCH_TO_L2 (1: the in-row prefetches fill L2 only, 0: L1), MPG_TUNE_BLOCK_VECTORS
// and MPG_TUNE_FUSED_GROUP_COPIES (MoeTokenUnpermuteGrad's copies per fused group, 1-8) replace
// every kernel set's own value, which each traits file gives with the measurements behind it.
#ifdef MPG_TUNE_PREFETCH_BYTES
#define MPG_PREFETCH_BYTES_OR(own) (MPG_TUNE_PREFETCH_BYTES)
#else
#define MPG_PREFETCH_BYTES_OR(own) (own)
#endif
#ifdef MPG_TUNE_PREFETCH_TO_L2
#define MPG_PREFETCH_TO_L2_OR(own) (MPG_TUNE_PREFETCH_TO_L2 != 0)
#else
#define MPG_PREFETCH_TO_L2_OR(own) (own)
#endif
#ifdef MPG_TUNE_BLOCK_VECTORS
#define MPG_BLOCK_VECTORS_OR(own) (MPG_TUNE_BLOCK_VECTORS)
#else
#define MPG_BLOCK_VECTORS_OR(own) (own)
#endif
#ifdef MPG_TUNE_FUSED_GROUP_COPIES
#define MPG_FUSED_GROUP_COPIES_OR(own) (MPG_TUNE_FUSED_GROUP_COPIES)
#else
#define MPG_FUSED_GROUP_COPIES_OR(own) (own)
#endif

namespace mpg::detail {

// Where a walk's in-row prefetches go, chosen once per call for this CPU: how far ahead in the
// row (bytes, 0 = none), and whether they fill L2 only (Vec::prefetch_l2) instead of L1.
struct InRowPrefetch {
  int64_t bytes = 0;
  bool to_l2 = false;
};

// The order in which a token's K copies are summed (both in fp32, one IEEE add at a time).
enum class Order {
  kSequential,  // acc = kept(0) ? x0 : +0.0, then acc + x_k for k = 1..K-1 where kept
  kBinaryBins,  // B bins filled in the interleaved order below, then a perfect binary tree
};

// What a kernel knows of the fp32 values it narrows to bf16, each level implying the one before.
// The more it knows, the less a kernel set's narrowing (Vec::stream_line) has to check.
enum class Narrowing {
  kAny,
  kNoLowNan,  // no NaN with nonzero low 16 bits: the integer rounding keeps the other values
  kOrdinary,  // no NaN and no subnormal: AVX512_BF16's conversion is exact on these
};

// Per-copy weights p[t][k] for num_tokens x topk copies; element (t, k) is at
// data + (t * row_stride + k) * size_of(dtype). Independent of the token dtype.
struct WeightsView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t row_stride = 0;  // elements
};

// Number of bins of the binary-bins order for K copies:
// K >= 128 ? 64 : 2^max(0, floor(log2 K) - 1). Always a power of two with 2 * (B - 1) < K.
constexpr int64_t binary_bins_count(int64_t topk) {
  if (topk >= 128) return 64;
  int64_t pow2 = 1;  // largest power of two <= topk
  while (pow2 * 2 <= topk) pow2 *= 2;
  return pow2 >= 2 ? pow2 / 2 : 1;
}
inline constexpr int64_t kMaxBins = 64;

// a * b rounded to fp32, as an operand the compiler cannot fuse into a following add: GCC
// contracts x * p + acc into an FMA under -ffp-contract=fast (its default in GNU modes) whenever
// the target has FMA, which would skip the product's rounding. The empty asm makes the product
// opaque; it costs no instruction.
inline float product_fp32(float a, float b) {
  float p = a * b;
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+x"(p));
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
  asm("" : "+w"(p));
#else
  volatile float opaque = p;  // no register constraint known here: go through memory
  p = opaque;
#endif
  return p;
}

// The weight of copy k of token t, widened to fp32 exactly.
inline float weight_at(const WeightsView& w, int64_t token, int64_t k) {
  const int64_t i = token * w.row_stride + k;
  switch (w.dtype) {
    case DType::kFloat16: return static_cast<float>(static_cast<const half*>(w.data)[i]);
    case DType::kBFloat16: return static_cast<float>(static_cast<const bfloat16*>(w.data)[i]);
    case DType::kFloat32:
    case DType::kInt8: break;  // never a weight dtype (the ops' checks refuse it)
  }
  return static_cast<const float*>(w.data)[i];
}

// Whether x * w is exact in fp32 for every finite x of type T, so that a fused multiply-add
// acc + x * w (one rounding) gives the contract's acc + fp32(x * w) bit for bit (a NaN aside,
// whose payload is unspecified). It is when the product needs at most 24 significant bits (T's
// significand and w's), its lowest bit is no finer than fp32's smallest subnormal (2^-149) and it
// cannot overflow. Router probabilities in fp16 (11 bits) or bf16 (8 bits) usually pass for fp16
// and bf16 tokens; fp32 ones (24 bits) and fp32 tokens never do.
template <class T>
bool product_is_exact(float w) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    constexpr bool kHalf = std::is_same_v<T, half>;
    constexpr int kSignificandBits = kHalf ? 11 : 8;
    constexpr int kLowestBitExponent = kHalf ? -24 : -133;  // T's smallest subnormal
    constexpr double kLargest = kHalf ? 65504.0 : 0x1.FEp127;
    if (!std::isfinite(w)) return false;
    uint32_t bits = 0;
    std::memcpy(&bits, &w, sizeof(bits));
    const auto biased_exponent = static_cast<int>((bits >> 23) & 0xFFu);
    // Zero and fp32 subnormals: the latter's lowest bit is below 2^-125 (fp16) and 2^-16 (bf16).
    if (biased_exponent == 0) return false;
    // w = significand * 2^(biased_exponent - 150), bit 23 set. Its trailing zero bits must leave
    // at most 24 - kSignificandBits significant ones, and its lowest set bit, at
    // 2^(biased_exponent - 150 + trailing), must be at 2^(-149 - kLowestBitExponent) or above.
    const int trailing_needed =
        std::max(kSignificandBits, 1 - kLowestBitExponent - biased_exponent);
    if (trailing_needed > 23) return false;
    const uint32_t significand = (bits & 0x7FFFFFu) | 0x800000u;
    const uint32_t low_bits = (1u << trailing_needed) - 1u;  // trailing_needed in [8, 23]
    return (significand & low_bits) == 0 &&
           std::fabs(static_cast<double>(w)) * kLargest <= 0x1.FFFFFEp127;
  } else {
    (void)w;
    return false;
  }
}

// What every fast kernel needs for a range of tokens. Inputs are validated; offsets are int64.
template <class T, class I>
struct GatherSumArgs {
  const T* grad = nullptr;
  int64_t grad_rows = 0;
  int64_t grad_stride = 0;  // elements
  const I* indices = nullptr;
  int64_t topk = 0;
  WeightsView weights;  // read only by the weighted instantiations
  T* out = nullptr;
  int64_t out_stride = 0;  // elements
  int64_t hidden = 0;
  // The output is large enough that caching it only evicts the gradient rows still to be read.
  bool streaming_stores = false;
};

// Signature shared by every kernel set's entry points: compute out rows [token_begin, token_end).
template <class T, class I>
using GatherSumKernel = void (*)(const GatherSumArgs<T, I>& args, int64_t token_begin,
                                 int64_t token_end);

// Whether a kernel set's Target takes some entry points from another set (Target::Delegate; see
// kernel_body.hpp's owns_kernel). Here, outside kernel_body.hpp, so that it exists once.
template <class Target, class = void>
struct HasDelegate : std::false_type {};
template <class Target>
struct HasDelegate<Target, std::void_t<typename Target::Delegate>> : std::true_type {};

// One token's kept copies as groups of rows to sum, each group one sequential sum:
//   kSequential: one group, the kept copies in ascending k;
//   kBinaryBins: group b = bin b = copies 2b, 2b + 2B, 2b + 4B, ... then 2b + 1, 2b + 1 + 2B, ...
//                (the bin's evens then its odds, as the order fills them), kept ones only.
// A group whose leading copy (k = 0, or 2b) is kept starts from that term; otherwise it starts
// from +0.0, which matters for a lone -0.0 (+0 + -0 = +0): assigns(g) tells which.
// Gathered once per token, so the column-block loops neither re-read S nor branch on drops.
template <class T>
class TokenPlan {
 public:
  explicit TokenPlan(int64_t topk) {
    if (topk > kInline) {
      rows_heap_.resize(static_cast<size_t>(topk));
      weights_heap_.resize(static_cast<size_t>(topk));
    }
    rows_ = topk > kInline ? rows_heap_.data() : rows_inline_;
    weights_ = topk > kInline ? weights_heap_.data() : weights_inline_;
  }
  TokenPlan(const TokenPlan&) = delete;
  TokenPlan& operator=(const TokenPlan&) = delete;

  // kCheckExact: also find products_exact() (weighted; only kernels that may fuse ask).
  template <Mode M, Order O, bool kWeighted, bool kCheckExact = false, class I>
  void gather(const GatherSumArgs<T, I>& a, int64_t token) {
    const I* s = a.indices + token * a.topk;
    count_ = 0;
    products_exact_ = kCheckExact;  // never claimed for a plan that did not check
    const auto add_if_kept = [&](int64_t k) {
      if (!ModeTraits<M>::kept(s[k], a.grad_rows)) return false;
      float w = 1.0f;
      if constexpr (kWeighted) {
        w = weight_at(a.weights, token, k);
        if (w == 0.0f) return false;  // +0 and -0 drop the copy; NaN != 0 keeps it
      }
      rows_[count_] = a.grad + static_cast<int64_t>(s[k]) * a.grad_stride;
      weights_[count_] = w;
      if constexpr (kCheckExact) products_exact_ = products_exact_ && product_is_exact<T>(w);
      ++count_;
      return true;
    };
    if constexpr (O == Order::kSequential) {
      num_groups_ = 1;
      group_begin_[0] = 0;
      assigns_[0] = add_if_kept(0);
      for (int64_t k = 1; k < a.topk; ++k) add_if_kept(k);
    } else {
      const int64_t bins = binary_bins_count(a.topk);
      num_groups_ = bins;
      for (int64_t b = 0; b < bins; ++b) {
        group_begin_[b] = count_;
        assigns_[b] = add_if_kept(2 * b);
        for (int64_t j = 2 * b + 2 * bins; j < a.topk; j += 2 * bins) add_if_kept(j);
        for (int64_t j = 2 * b + 1; j < a.topk; j += 2 * bins) add_if_kept(j);
      }
    }
    group_begin_[num_groups_] = count_;
  }

  const T* const* rows() const { return rows_; }
  const float* weights() const { return weights_; }  // 1.0f unless weighted
  int64_t count() const { return count_; }
  int64_t num_groups() const { return num_groups_; }
  int64_t group_begin(int64_t g) const { return group_begin_[g]; }
  int64_t group_end(int64_t g) const { return group_begin_[g + 1]; }
  // Whether rows()[group_begin(g)] is the group's leading copy and so starts the sum.
  bool assigns(int64_t g) const { return assigns_[g]; }
  // Whether every kept copy's product is exact (product_is_exact): plans gathered with
  // kCheckExact only (false otherwise).
  bool products_exact() const { return products_exact_; }

 private:
  static constexpr int64_t kInline = 32;  // top-k beyond this is rare; it costs one allocation
  const T* rows_inline_[kInline];
  float weights_inline_[kInline];
  std::vector<const T*> rows_heap_;
  std::vector<float> weights_heap_;
  const T** rows_ = nullptr;
  float* weights_ = nullptr;
  int64_t count_ = 0;
  int64_t num_groups_ = 0;
  bool products_exact_ = false;
  int64_t group_begin_[kMaxBins + 1] = {};
  bool assigns_[kMaxBins] = {};
};

}  // namespace mpg::detail
