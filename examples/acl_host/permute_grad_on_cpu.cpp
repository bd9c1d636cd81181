// permute_grad_on_cpu: a device test program for aclnnMoeTokenPermuteGrad, written for the
// accelerator and run on the CPU through mpg's host shim. Nothing in it knows about mpg: it
// includes the vendor's headers by their usual names, and the shim's include root
// (include/mpg/acl_host, CMake target mpg::acl_host) supplies them. From the repository root:
//
//   g++ -std=c++17 -O2 -pthread -I include/mpg/acl_host -I include
//       $(pkg-config --cflags eigen3) examples/acl_host/permute_grad_on_cpu.cpp
//
// (one line). In CMake: target_link_libraries(<your program> PRIVATE mpg::acl_host).
//
// The case: 3 tokens routed top-2 among 4 experts, hidden size 4, bfloat16 gradients, dropless.
// The forward kept R = 5 of the N*K = 6 copies; the copy at sorted row 5 was dropped.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_permute_grad.h"

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

namespace {

int64_t GetShapeSize(const std::vector<int64_t>& shape) {
  int64_t size = 1;
  for (int64_t d : shape) size *= d;
  return size;
}

// bfloat16 is the top half of a float32 (these values are exact in bfloat16).
uint16_t ToBf16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}
float FromBf16(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float f = 0;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Device memory holding hostData, described as a contiguous ND tensor of the given shape.
template <typename T>
int CreateAclTensor(const std::vector<T>& hostData, const std::vector<int64_t>& shape,
                    void** deviceAddr, aclDataType dataType, aclTensor** tensor) {
  const size_t size = GetShapeSize(shape) * sizeof(T);
  auto ret = aclrtMalloc(deviceAddr, size, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
  ret = aclrtMemcpy(*deviceAddr, size, hostData.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; i--) {
    strides[i] = shape[i + 1] * strides[i + 1];
  }
  *tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), 0,
                            aclFormat::ACL_FORMAT_ND, shape.data(), shape.size(), *deviceAddr);
  CHECK_RET(*tensor != nullptr, LOG_PRINT("aclCreateTensor failed: %s\n", aclGetRecentErrMsg());
            return 1);
  return 0;
}

}  // namespace

int main() {
  // 1. Runtime and stream (no-ops on the CPU).
  int32_t deviceId = 0;
  aclrtStream stream = nullptr;
  CHECK_RET(aclInit(nullptr) == ACL_SUCCESS && aclrtSetDevice(deviceId) == ACL_SUCCESS &&
                aclrtCreateStream(&stream) == ACL_SUCCESS,
            LOG_PRINT("init failed\n");
            return 1);

  // 2. Inputs and output on the device. Row r of G is r + 1 in every column.
  const int64_t numTopk = 2;
  const std::vector<int64_t> gradShape = {5, 4}, indicesShape = {6}, outShape = {3, 4};
  std::vector<uint16_t> gradData(GetShapeSize(gradShape));
  for (size_t i = 0; i < gradData.size(); ++i) gradData[i] = ToBf16(static_cast<float>(i / 4 + 1));
  // Token t's k-th copy went to sorted row sortedIndices[t*2 + k]: token 0 -> rows 0 and 3,
  // token 1 -> rows 1 and 5 (dropped, 5 >= R), token 2 -> rows 4 and 2.
  const std::vector<int32_t> sortedIndicesData = {0, 3, 1, 5, 4, 2};
  const std::vector<uint16_t> outData(GetShapeSize(outShape), 0);
  void* gradAddr = nullptr;
  void* indicesAddr = nullptr;
  void* outAddr = nullptr;
  aclTensor* grad = nullptr;
  aclTensor* sortedIndices = nullptr;
  aclTensor* out = nullptr;
  auto ret = CreateAclTensor(gradData, gradShape, &gradAddr, aclDataType::ACL_BF16, &grad);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(sortedIndicesData, indicesShape, &indicesAddr, aclDataType::ACL_INT32,
                        &sortedIndices);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(outData, outShape, &outAddr, aclDataType::ACL_BF16, &out);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 3. Phase one checks shapes and dtypes and sizes the workspace; phase two checks the index
  //    values and computes (at once: the stream is only a handle on the CPU).
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  ret = aclnnMoeTokenPermuteGradGetWorkspaceSize(grad, sortedIndices, numTopk, false, out,
                                                 &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeTokenPermuteGradGetWorkspaceSize failed. ERROR: %d: %s\n", ret,
                      aclGetRecentErrMsg());
            return ret);
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret);
              return ret);
  }
  ret = aclnnMoeTokenPermuteGrad(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMoeTokenPermuteGrad failed. ERROR: %d: %s\n", ret,
                                          aclGetRecentErrMsg());
            return ret);

  // 4. Synchronize (nothing to wait for on the CPU), then copy the result back.
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret);
            return ret);
  std::vector<uint16_t> result(outData.size());
  ret = aclrtMemcpy(result.data(), result.size() * sizeof(uint16_t), outAddr,
                    result.size() * sizeof(uint16_t), ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy result failed. ERROR: %d\n", ret); return ret);
  // Expected per token: 1 + 4 = 5, 2 (its other copy was dropped), 5 + 3 = 8.
  for (int64_t t = 0; t < outShape[0]; ++t) {
    LOG_PRINT("out[%ld] = {", static_cast<long>(t));
    for (int64_t h = 0; h < outShape[1]; ++h) {
      LOG_PRINT("%s%g", h ? ", " : "", FromBf16(result[t * outShape[1] + h]));
    }
    LOG_PRINT("}\n");
  }

  // 5. Release tensors, memory, stream and runtime.
  aclDestroyTensor(grad);
  aclDestroyTensor(sortedIndices);
  aclDestroyTensor(out);
  aclrtFree(gradAddr);
  aclrtFree(indicesAddr);
  aclrtFree(outAddr);
  if (workspaceSize > 0) aclrtFree(workspaceAddr);
  aclrtDestroyStream(stream);
  aclrtResetDevice(deviceId);
  aclFinalize();
  return 0;
}
