// mpg's host shim of aclnnop/aclnn_moe_token_unpermute_grad.h: the vendor's two
// phases, forwarded to mpg::aclnn::MoeTokenUnpermuteGrad* (contract and status
// codes: mpg/aclnn.hpp). probsOptional, restoreShapeOptional and (with no
// probs) probsGradOut may be null. Phase two takes the stream for compatibility
// and computes before it returns.
#ifndef OP_API_INC_MOE_TOKEN_UNPERMUTE_GRAD_H_
#define OP_API_INC_MOE_TOKEN_UNPERMUTE_GRAD_H_

#include "aclnn/aclnn_base.h"

extern "C" {

inline aclnnStatus aclnnMoeTokenUnpermuteGradGetWorkspaceSize(
    const aclTensor* permuteTokens, const aclTensor* unpermutedTokensGrad,
    const aclTensor* sortedIndices, const aclTensor* probsOptional, bool paddedMode,
    const aclIntArray* restoreShapeOptional, aclTensor* permutedTokensGradOut,
    aclTensor* probsGradOut, uint64_t* workspaceSize, aclOpExecutor** executor) {
  namespace shim = mpg::acl_host::detail;
  return shim::plan("aclnnMoeTokenUnpermuteGradGetWorkspaceSize",
                    {{"permuted_tokens", permuteTokens},
                     {"unpermuted_tokens_grad", unpermutedTokensGrad},
                     {"sorted_indices", sortedIndices},
                     {"probs", probsOptional, /*optional=*/true},
                     {"permuted_tokens_grad_out", permutedTokensGradOut},
                     {"probs_grad_out", probsGradOut, /*optional=*/true}},
                    workspaceSize, executor, [&](mpg::aclnn::Executor** planned) {
                      return mpg::aclnn::MoeTokenUnpermuteGradGetWorkspaceSize(
                          shim::view_of(permuteTokens), shim::view_of(unpermutedTokensGrad),
                          shim::view_of(sortedIndices), shim::view_of(probsOptional), paddedMode,
                          shim::int_array_of(restoreShapeOptional),
                          shim::view_of(permutedTokensGradOut), shim::view_of(probsGradOut),
                          workspaceSize, planned);
                    });
}

inline aclnnStatus aclnnMoeTokenUnpermuteGrad(void* workspace, uint64_t workspaceSize,
                                              aclOpExecutor* executor, aclrtStream /*stream*/) {
  namespace shim = mpg::acl_host::detail;
  return shim::forwarded(
      "aclnnMoeTokenUnpermuteGrad",
      mpg::aclnn::MoeTokenUnpermuteGrad(workspace, workspaceSize, shim::executor_of(executor)));
}

}  // extern "C"

#endif  // OP_API_INC_MOE_TOKEN_UNPERMUTE_GRAD_H_
