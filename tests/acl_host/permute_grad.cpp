// A device test program for aclnnMoeTokenPermuteGrad, in the vendor's structure (init, tensors
// on device memory, two phases, synchronize, copy back, destroy, finalize). It includes only
// the ACL headers and so builds against the host shim without a change. It prints every element
// of each out buffer as bits; the ctest compares them with the typed API's (permute_grad_typed).
#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "acl_program.h"
#include "aclnnop/aclnn_moe_token_permute_grad.h"
#include "cases.h"

namespace {

// One call of the op, from host data to printed result.
template <typename T, typename I>
int RunCase(const std::string& name, aclrtStream stream, const std::vector<T>& gradData,
            const std::vector<int64_t>& gradShape, const std::vector<int64_t>& gradStrides,
            const std::vector<I>& indicesData, aclDataType dataType, aclDataType indexType,
            int64_t numTopk, bool paddedMode, const std::vector<T>& outData,
            const std::vector<int64_t>& outShape, const std::vector<int64_t>& outStrides,
            int64_t outOffset) {
  DeviceTensor grad, indices, out;
  const std::vector<int64_t> indicesShape = {static_cast<int64_t>(indicesData.size())};
  CHECK_RET(CreateAclTensor(gradData, gradShape, gradStrides, 0, dataType, &grad) == 0 &&
                CreateAclTensor(indicesData, indicesShape, {1}, 0, indexType, &indices) == 0 &&
                CreateAclTensor(outData, outShape, outStrides, outOffset, dataType, &out) == 0,
            return 1);

  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  auto ret = aclnnMoeTokenPermuteGradGetWorkspaceSize(
      grad.tensor, indices.tensor, numTopk, paddedMode, out.tensor, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeTokenPermuteGradGetWorkspaceSize failed. ERROR: %d (%s)\n", ret,
                      aclGetRecentErrMsg());
            return ret);
  ret = RunPhaseTwo("aclnnMoeTokenPermuteGrad", workspaceSize, stream, [&](void* workspace) {
    return aclnnMoeTokenPermuteGrad(workspace, workspaceSize, executor, stream);
  });
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  return PrintResult<T>(name + " out", out);
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

  Finalize(deviceId, stream);
  return 0;
}
