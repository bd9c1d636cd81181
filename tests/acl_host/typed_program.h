// What the typed-API programs (<op>_typed.cpp) share: 16-bit patterns as mpg element types, and
// reporting a failed call. They print with print_bits.h, as the vendor-style programs do.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "mpg/mpg.hpp"
#include "print_bits.h"

// Reinterprets 16-bit patterns as T (mpg::half or mpg::bfloat16).
template <class T>
std::vector<T> from_bits(const std::vector<uint16_t>& bits) {
  std::vector<T> values;
  for (const uint16_t b : bits) values.push_back(Eigen::numext::bit_cast<T>(b));
  return values;
}

// Prints why a case failed; true if it did not.
inline bool report(const char* name, const mpg::Status& s) {
  if (!s.ok()) std::printf("%s: %s\n", name, s.message().c_str());
  return s.ok();
}
