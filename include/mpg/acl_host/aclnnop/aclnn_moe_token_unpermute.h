// mpg's host shim of aclnnop/aclnn_moe_token_unpermute.h: the vendor's two
// phases, forwarded to mpg::aclnn::MoeTokenUnpermute* (contract and status
// codes: mpg/aclnn.hpp). probsOptional and restoreShapeOptional may be null.
// Phase two takes the stream for compatibility and computes before it returns.
#ifndef OP_API_INC_MOE_TOKEN_UNPERMUTE_H_
#define OP_API_INC_MOE_TOKEN_UNPERMUTE_H_

#include "aclnn/aclnn_base.h"

extern "C" {

inline aclnnStatus aclnnMoeTokenUnpermuteGetWorkspaceSize(
    const aclTensor* permutedTokens, const aclTensor* sortedIndices, const aclTensor* probsOptional,
    bool paddedMode, const aclIntArray* restoreShapeOptional, aclTensor* out,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  namespace shim = mpg::acl_host::detail;
  return shim::plan("aclnnMoeTokenUnpermuteGetWorkspaceSize",
                    {{"permuted_tokens", permutedTokens},
                     {"sorted_indices", sortedIndices},
                     {"probs", probsOptional, /*optional=*/true},
                     {"out", out}},
                    workspaceSize, executor, [&](mpg::aclnn::Executor** planned) {
                      return mpg::aclnn::MoeTokenUnpermuteGetWorkspaceSize(
                          shim::view_of(permutedTokens), shim::view_of(sortedIndices),
                          shim::view_of(probsOptional), paddedMode,
                          shim::int_array_of(restoreShapeOptional), shim::view_of(out),
                          workspaceSize, planned);
                    });
}

inline aclnnStatus aclnnMoeTokenUnpermute(void* workspace, uint64_t workspaceSize,
                                          aclOpExecutor* executor, aclrtStream /*stream*/) {
  namespace shim = mpg::acl_host::detail;
  return shim::forwarded(
      "aclnnMoeTokenUnpermute",
      mpg::aclnn::MoeTokenUnpermute(workspace, workspaceSize, shim::executor_of(executor)));
}

}  // extern "C"

#endif  // OP_API_INC_MOE_TOKEN_UNPERMUTE_H_
