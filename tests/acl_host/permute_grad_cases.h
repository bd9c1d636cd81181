// The inputs of the PermuteGrad cases, shared by the vendor-style program (built against the
// host shim) and the typed-API program that gives the expected bits. Plain data: no mpg, no ACL.
#pragma once

#include <cstdint>
#include <vector>

namespace permute_grad_cases {

// A 16-bit float bit pattern for element i: finite, of varied sign and magnitude.
inline uint16_t half_bits(int64_t i, uint16_t base) {
  const uint16_t sign = (i % 3 == 1) ? 0x8000 : 0;
  return static_cast<uint16_t>(sign | (base + (i * 37) % 0x180));
}

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
