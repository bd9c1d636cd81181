// The inputs of the acl_host cases, shared by each vendor-style program (built against the host
// shim) and the typed-API program that gives its expected bits. Plain data: no mpg, no ACL.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace cases {

// A 16-bit float bit pattern for element i: finite, of varied sign and magnitude.
inline uint16_t half_bits(int64_t i, uint16_t base) {
  const uint16_t sign = (i % 3 == 1) ? 0x8000 : 0;
  return static_cast<uint16_t>(sign | (base + (i * 37) % 0x180));
}
inline std::vector<uint16_t> half_values(int64_t n, uint16_t base) {
  std::vector<uint16_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = half_bits(i, base);
  return v;
}

// float32 values of very different magnitudes, so that the order of a sum shows in its bits.
inline std::vector<float> float_values(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const float scale = (i % 4 == 0) ? 3.0e7f : (i % 4 == 1 ? 0.37f : 1.0f / 3.0f);
    v[i] = static_cast<float>((i * 37) % 101 - 50) * scale;
  }
  return v;
}

}  // namespace cases

namespace permute_grad_cases {

using cases::half_bits;

// Padded mode, bfloat16 elements, int64 indices. G is [E, C, H] = [3, 2, 5] whose rows are 8
// elements apart (strides [16, 8, 1]); out is [4, 5] inside a larger buffer, rows 7 apart,
// starting at element 3; the rest of that buffer must stay as it was (0xFFFF).
struct Padded {
  static constexpr int64_t kExperts = 3, kCapacity = 2, kHidden = 5, kRowStride = 8;
  static constexpr int64_t kTokens = 4, kTopk = 2;
  static constexpr int64_t kOutRowStride = 7, kOutOffset = 3;
  static constexpr int64_t kGradElements = kExperts * kCapacity * kRowStride;
  static constexpr int64_t kOutElements = kOutOffset + kTokens * kOutRowStride;
  static std::vector<uint16_t> grad() {
    std::vector<uint16_t> g(kGradElements);
    for (int64_t i = 0; i < kGradElements; ++i) g[i] = half_bits(i, 0x3E00);
    return g;
  }
  static std::vector<int64_t> sorted_indices() { return {0, 3, 1, -1, 4, 2, -1, 5}; }
  static std::vector<uint16_t> out() { return std::vector<uint16_t>(kOutElements, 0xFFFF); }
};

// Dropless mode, float16 elements, int32 indices: N = 3, K = 3, R = 7 of N*K = 9 rows kept,
// H = 4, everything contiguous. Copies at sorted positions 7 and 8 were dropped.
struct Dropless {
  static constexpr int64_t kTokens = 3, kTopk = 3, kRows = 7, kHidden = 4;
  static std::vector<uint16_t> grad() {
    std::vector<uint16_t> g(kRows * kHidden);
    for (int64_t i = 0; i < kRows * kHidden; ++i) g[i] = half_bits(i, 0x3800);
    return g;
  }
  static std::vector<int32_t> sorted_indices() { return {4, 8, 0, 2, 6, 1, 7, 3, 5}; }
  static std::vector<uint16_t> out() { return std::vector<uint16_t>(kTokens * kHidden, 0); }
};

// Worked by hand, float32, dropless: G rows {1, 10}, {2, 20}, {3, 30}; token 0 takes rows 2 and
// 3 (dropped, 3 >= R), token 1 rows 0 and 1: out = {3, 30}, {1 + 2, 10 + 20} = {3, 30}, {3, 30}.
struct Hand {
  static constexpr int64_t kTokens = 2, kTopk = 2, kRows = 3, kHidden = 2;
  static std::vector<float> grad() { return {1, 10, 2, 20, 3, 30}; }
  static std::vector<int32_t> sorted_indices() { return {2, 3, 0, 1}; }
  static std::vector<float> out() { return std::vector<float>(kTokens * kHidden, -1.0f); }
};

}  // namespace permute_grad_cases

namespace init_routing_v2_grad_cases {

// drop_pad_mode 0, active_num 0: G is [N*K, H] float32; N = 3, K = 5, H = 4 (K = 5 sums in the
// binary-bins order ((x0 + x4) + x1) + (x2 + x3), which differs from left to right here).
struct Dropless {
  static constexpr int64_t kTokens = 3, kTopk = 5, kHidden = 4, kRows = kTokens * kTopk;
  static std::vector<float> grad() { return cases::float_values(kRows * kHidden); }
  static std::vector<int32_t> expanded_row_idx() {
    return {7, 0, 12, 3, 9, 14, 1, 5, 10, 2, 6, 13, 4, 11, 8};
  }
  static std::vector<float> out() { return std::vector<float>(kTokens * kHidden, 0); }
};

// drop_pad_mode 0, active_num A = 5 of N*K = 6: G is [5, 3] float16, int64 indices; the copy at
// row 5 was dropped.
struct Active {
  static constexpr int64_t kTokens = 2, kTopk = 3, kHidden = 3, kActive = 5;
  static std::vector<uint16_t> grad() { return cases::half_values(kActive * kHidden, 0x3A00); }
  static std::vector<int64_t> expanded_row_idx() { return {5, 1, 3, 0, 4, 2}; }
  static std::vector<uint16_t> out() { return std::vector<uint16_t>(kTokens * kHidden, 0); }
};

// drop_pad_mode 1: G is [E, C, H] = [2, 3, 2] bfloat16; N = 3, K = 2, -1 = dropped copy.
struct Padded {
  static constexpr int64_t kExperts = 2, kCapacity = 3, kHidden = 2, kTokens = 3, kTopk = 2;
  static std::vector<uint16_t> grad() {
    return cases::half_values(kExperts * kCapacity * kHidden, 0x3F00);
  }
  static std::vector<int32_t> expanded_row_idx() { return {3, 0, -1, 4, 1, 5}; }
  static std::vector<uint16_t> out() { return std::vector<uint16_t>(kTokens * kHidden, 0); }
};

}  // namespace init_routing_v2_grad_cases

namespace unpermute_cases {

// With probs: X [R, H] = [5, 3] bfloat16, S a permutation of [0, N*K) with N = 3, K = 2 (row 5
// of the 6 was dropped: S >= R), probs [3, 2] float32 with one zero weight (that copy drops).
// restore_shape = out's shape {3, 3}.
struct Weighted {
  static constexpr int64_t kTokens = 3, kTopk = 2, kRows = 5, kHidden = 3;
  static std::vector<uint16_t> permuted_tokens() {
    return cases::half_values(kRows * kHidden, 0x3E80);
  }
  static std::vector<int32_t> sorted_indices() { return {2, 5, 0, 4, 3, 1}; }
  static std::vector<float> probs() { return {0.625f, 0.375f, 0.0f, 1.0f, 0.3f, 0.7f}; }
  static std::vector<uint16_t> out() { return std::vector<uint16_t>(kTokens * kHidden, 0); }
};

// Without probs (K = 1): X [R, H] = [3, 4] float16, S int64 of length 4 (R = 3: row 3 dropped),
// out [4, 4] = X's rows in S order, +0.0 for the dropped one.
struct Unweighted {
  static constexpr int64_t kRows = 3, kHidden = 4, kCopies = 4;
  static std::vector<uint16_t> permuted_tokens() {
    return cases::half_values(kRows * kHidden, 0x3C00);
  }
  static std::vector<int64_t> sorted_indices() { return {1, 3, 0, 2}; }
  static std::vector<uint16_t> out() { return std::vector<uint16_t>(kCopies * kHidden, 0xFFFF); }
};

}  // namespace unpermute_cases

namespace token_permute_cases {

// bfloat16 tokens [N, H] = [4, 3], int32 expert ids [N, K] = [4, 2] with ties, num_out_tokens 0
// (keep all N*K = 8 copies): permute_tokens_out [8, 3], sorted_indices_out [8].
struct KeepAll {
  static constexpr int64_t kTokens = 4, kTopk = 2, kHidden = 3, kOutTokens = 0, kRows = 8;
  static std::vector<uint16_t> tokens() { return cases::half_values(kTokens * kHidden, 0x3F00); }
  static std::vector<int32_t> expert_ids() { return {2, 0, 1, 2, 0, 3, 1, 0}; }
  static std::vector<uint16_t> permuted() { return std::vector<uint16_t>(kRows * kHidden, 0); }
  static std::vector<int32_t> sorted_indices() { return std::vector<int32_t>(kTokens * kTopk, -9); }
};

// int8 tokens [3, 5], int64 expert ids [3, 3], num_out_tokens -2: n = 9 - 2 = 7 rows kept, the
// copies ranked 7 and 8 (the highest expert ids) dropped.
struct Int8Dropping {
  static constexpr int64_t kTokens = 3, kTopk = 3, kHidden = 5, kOutTokens = -2, kRows = 7;
  static std::vector<int8_t> tokens() {
    std::vector<int8_t> v(kTokens * kHidden);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int8_t>(i * 29 % 256 - 128);
    return v;
  }
  static std::vector<int64_t> expert_ids() { return {4, 1, 7, 1, 0, 4, 7, 2, 3}; }
  static std::vector<int8_t> permuted() { return std::vector<int8_t>(kRows * kHidden, 0); }
  static std::vector<int32_t> sorted_indices() { return std::vector<int32_t>(kTokens * kTopk, -9); }
};

}  // namespace token_permute_cases

namespace unpermute_grad_cases {

// With probs: X [R, H] = [5, 3] bfloat16, g [N, H] = [3, 3] bfloat16, S a permutation of [0, 6)
// (N = 3, K = 2; the copy at row 5 was dropped), probs [3, 2] bfloat16; outputs dX [6, 3] and
// dP [3, 2], both bfloat16.
struct Weighted {
  static constexpr int64_t kTokens = 3, kTopk = 2, kRows = 5, kHidden = 3;
  static std::vector<uint16_t> permuted_tokens() {
    return cases::half_values(kRows * kHidden, 0x3E80);
  }
  static std::vector<uint16_t> unpermuted_tokens_grad() {
    return cases::half_values(kTokens * kHidden, 0x3C80);
  }
  static std::vector<int32_t> sorted_indices() { return {3, 0, 5, 2, 1, 4}; }
  static std::vector<uint16_t> probs() { return cases::half_values(kTokens * kTopk, 0x3E00); }
  static std::vector<uint16_t> permuted_tokens_grad() {
    return std::vector<uint16_t>(kTokens * kTopk * kHidden, 0xFFFF);
  }
  static std::vector<uint16_t> probs_grad() {
    return std::vector<uint16_t>(kTokens * kTopk, 0xFFFF);
  }
};

// Without probs (K = 1): X [3, 4] float32, g [4, 4] float32, S int64 of length 4 (row 3 of X
// does not exist: that copy was dropped); dX [4, 4] float32.
struct Unweighted {
  static constexpr int64_t kRows = 3, kHidden = 4, kCopies = 4;
  static std::vector<float> permuted_tokens() { return cases::float_values(kRows * kHidden); }
  static std::vector<float> unpermuted_tokens_grad() {
    return cases::float_values(kCopies * kHidden);
  }
  static std::vector<int64_t> sorted_indices() { return {2, 0, 3, 1}; }
  static std::vector<float> permuted_tokens_grad() {
    return std::vector<float>(kCopies * kHidden, -1.0f);
  }
};

}  // namespace unpermute_grad_cases
