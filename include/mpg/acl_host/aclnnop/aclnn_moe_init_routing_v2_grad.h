// mpg's host shim of aclnnop/aclnn_moe_init_routing_v2_grad.h: the vendor's two
// phases, forwarded to mpg::aclnn::MoeInitRoutingV2Grad* (contract and status
// codes: mpg/aclnn.hpp). Phase two takes the stream for compatibility and
// computes before it returns.
#ifndef OP_API_INC_MOE_INIT_ROUTING_V2_GRAD_H_
#define OP_API_INC_MOE_INIT_ROUTING_V2_GRAD_H_

#include "aclnn/aclnn_base.h"

extern "C" {

inline aclnnStatus aclnnMoeInitRoutingV2GradGetWorkspaceSize(
    const aclTensor* gradExpandedX, const aclTensor* expandedRowIdx, int64_t topK,
    int64_t dropPadMode, int64_t activeNum, const aclTensor* out, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  namespace shim = mpg::acl_host::detail;
  return shim::plan(
      "aclnnMoeInitRoutingV2GradGetWorkspaceSize",
      {{"grad_expanded_x", gradExpandedX}, {"expanded_row_idx", expandedRowIdx}, {"out", out}},
      workspaceSize, executor, [&](mpg::aclnn::Executor** planned) {
        return mpg::aclnn::MoeInitRoutingV2GradGetWorkspaceSize(
            shim::view_of(gradExpandedX), shim::view_of(expandedRowIdx), topK, dropPadMode,
            activeNum, shim::view_of(out), workspaceSize, planned);
      });
}

inline aclnnStatus aclnnMoeInitRoutingV2Grad(void* workspace, uint64_t workspaceSize,
                                             aclOpExecutor* executor, aclrtStream /*stream*/) {
  namespace shim = mpg::acl_host::detail;
  return shim::forwarded(
      "aclnnMoeInitRoutingV2Grad",
      mpg::aclnn::MoeInitRoutingV2Grad(workspace, workspaceSize, shim::executor_of(executor)));
}

}  // extern "C"

#endif  // OP_API_INC_MOE_INIT_ROUTING_V2_GRAD_H_
