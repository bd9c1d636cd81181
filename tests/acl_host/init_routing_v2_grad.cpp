// A device test program for aclnnMoeInitRoutingV2Grad in the vendor's
// structure, built against the host shim alone; prints every output element's
// bits for init_routing_v2_grad_typed to match. The vendor's sample also
// creates aclScalar attributes it does not pass; so does this.
#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "acl_program.h"
#include "aclnnop/aclnn_moe_init_routing_v2_grad.h"
#include "cases.h"

namespace {

template <typename T, typename I>
int RunCase(const std::string& name, aclrtStream stream, const std::vector<T>& gradData,
            const std::vector<int64_t>& gradShape, const std::vector<I>& indicesData,
            aclDataType dataType, aclDataType indexType, int64_t topK, int64_t dropPadMode,
            int64_t activeNum, const std::vector<T>& outData,
            const std::vector<int64_t>& outShape) {
  DeviceTensor grad, indices, out;
  const std::vector<int64_t> indicesShape = {static_cast<int64_t>(indicesData.size())};
  CHECK_RET(
      CreateAclTensor(gradData, gradShape, ContiguousStrides(gradShape), 0, dataType, &grad) == 0 &&
          CreateAclTensor(indicesData, indicesShape, {1}, 0, indexType, &indices) == 0 &&
          CreateAclTensor(outData, outShape, ContiguousStrides(outShape), 0, dataType, &out) == 0,
      return 1);
  int32_t kValue = static_cast<int32_t>(topK);
  aclScalar* k = aclCreateScalar(&kValue, aclDataType::ACL_INT32);
  CHECK_RET(k != nullptr, return 1);

  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  auto ret =
      aclnnMoeInitRoutingV2GradGetWorkspaceSize(grad.tensor, indices.tensor, topK, dropPadMode,
                                                activeNum, out.tensor, &workspaceSize, &executor);
  aclDestroyScalar(k);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeInitRoutingV2GradGetWorkspaceSize failed. ERROR: %d (%s)\n", ret,
                      aclGetRecentErrMsg());
            return ret);
  ret = RunPhaseTwo("aclnnMoeInitRoutingV2Grad", workspaceSize, stream, [&](void* workspace) {
    return aclnnMoeInitRoutingV2Grad(workspace, workspaceSize, executor, stream);
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
    using C = init_routing_v2_grad_cases::Dropless;
    ret = RunCase("dropless_f32_int32", stream, C::grad(), {C::kRows, C::kHidden},
                  C::expanded_row_idx(), ACL_FLOAT, ACL_INT32, C::kTopk, 0, 0, C::out(),
                  {C::kTokens, C::kHidden});
    CHECK_RET(ret == ACL_SUCCESS, return ret);
  }
  {
    using C = init_routing_v2_grad_cases::Active;
    ret = RunCase("active_f16_int64", stream, C::grad(), {C::kActive, C::kHidden},
                  C::expanded_row_idx(), ACL_FLOAT16, ACL_INT64, C::kTopk, 0, C::kActive, C::out(),
                  {C::kTokens, C::kHidden});
    CHECK_RET(ret == ACL_SUCCESS, return ret);
  }
  {
    using C = init_routing_v2_grad_cases::Padded;
    ret = RunCase("padded_bf16_int32", stream, C::grad(), {C::kExperts, C::kCapacity, C::kHidden},
                  C::expanded_row_idx(), ACL_BF16, ACL_INT32, C::kTopk, 1, 0, C::out(),
                  {C::kTokens, C::kHidden});
    CHECK_RET(ret == ACL_SUCCESS, return ret);
  }
  Finalize(deviceId, stream);
  return 0;
}
