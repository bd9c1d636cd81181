// The steps every vendor-style test program here shares, written against the ACL API only (they
// build against the host shim and would build against the real toolkit): runtime setup and
// teardown, device tensors from host data, copying results back and printing their bits.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnn/aclnn_base.h"
#include "print_bits.h"

#define CHECK_RET(cond, return_expr) \
  do {                               \
    if (!(cond)) {                   \
      return_expr;                   \
    }                                \
  } while (0)

#define LOG_PRINT(...)   \
  do {                   \
    printf(__VA_ARGS__); \
  } while (0)

inline int Init(int32_t deviceId, aclrtStream* stream) {
  auto ret = aclInit(nullptr);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
  ret = aclrtSetDevice(deviceId);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
  ret = aclrtCreateStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret);
            return ret);
  return 0;
}

inline void Finalize(int32_t deviceId, aclrtStream stream) {
  aclrtDestroyStream(stream);
  aclrtResetDevice(deviceId);
  aclFinalize();
}

// A device buffer holding a copy of hostData (all of it: the ND storage), and a tensor viewing
// it with the given shape, strides and offset (in elements).
struct DeviceTensor {
  void* addr = nullptr;
  aclTensor* tensor = nullptr;
  size_t elements = 0;
  ~DeviceTensor() {
    aclDestroyTensor(tensor);
    if (addr != nullptr) aclrtFree(addr);
  }
};

template <typename T>
int CreateAclTensor(const std::vector<T>& hostData, const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& strides, int64_t offset, aclDataType dataType,
                    DeviceTensor* out) {
  const size_t size = hostData.size() * sizeof(T);
  auto ret = aclrtMalloc(&out->addr, size, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
  ret = aclrtMemcpy(out->addr, size, hostData.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
  const std::vector<int64_t> storageShape = {static_cast<int64_t>(hostData.size())};
  out->tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), offset,
                                aclFormat::ACL_FORMAT_ND, storageShape.data(), storageShape.size(),
                                out->addr);
  CHECK_RET(out->tensor != nullptr, LOG_PRINT("aclCreateTensor failed: %s\n", aclGetRecentErrMsg());
            return 1);
  out->elements = hostData.size();
  return 0;
}

// Contiguous row-major strides of a shape.
inline std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; i--) {
    strides[i] = shape[i + 1] * strides[i + 1];
  }
  return strides;
}

// Copies a device tensor's whole storage back and prints each element's bits.
template <typename T>
int PrintResult(const std::string& label, const DeviceTensor& t) {
  std::vector<T> result(t.elements);
  auto ret = aclrtMemcpy(result.data(), result.size() * sizeof(T), t.addr, t.elements * sizeof(T),
                         ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
            return ret);
  PrintBits(label.c_str(), result);
  return 0;
}

// Phase one has run: allocates the workspace and runs phase two, then synchronizes.
template <typename PhaseTwo>
int RunPhaseTwo(const char* name, uint64_t workspaceSize, aclrtStream stream, PhaseTwo phaseTwo) {
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    auto ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret);
              return ret);
  }
  auto ret = phaseTwo(workspaceAddr);
  if (ret == ACL_SUCCESS) ret = aclrtSynchronizeStream(stream);
  if (ret != ACL_SUCCESS) {
    LOG_PRINT("%s failed. ERROR: %d (%s)\n", name, ret, aclGetRecentErrMsg());
  }
  if (workspaceSize > 0) aclrtFree(workspaceAddr);
  return ret;
}
