// mpg's host shim of aclnnop/aclnn_moe_token_permute.h: the vendor's two
// phases, forwarded to mpg::aclnn::MoeTokenPermute* (contract and status codes:
// mpg/aclnn.hpp). Phase two takes the stream for compatibility and computes
// before it returns.
#ifndef OP_API_INC_MOE_TOKEN_PERMUTE_H_
#define OP_API_INC_MOE_TOKEN_PERMUTE_H_

#include "aclnn/aclnn_base.h"

extern "C" {

inline aclnnStatus aclnnMoeTokenPermuteGetWorkspaceSize(
    const aclTensor* tokens, const aclTensor* indices, int64_t numOutTokens, bool paddedMode,
    const aclTensor* permuteTokensOut, const aclTensor* sortedIndicesOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  namespace shim = mpg::acl_host::detail;
  return shim::plan("aclnnMoeTokenPermuteGetWorkspaceSize",
                    {{"tokens", tokens},
                     {"indices", indices},
                     {"permute_tokens_out", permuteTokensOut},
                     {"sorted_indices_out", sortedIndicesOut}},
                    workspaceSize, executor, [&](mpg::aclnn::Executor** planned) {
                      return mpg::aclnn::MoeTokenPermuteGetWorkspaceSize(
                          shim::view_of(tokens), shim::view_of(indices), numOutTokens, paddedMode,
                          shim::view_of(permuteTokensOut), shim::view_of(sortedIndicesOut),
                          workspaceSize, planned);
                    });
}

inline aclnnStatus aclnnMoeTokenPermute(void* workspace, uint64_t workspaceSize,
                                        aclOpExecutor* executor, aclrtStream /*stream*/) {
  namespace shim = mpg::acl_host::detail;
  return shim::forwarded(
      "aclnnMoeTokenPermute",
      mpg::aclnn::MoeTokenPermute(workspace, workspaceSize, shim::executor_of(executor)));
}

}  // extern "C"

#endif  // OP_API_INC_MOE_TOKEN_PERMUTE_H_
