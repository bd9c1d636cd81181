// mpg's host shim of the vendor's ACL runtime calls (see acl/acl_base.h for the shim as a whole).
//
// What is emulated and what is not:
// - aclInit/aclFinalize and the device calls succeed and do nothing: there is one "device", the
//   CPU, and device memory is host memory.
// - Streams are opaque handles. Nothing is queued: an op's phase two computes before it returns,
//   so aclrtSynchronizeStream has nothing to wait for and succeeds at once.
// - aclrtMalloc returns a 64-byte-aligned host allocation, sized as the runtime sizes device
//   allocations (rounded up to 32 bytes, plus 32). aclrtFree refuses a pointer it did not give out.
// - aclrtMemcpy copies host to host whatever the kind, and refuses count > destMax as the runtime
//   does; the kind must still be one the runtime accepts.
// - aclGetRecentErrMsg() returns the message of the last failure of a shim call on this thread.
#ifndef INC_EXTERNAL_ACL_ACL_RT_H_
#define INC_EXTERNAL_ACL_ACL_RT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "acl/acl_base.h"

enum aclrtMemcpyKind {
  ACL_MEMCPY_HOST_TO_HOST,
  ACL_MEMCPY_HOST_TO_DEVICE,
  ACL_MEMCPY_DEVICE_TO_HOST,
  ACL_MEMCPY_DEVICE_TO_DEVICE,
  ACL_MEMCPY_DEFAULT,
  ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
  ACL_MEMCPY_INNER_DEVICE_TO_DEVICE,
  ACL_MEMCPY_INTER_DEVICE_TO_DEVICE,
};

// Every policy gives the same host allocation.
enum aclrtMemMallocPolicy {
  ACL_MEM_MALLOC_HUGE_FIRST,
  ACL_MEM_MALLOC_HUGE_ONLY,
  ACL_MEM_MALLOC_NORMAL_ONLY,
  ACL_MEM_MALLOC_HUGE_FIRST_P2P,
  ACL_MEM_MALLOC_HUGE_ONLY_P2P,
  ACL_MEM_MALLOC_NORMAL_ONLY_P2P,
  ACL_MEM_MALLOC_HUGE1G_ONLY,
  ACL_MEM_MALLOC_HUGE1G_ONLY_P2P,
  ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100,
  ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000,
  ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000,
};

namespace mpg::acl_host::detail {

inline constexpr std::align_val_t kDeviceAlignment{64};

// The device runtime's sizing: rounded up to 32 bytes, plus 32 bytes of padding.
inline bool padded_size(size_t size, size_t* padded) {
  if (__builtin_add_overflow(size, size_t{63}, padded)) return false;
  *padded &= ~size_t{31};
  return true;
}

inline const char* memcpy_kind_name(int kind) {
  switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST: return "ACL_MEMCPY_HOST_TO_HOST";
    case ACL_MEMCPY_HOST_TO_DEVICE: return "ACL_MEMCPY_HOST_TO_DEVICE";
    case ACL_MEMCPY_DEVICE_TO_HOST: return "ACL_MEMCPY_DEVICE_TO_HOST";
    case ACL_MEMCPY_DEVICE_TO_DEVICE: return "ACL_MEMCPY_DEVICE_TO_DEVICE";
    case ACL_MEMCPY_DEFAULT: return "ACL_MEMCPY_DEFAULT";
    case ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: return "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE";
    default: return nullptr;  // the runtime refuses the other kinds for aclrtMemcpy
  }
}

}  // namespace mpg::acl_host::detail

extern "C" {

inline aclError aclInit(const char* /*configPath*/) {
  return ACL_SUCCESS;
}

inline aclError aclFinalize() {
  return ACL_SUCCESS;
}

inline aclError aclrtSetDevice(int32_t /*deviceId*/) {
  return ACL_SUCCESS;
}

inline aclError aclrtResetDevice(int32_t /*deviceId*/) {
  return ACL_SUCCESS;
}

inline aclError aclrtCreateStream(aclrtStream* stream) {
  namespace shim = mpg::acl_host::detail;
  if (stream == nullptr) {
    return shim::fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream", "stream is null");
  }
  *stream = new (std::nothrow) char;  // a distinct handle; nothing is ever queued on it
  if (*stream == nullptr) {
    return shim::fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtCreateStream", "out of memory");
  }
  shim::Handles::instance().add(*stream, shim::Handles::kStream);
  return ACL_SUCCESS;
}

inline aclError aclrtDestroyStream(aclrtStream stream) {
  namespace shim = mpg::acl_host::detail;
  if (!shim::Handles::instance().remove(stream, shim::Handles::kStream)) {
    return shim::fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyStream",
                      "stream was not created by aclrtCreateStream, or was already destroyed");
  }
  delete static_cast<char*>(stream);
  return ACL_SUCCESS;
}

// Every op has finished when it returns, so there is nothing to wait for.
inline aclError aclrtSynchronizeStream(aclrtStream /*stream*/) {
  return ACL_SUCCESS;
}

inline aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy /*policy*/) {
  namespace shim = mpg::acl_host::detail;
  if (devPtr == nullptr)
    return shim::fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc", "devPtr is null");
  if (size == 0) {
    return shim::fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc", "size is 0: must be > 0");
  }
  size_t bytes = 0;
  if (!shim::padded_size(size, &bytes) ||
      (*devPtr = ::operator new(bytes, shim::kDeviceAlignment, std::nothrow)) == nullptr) {
    return shim::fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc",
                      "cannot allocate " + std::to_string(size) + " bytes");
  }
  shim::Handles::instance().add(*devPtr, shim::Handles::kMemory);
  return ACL_SUCCESS;
}

inline aclError aclrtFree(void* devPtr) {
  namespace shim = mpg::acl_host::detail;
  if (devPtr == nullptr) return shim::fail(ACL_ERROR_INVALID_PARAM, "aclrtFree", "devPtr is null");
  if (!shim::Handles::instance().remove(devPtr, shim::Handles::kMemory)) {
    return shim::fail(ACL_ERROR_INVALID_PARAM, "aclrtFree",
                      "devPtr was not returned by aclrtMalloc, or was already freed");
  }
  ::operator delete(devPtr, shim::kDeviceAlignment);
  return ACL_SUCCESS;
}

inline aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count,
                            aclrtMemcpyKind kind) {
  namespace shim = mpg::acl_host::detail;
  if (count == 0) return ACL_SUCCESS;  // as the runtime: nothing to copy, nothing checked
  if (dst == nullptr) return shim::fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy", "dst is null");
  if (src == nullptr) return shim::fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy", "src is null");
  if (shim::memcpy_kind_name(kind) == nullptr) {
    return shim::fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy",
                      "kind = " + std::to_string(static_cast<int>(kind)) +
                          " is not a copy kind aclrtMemcpy accepts (ACL_MEMCPY_HOST_TO_HOST .. "
                          "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE)");
  }
  if (count > destMax) {
    return shim::fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpy",
                      "count = " + std::to_string(count) +
                          " bytes is more than destMax = " + std::to_string(destMax) + " bytes");
  }
  std::memmove(dst, src, count);
  return ACL_SUCCESS;
}

inline aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  namespace shim = mpg::acl_host::detail;
  if (count == 0) return ACL_SUCCESS;
  if (devPtr == nullptr)
    return shim::fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset", "devPtr is null");
  if (count > maxCount) {
    return shim::fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemset",
                      "count = " + std::to_string(count) +
                          " bytes is more than maxCount = " + std::to_string(maxCount) + " bytes");
  }
  std::memset(devPtr, value, count);
  return ACL_SUCCESS;
}

// The message of the last failure of a shim call on this thread ("<function>: <why>"), kept
// until the next failure; nullptr if no call on this thread has failed yet.
inline const char* aclGetRecentErrMsg() {
  const mpg::acl_host::detail::RecentError& recent = mpg::acl_host::detail::recent_error();
  return recent.set ? recent.message.c_str() : nullptr;
}

}  // extern "C"

#endif  // INC_EXTERNAL_ACL_ACL_RT_H_
