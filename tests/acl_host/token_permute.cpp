// A device test program for aclnnMoeTokenPermute in the vendor's structure,
// built against the host shim alone; prints both outputs' bits for
// token_permute_typed to match.
#include <cstdint>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "acl_program.h"
#include "aclnnop/aclnn_moe_token_permute.h"
#include "cases.h"

namespace {

template <typename T, typename E>
int RunCase(const std::string& name, aclrtStream stream, const std::vector<T>& tokensData,
            aclDataType dataType, const std::vector<E>& idsData, aclDataType idType,
            int64_t numTokens, int64_t topK, int64_t hidden, int64_t numOutTokens,
            const std::vector<T>& permutedData, int64_t rows,
            const std::vector<int32_t>& sortedData) {
  DeviceTensor tokens, ids, permuted, sorted;
  const std::vector<int64_t> tokensShape = {numTokens, hidden};
  const std::vector<int64_t> idsShape = {numTokens, topK};
  const std::vector<int64_t> permutedShape = {rows, hidden};
  const std::vector<int64_t> sortedShape = {numTokens * topK};
  CHECK_RET(
      CreateAclTensor(tokensData, tokensShape, ContiguousStrides(tokensShape), 0, dataType,
                      &tokens) == 0 &&
          CreateAclTensor(idsData, idsShape, ContiguousStrides(idsShape), 0, idType, &ids) == 0 &&
          CreateAclTensor(permutedData, permutedShape, ContiguousStrides(permutedShape), 0,
                          dataType, &permuted) == 0 &&
          CreateAclTensor(sortedData, sortedShape, {1}, 0, ACL_INT32, &sorted) == 0,
      return 1);
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor = nullptr;
  auto ret = aclnnMoeTokenPermuteGetWorkspaceSize(tokens.tensor, ids.tensor, numOutTokens, false,
                                                  permuted.tensor, sorted.tensor, &workspaceSize,
                                                  &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMoeTokenPermuteGetWorkspaceSize failed. ERROR: %d (%s)\n", ret,
                      aclGetRecentErrMsg());
            return ret);
  ret = RunPhaseTwo("aclnnMoeTokenPermute", workspaceSize, stream, [&](void* workspace) {
    return aclnnMoeTokenPermute(workspace, workspaceSize, executor, stream);
  });
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  CHECK_RET(PrintResult<T>(name + " permute_tokens_out", permuted) == 0, return 1);
  return PrintResult<int32_t>(name + " sorted_indices_out", sorted);
}

}  // namespace

int main() {
  int32_t deviceId = 0;
  aclrtStream stream = nullptr;
  auto ret = Init(deviceId, &stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);
  {
    using C = token_permute_cases::KeepAll;
    ret = RunCase("keep_all_bf16_int32", stream, C::tokens(), ACL_BF16, C::expert_ids(), ACL_INT32,
                  C::kTokens, C::kTopk, C::kHidden, C::kOutTokens, C::permuted(), C::kRows,
                  C::sorted_indices());
    CHECK_RET(ret == ACL_SUCCESS, return ret);
  }
  {
    using C = token_permute_cases::Int8Dropping;
    ret = RunCase("dropping_int8_int64", stream, C::tokens(), ACL_INT8, C::expert_ids(), ACL_INT64,
                  C::kTokens, C::kTopk, C::kHidden, C::kOutTokens, C::permuted(), C::kRows,
                  C::sorted_indices());
    CHECK_RET(ret == ACL_SUCCESS, return ret);
  }
  Finalize(deviceId, stream);
  return 0;
}
