// mpg's host shim of aclnnop/aclnn_moe_token_permute_grad.h: the vendor's two phases, forwarded
// to mpg::aclnn::MoeTokenPermuteGrad* (contract and status codes: mpg/aclnn.hpp). Phase two
// takes the stream for compatibility and computes before it returns.
#ifndef OP_API_INC_MOE_TOKEN_PERMUTE_GRAD_H_
#define OP_API_INC_MOE_TOKEN_PERMUTE_GRAD_H_

#include "aclnn/aclnn_base.h"

extern "C" {

inline aclnnStatus aclnnMoeTokenPermuteGradGetWorkspaceSize(const aclTensor* permutedOutputGrad,
                                                            const aclTensor* sortedIndices,
                                                            int64_t numTopk, bool paddedMode,
                                                            aclTensor* out, uint64_t* workspaceSize,
                                                            aclOpExecutor** executor) {
  namespace shim = mpg::acl_host::detail;
  return shim::plan("aclnnMoeTokenPermuteGradGetWorkspaceSize",
                    {{"permuted_output_grad", permutedOutputGrad},
                     {"sorted_indices", sortedIndices},
                     {"out", out}},
                    workspaceSize, executor, [&](mpg::aclnn::Executor** planned) {
                      return mpg::aclnn::MoeTokenPermuteGradGetWorkspaceSize(
                          shim::view_of(permutedOutputGrad), shim::view_of(sortedIndices), numTopk,
                          paddedMode, shim::view_of(out), workspaceSize, planned);
                    });
}

inline aclnnStatus aclnnMoeTokenPermuteGrad(void* workspace, uint64_t workspaceSize,
                                            aclOpExecutor* executor, aclrtStream /*stream*/) {
  namespace shim = mpg::acl_host::detail;
  return shim::forwarded(
      "aclnnMoeTokenPermuteGrad",
      mpg::aclnn::MoeTokenPermuteGrad(workspace, workspaceSize, shim::executor_of(executor)));
}

}  // extern "C"

#endif  // OP_API_INC_MOE_TOKEN_PERMUTE_GRAD_H_
