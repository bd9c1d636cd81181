// A device test program for aclnnMoeTokenUnpermuteGrad in the vendor's
// structure, built against the host shim alone; prints both outputs' bits for
// unpermute_grad_typed to match.
#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "acl_program.h"
#include "aclnnop/aclnn_moe_token_unpermute_grad.h"
#include "cases.h"

int main() {
  int32_t deviceId = 0;
  aclrtStream stream = nullptr;
  auto ret = Init(deviceId, &stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  {  // With probs and a restore shape: both outputs.
    using C = unpermute_grad_cases::Weighted;
    DeviceTensor tokens, grad, indices, probs, tokensGrad, probsGrad;
    const std::vector<int64_t> tokensShape = {C::kRows, C::kHidden};
    const std::vector<int64_t> gradShape = {C::kTokens, C::kHidden};
    const std::vector<int64_t> indicesShape = {C::kTokens * C::kTopk};
    const std::vector<int64_t> probsShape = {C::kTokens, C::kTopk};
    const std::vector<int64_t> tokensGradShape = {C::kTokens * C::kTopk, C::kHidden};
    CHECK_RET(
        CreateAclTensor(C::permuted_tokens(), tokensShape, ContiguousStrides(tokensShape), 0,
                        ACL_BF16, &tokens) == 0 &&
            CreateAclTensor(C::unpermuted_tokens_grad(), gradShape, ContiguousStrides(gradShape), 0,
                            ACL_BF16, &grad) == 0 &&
            CreateAclTensor(C::sorted_indices(), indicesShape, {1}, 0, ACL_INT32, &indices) == 0 &&
            CreateAclTensor(C::probs(), probsShape, ContiguousStrides(probsShape), 0, ACL_BF16,
                            &probs) == 0 &&
            CreateAclTensor(C::permuted_tokens_grad(), tokensGradShape,
                            ContiguousStrides(tokensGradShape), 0, ACL_BF16, &tokensGrad) == 0 &&
            CreateAclTensor(C::probs_grad(), probsShape, ContiguousStrides(probsShape), 0, ACL_BF16,
                            &probsGrad) == 0,
        return 1);
    aclIntArray* restoreShape = aclCreateIntArray(gradShape.data(), gradShape.size());
    CHECK_RET(restoreShape != nullptr, return 1);
    uint64_t workspaceSize = 0;
    aclOpExecutor* executor = nullptr;
    ret = aclnnMoeTokenUnpermuteGradGetWorkspaceSize(
        tokens.tensor, grad.tensor, indices.tensor, probs.tensor, false, restoreShape,
        tokensGrad.tensor, probsGrad.tensor, &workspaceSize, &executor);
    aclDestroyIntArray(restoreShape);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMoeTokenUnpermuteGradGetWorks"
                                            "paceSize failed. ERROR: %d (%s)\n",
                                            ret, aclGetRecentErrMsg());
              return ret);
    ret = RunPhaseTwo("aclnnMoeTokenUnpermuteGrad", workspaceSize, stream, [&](void* workspace) {
      return aclnnMoeTokenUnpermuteGrad(workspace, workspaceSize, executor, stream);
    });
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    CHECK_RET(
        PrintResult<uint16_t>("weighted_bf16_int32 permuted_tokens_grad_out", tokensGrad) == 0 &&
            PrintResult<uint16_t>("weighted_bf16_int32 probs_grad_out", probsGrad) == 0,
        return 1);
  }
  {  // Without probs: one output, probsGradOut null.
    using C = unpermute_grad_cases::Unweighted;
    DeviceTensor tokens, grad, indices, tokensGrad;
    const std::vector<int64_t> tokensShape = {C::kRows, C::kHidden};
    const std::vector<int64_t> gradShape = {C::kCopies, C::kHidden};
    const std::vector<int64_t> indicesShape = {C::kCopies};
    CHECK_RET(
        CreateAclTensor(C::permuted_tokens(), tokensShape, ContiguousStrides(tokensShape), 0,
                        ACL_FLOAT, &tokens) == 0 &&
            CreateAclTensor(C::unpermuted_tokens_grad(), gradShape, ContiguousStrides(gradShape), 0,
                            ACL_FLOAT, &grad) == 0 &&
            CreateAclTensor(C::sorted_indices(), indicesShape, {1}, 0, ACL_INT64, &indices) == 0 &&
            CreateAclTensor(C::permuted_tokens_grad(), gradShape, ContiguousStrides(gradShape), 0,
                            ACL_FLOAT, &tokensGrad) == 0,
        return 1);
    uint64_t workspaceSize = 0;
    aclOpExecutor* executor = nullptr;
    ret = aclnnMoeTokenUnpermuteGradGetWorkspaceSize(tokens.tensor, grad.tensor, indices.tensor,
                                                     nullptr, false, nullptr, tokensGrad.tensor,
                                                     nullptr, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMoeTokenUnpermuteGradGetWorks"
                                            "paceSize failed. ERROR: %d (%s)\n",
                                            ret, aclGetRecentErrMsg());
              return ret);
    ret = RunPhaseTwo("aclnnMoeTokenUnpermuteGrad", workspaceSize, stream, [&](void* workspace) {
      return aclnnMoeTokenUnpermuteGrad(workspace, workspaceSize, executor, stream);
    });
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    CHECK_RET(PrintResult<float>("unweighted_f32_int64 permuted_tokens_grad_out", tokensGrad) == 0,
              return 1);
  }
  Finalize(deviceId, stream);
  return 0;
}
