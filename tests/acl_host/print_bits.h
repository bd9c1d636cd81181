// The one output format of the acl_host test programs: "<label>[<i>] = 0x<bits>" per element, so
// that the shim program's output and the typed API's can be compared as text.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

template <typename T>
void PrintBits(const char* label, const std::vector<T>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, &values[i], sizeof(T));
    std::printf("%s[%zu] = 0x%0*llx\n", label, i, static_cast<int>(2 * sizeof(T)),
                static_cast<unsigned long long>(bits));
  }
}
