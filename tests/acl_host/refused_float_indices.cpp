// A device test program with a mistake the device does not catch: the sorted indices are filled
// from a std::vector<float> but described as ACL_INT32, so the op reads float bit patterns
// (1.0f is 0x3F800000 = 1065353216). The device kernel does not range-check indices: in dropless
// mode it takes 1065353216 >= R for a dropped copy and returns a plausible, wrong result. On the
// host shim the same program is refused by phase two with 161002, aclGetRecentErrMsg() names the
// index, its position and the valid range, and out is left as it was.
//
// Exits 0 when exactly that happened; the ctest also matches the printed message.
#include <cstdint>
#include <cstdio>
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

template <typename T>
int CreateAclTensor(const std::vector<T>& hostData, const std::vector<int64_t>& shape,
                    void** deviceAddr, aclDataType dataType, aclTensor** tensor) {
  const size_t size = hostData.size() * sizeof(T);
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
  return 0;
}

}  // namespace

int main() {
  int32_t deviceId = 0;
  aclrtStream stream = nullptr;
  CHECK_RET(aclInit(nullptr) == ACL_SUCCESS && aclrtSetDevice(deviceId) == ACL_SUCCESS &&
                aclrtCreateStream(&stream) == ACL_SUCCESS,
            LOG_PRINT("init failed\n");
            return 1);

  // Dropless, 1 token, top-2: G is [2, 2] float32, out is [1, 2].
  const std::vector<float> gradData = {1, 2, 3, 4};
  const std::vector<float> sortedIndicesData = {0, 1};  // the mistake: float, described as int32
  const std::vector<float> outData = {-7, -7};
  void* gradAddr = nullptr;
  void* indicesAddr = nullptr;
  void* outAddr = nullptr;
  aclTensor* grad = nullptr;
  aclTensor* indices = nullptr;
  aclTensor* out = nullptr;
  CHECK_RET(CreateAclTensor(gradData, {2, 2}, &gradAddr, ACL_FLOAT, &grad) == 0, return 1);
  CHECK_RET(CreateAclTensor(sortedIndicesData, {2}, &indicesAddr, ACL_INT32, &indices) == 0,
            return 1);
  CHECK_RET(CreateAclTensor(outData, {1, 2}, &outAddr, ACL_FLOAT, &out) == 0, return 1);

  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  auto ret = aclnnMoeTokenPermuteGradGetWorkspaceSize(grad, indices, 2, false, out, &workspaceSize,
                                                      &executor);
  // Shapes and dtypes are fine: only the values are wrong, so phase one accepts the call.
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("phase one failed unexpectedly. ERROR: %d\n", ret);
            return 1);
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    CHECK_RET(aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS,
              return 1);
  }
  ret = aclnnMoeTokenPermuteGrad(workspaceAddr, workspaceSize, executor, stream);
  const char* message = aclGetRecentErrMsg();
  LOG_PRINT("aclnnMoeTokenPermuteGrad returned %d: %s\n", ret, message ? message : "(none)");

  std::vector<float> result(outData.size(), 0);
  CHECK_RET(aclrtMemcpy(result.data(), result.size() * sizeof(float), outAddr,
                        outData.size() * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS,
            return 1);
  const bool untouched = result == outData;
  LOG_PRINT("out after the refused call: {%g, %g} (%s)\n", result[0], result[1],
            untouched ? "untouched" : "WRITTEN");

  aclDestroyTensor(grad);
  aclDestroyTensor(indices);
  aclDestroyTensor(out);
  aclrtFree(gradAddr);
  aclrtFree(indicesAddr);
  aclrtFree(outAddr);
  if (workspaceSize > 0) aclrtFree(workspaceAddr);
  aclrtDestroyStream(stream);
  aclrtResetDevice(deviceId);
  aclFinalize();
  return ret == ACLNN_ERR_PARAM_INVALID && message != nullptr && untouched ? 0 : 1;
}
