// mpg's host shim of the vendor's ACL runtime: types, status codes and enumerations.
//
// Part of an opt-in include root (include/mpg/acl_host, CMake target mpg::acl_host) that lets a
// program written for the device (acl/acl.h, aclnnop/aclnn_<op>.h) compile unchanged and run
// mpg's ops on the CPU. Names, signatures and enumerator values are the vendor's; everything is
// header-only and works on host memory. C++17 (mpg's language), not C. The guard names are the
// vendor's, so a translation unit that somehow sees both headers keeps one definition.
#ifndef INC_EXTERNAL_ACL_ACL_BASE_H_
#define INC_EXTERNAL_ACL_ACL_BASE_H_

// Defined by every shim header: lets a program (or a test) tell the shim from the real toolkit.
#define MPG_ACL_HOST 1

#include <cstddef>
#include <cstdint>
#include <cstdio>  // device test programs print with printf and rely on the ACL headers for it
#include <mutex>
#include <string>
#include <unordered_map>

#ifndef ACL_FUNC_VISIBILITY
#define ACL_FUNC_VISIBILITY
#endif

using aclrtStream = void*;
using aclrtEvent = void*;
using aclrtContext = void*;
using aclError = int;
using aclFloat16 = uint16_t;

// The runtime's codes this shim returns (acl_base_rt.h and rt_error_codes.h).
inline constexpr int ACL_ERROR_NONE = 0;
inline constexpr int ACL_SUCCESS = 0;
inline constexpr int ACL_ERROR_INVALID_PARAM = 100000;
inline constexpr int ACL_ERROR_BAD_ALLOC = 200000;
inline constexpr int ACL_ERROR_INVALID_RESOURCE_HANDLE = 200005;
#ifndef ACL_ERROR_RT_PARAM_INVALID
#define ACL_ERROR_RT_PARAM_INVALID 107000
#endif
#ifndef ACL_ERROR_RT_MEMORY_ALLOCATION
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001
#endif

// Element types. The ops accept ACL_FLOAT, ACL_FLOAT16, ACL_BF16 (and ACL_INT8 tokens for
// MoeTokenPermute) as data and ACL_INT32/ACL_INT64 as indices; the rest exist so that programs
// naming them compile, and are refused by the ops with 161002.
enum aclDataType {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_UINT16 = 7,
  ACL_UINT32 = 8,
  ACL_INT64 = 9,
  ACL_UINT64 = 10,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_STRING = 13,
  ACL_COMPLEX64 = 16,
  ACL_COMPLEX128 = 17,
  ACL_BF16 = 27,
  ACL_INT4 = 29,
  ACL_UINT1 = 30,
  ACL_COMPLEX32 = 33,
  ACL_HIFLOAT8 = 34,
  ACL_FLOAT8_E5M2 = 35,
  ACL_FLOAT8_E4M3FN = 36,
  ACL_FLOAT8_E8M0 = 37,
  ACL_FLOAT6_E3M2 = 38,
  ACL_FLOAT6_E2M3 = 39,
  ACL_FLOAT4_E2M1 = 40,
  ACL_FLOAT4_E1M2 = 41,
};

// Storage formats. Only ACL_FORMAT_ND is computed on; the ops refuse the others with 161002
// (the host has no fractal or 5-D layouts).
enum aclFormat {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_NCHW = 0,
  ACL_FORMAT_NHWC = 1,
  ACL_FORMAT_ND = 2,
  ACL_FORMAT_NC1HWC0 = 3,
  ACL_FORMAT_FRACTAL_Z = 4,
  ACL_FORMAT_NC1HWC0_C04 = 12,
  ACL_FORMAT_HWCN = 16,
  ACL_FORMAT_NDHWC = 27,
  ACL_FORMAT_FRACTAL_NZ = 29,
  ACL_FORMAT_NCDHW = 30,
  ACL_FORMAT_NDC1HWC0 = 32,
  ACL_FRACTAL_Z_3D = 33,
  ACL_FORMAT_NC = 35,
  ACL_FORMAT_NCL = 47,
  ACL_FORMAT_FRACTAL_NZ_C0_16 = 50,
  ACL_FORMAT_FRACTAL_NZ_C0_32 = 51,
  ACL_FORMAT_FRACTAL_NZ_C0_2 = 52,
  ACL_FORMAT_FRACTAL_NZ_C0_4 = 53,
  ACL_FORMAT_FRACTAL_NZ_C0_8 = 54,
};

namespace mpg::acl_host::detail {

// The message of the last failure of a shim call on this thread (kept until the next failure),
// and whether there has been one: aclGetRecentErrMsg() returns nullptr until then, as the
// runtime does when it has nothing to report.
struct RecentError {
  std::string message;
  bool set = false;
};

inline RecentError& recent_error() {
  thread_local RecentError recent;
  return recent;
}

// Records why `function` failed and returns `code`, so a failure is one line at the call site.
template <class Code>
Code fail(Code code, const char* function, const std::string& why) {
  RecentError& recent = recent_error();
  recent.message = std::string(function) + ": " + why;
  recent.set = true;
  return code;
}

// Handles this shim gave out (allocations and streams), so that freeing a foreign or stale
// pointer is refused instead of corrupting the heap. Never destroyed: usable at exit.
class Handles {
 public:
  enum Kind { kMemory, kStream };
  static Handles& instance() {
    static Handles* handles = new Handles();
    return *handles;
  }
  void add(const void* p, Kind kind) {
    const std::lock_guard<std::mutex> lock(mutex_);
    live_[p] = kind;
  }
  // Removes p; false if p is not a live handle of this kind.
  bool remove(const void* p, Kind kind) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(p);
    if (it == live_.end() || it->second != kind) return false;
    live_.erase(it);
    return true;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<const void*, Kind> live_;
};

}  // namespace mpg::acl_host::detail

#endif  // INC_EXTERNAL_ACL_ACL_BASE_H_
