// A device test program for aclnnMoeTokenPermuteGrad, in the vendor's structure (init, tensors
// on device memory, two phases, synchronize, copy back, destroy, finalize). It includes only
// the ACL headers and so builds against the host shim without a change. It prints every element
// of each out buffer as bits; the ctest compares them with the typed API's (permute_grad_typed).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_permute_grad.h"
#include "permute_grad_cases.h"
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

namespace {

int Init(int32_t deviceId, aclrtStream* stream) {
  auto ret = aclInit(nullptr);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
  ret = aclrtSetDevice(deviceId);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
  ret = aclrtCreateStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret);
            return ret);
  return 0;
}

// Copies hostData to new device memory and describes it: view shape, strides and offset on an
// ND storage of hostData.size() elements.
template <typename T>
int CreateAclTensor(const std::vector<T>& hostData, const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& strides, int64_t offset, void** deviceAddr,
                    aclDataType dataType, aclTensor** tensor) {
  const size_t size = hostData.size() * sizeof(T);
  auto ret = aclrtMalloc(deviceAddr, size, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
  ret = aclrtMemcpy(*deviceAddr, size, hostData.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
  const std::vector<int64_t> storageShape = {static_cast<int64_t>(hostData.size())};
  *tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), offset,
                            aclFormat::ACL_FORMAT_ND, storageShape.data(), storageShape.size(),
                            *deviceAddr);
  CHECK_RET(*tensor != nullptr, LOG_PRINT("aclCreateTensor failed\n"); return 1);
  return 0;
}

// Copies a device buffer back and prints each element's bits.
template <typename T>
int PrintResult(const char* name, void* deviceAddr, size_t count) {
  std::vector<T> result(count);
  auto ret = aclrtMemcpy(result.data(), result.size() * sizeof(T), deviceAddr, count * sizeof(T),
                         ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret);
            return ret);
  PrintBits(name, result);
  return 0;
}

// One call of the op from host data to printed result.
template <typename T, typename I>
int RunCase(const char* name, aclrtStream stream, const std::vector<T>& gradData,
            const std::vector<int64_t>& gradShape, const std::vector<int64_t>& gradStrides,
            const std::vector<I>& indicesData, aclDataType dataType, aclDataType indexType,
            int64_t numTopk, bool paddedMode, const std::vector<T>& outData,
            const std::vector<int64_t>& outShape, const std::vector<int64_t>& outStrides,
            int64_t outOffset) {
  void* gradAddr = nullptr;
  void* indicesAddr = nullptr;
  void* outAddr = nullptr;
  aclTensor* grad = nullptr;
  aclTensor* indices = nullptr;
  aclTensor* out = nullptr;
  auto ret = CreateAclTensor(gradData, gradShape, gradStrides, 0, &gradAddr, dataType, &grad);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  const std::vector<int64_t> indicesShape = {static_cast<int64_t>(indicesData.size())};
  ret = CreateAclTensor(indicesData, indicesShape, {1}, 0, &indicesAddr, indexType, &indices);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(outData, outShape, outStrides, outOffset, &outAddr, dataType, &out);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  ret = aclnnMoeTokenPermuteGradGetWorkspaceSize(grad, indices, numTopk, paddedMode, out,
                                                 &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeTokenPermuteGradGetWorkspaceSize failed. ERROR: %d (%s)\n", ret,
                      aclGetRecentErrMsg());
            return ret);
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret);
              return ret);
  }
  ret = aclnnMoeTokenPermuteGrad(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMoeTokenPermuteGrad failed. ERROR: %d (%s)\n", ret,
                                          aclGetRecentErrMsg());
            return ret);
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret);
            return ret);

  const std::string label = std::string(name) + " out";
  ret = PrintResult<T>(label.c_str(), outAddr, outData.size());
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  aclDestroyTensor(grad);
  aclDestroyTensor(indices);
  aclDestroyTensor(out);
  aclrtFree(gradAddr);
  aclrtFree(indicesAddr);
  aclrtFree(outAddr);
  if (workspaceSize > 0) aclrtFree(workspaceAddr);
  return 0;
}

}  // namespace

int main() {
  int32_t deviceId = 0;
  aclrtStream stream = nullptr;
  auto ret = Init(deviceId, &stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  {
    using C = permute_grad_cases::Padded;
    ret = RunCase("padded_bf16_int64", stream, C::grad(), {C::kExperts, C::kCapacity, C::kHidden},
                  {C::kCapacity * C::kRowStride, C::kRowStride, 1}, C::sorted_indices(),
                  aclDataType::ACL_BF16, aclDataType::ACL_INT64, C::kTopk, true, C::out(),
                  {C::kTokens, C::kHidden}, {C::kOutRowStride, 1}, C::kOutOffset);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
  }
  {
    using C = permute_grad_cases::Dropless;
    ret = RunCase("dropless_f16_int32", stream, C::grad(), {C::kRows, C::kHidden}, {C::kHidden, 1},
                  C::sorted_indices(), aclDataType::ACL_FLOAT16, aclDataType::ACL_INT32, C::kTopk,
                  false, C::out(), {C::kTokens, C::kHidden}, {C::kHidden, 1}, 0);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
  }
  {
    using C = permute_grad_cases::Hand;
    ret = RunCase("hand_f32", stream, C::grad(), {C::kRows, C::kHidden}, {C::kHidden, 1},
                  C::sorted_indices(), aclDataType::ACL_FLOAT, aclDataType::ACL_INT32, C::kTopk,
                  false, C::out(), {C::kTokens, C::kHidden}, {C::kHidden, 1}, 0);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
  }

  aclrtDestroyStream(stream);
  aclrtResetDevice(deviceId);
  aclFinalize();
  return 0;
}
