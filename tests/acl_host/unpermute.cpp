// A device test program for aclnnMoeTokenUnpermute in the vendor's structure,
// built against the host shim alone; prints every output element's bits for
// unpermute_typed to match.
#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "acl_program.h"
#include "aclnnop/aclnn_moe_token_unpermute.h"
#include "cases.h"

int main() {
  int32_t deviceId = 0;
  aclrtStream stream = nullptr;
  auto ret = Init(deviceId, &stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  {  // With probs (float32, unlike the bfloat16 tokens) and a restore shape.
    using C = unpermute_cases::Weighted;
    DeviceTensor tokens, indices, probs, out;
    const std::vector<int64_t> tokensShape = {C::kRows, C::kHidden};
    const std::vector<int64_t> indicesShape = {C::kTokens * C::kTopk};
    const std::vector<int64_t> probsShape = {C::kTokens, C::kTopk};
    const std::vector<int64_t> outShape = {C::kTokens, C::kHidden};
    CHECK_RET(
        CreateAclTensor(C::permuted_tokens(), tokensShape, ContiguousStrides(tokensShape), 0,
                        ACL_BF16, &tokens) == 0 &&
            CreateAclTensor(C::sorted_indices(), indicesShape, {1}, 0, ACL_INT32, &indices) == 0 &&
            CreateAclTensor(C::probs(), probsShape, ContiguousStrides(probsShape), 0, ACL_FLOAT,
                            &probs) == 0 &&
            CreateAclTensor(C::out(), outShape, ContiguousStrides(outShape), 0, ACL_BF16, &out) ==
                0,
        return 1);
    aclIntArray* restoreShape = aclCreateIntArray(outShape.data(), outShape.size());
    CHECK_RET(restoreShape != nullptr, return 1);
    uint64_t workspaceSize = 0;
    aclOpExecutor* executor = nullptr;
    ret =
        aclnnMoeTokenUnpermuteGetWorkspaceSize(tokens.tensor, indices.tensor, probs.tensor, false,
                                               restoreShape, out.tensor, &workspaceSize, &executor);
    aclDestroyIntArray(restoreShape);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnMoeTokenUnpermuteGetWorkspaceSize failed. ERROR: %d (%s)\n", ret,
                        aclGetRecentErrMsg());
              return ret);
    ret = RunPhaseTwo("aclnnMoeTokenUnpermute", workspaceSize, stream, [&](void* workspace) {
      return aclnnMoeTokenUnpermute(workspace, workspaceSize, executor, stream);
    });
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    CHECK_RET(PrintResult<uint16_t>("weighted_bf16_int32 out", out) == 0, return 1);
  }
  {  // Without probs (K = 1) and without a restore shape; out's dropped row
    // becomes +0.0.
    using C = unpermute_cases::Unweighted;
    DeviceTensor tokens, indices, out;
    const std::vector<int64_t> tokensShape = {C::kRows, C::kHidden};
    const std::vector<int64_t> indicesShape = {C::kCopies};
    const std::vector<int64_t> outShape = {C::kCopies, C::kHidden};
    CHECK_RET(
        CreateAclTensor(C::permuted_tokens(), tokensShape, ContiguousStrides(tokensShape), 0,
                        ACL_FLOAT16, &tokens) == 0 &&
            CreateAclTensor(C::sorted_indices(), indicesShape, {1}, 0, ACL_INT64, &indices) == 0 &&
            CreateAclTensor(C::out(), outShape, ContiguousStrides(outShape), 0, ACL_FLOAT16,
                            &out) == 0,
        return 1);
    uint64_t workspaceSize = 0;
    aclOpExecutor* executor = nullptr;
    ret = aclnnMoeTokenUnpermuteGetWorkspaceSize(tokens.tensor, indices.tensor, nullptr, false,
                                                 nullptr, out.tensor, &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnMoeTokenUnpermuteGetWorkspaceSize failed. ERROR: %d (%s)\n", ret,
                        aclGetRecentErrMsg());
              return ret);
    ret = RunPhaseTwo("aclnnMoeTokenUnpermute", workspaceSize, stream, [&](void* workspace) {
      return aclnnMoeTokenUnpermute(workspace, workspaceSize, executor, stream);
    });
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    CHECK_RET(PrintResult<uint16_t>("unweighted_f16_int64 out", out) == 0, return 1);
  }
  Finalize(deviceId, stream);
  return 0;
}
