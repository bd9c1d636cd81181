// A consumer of mpg::acl_host: a device-style program (ACL headers only) run on the host. One
// token, top-2, dropless: out = row 1 + row 0 of G, worked by hand.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_permute_grad.h"

int main() {
  aclrtStream stream = nullptr;
  if (aclInit(nullptr) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS ||
      aclrtCreateStream(&stream) != ACL_SUCCESS) {
    return 1;
  }
  std::vector<float> grad = {1, 10, 2, 20};
  std::vector<int32_t> indices = {1, 0};
  std::vector<float> out = {0, 0};
  const int64_t g_dims[] = {2, 2}, s_dims[] = {2}, o_dims[] = {1, 2};
  const int64_t g_strides[] = {2, 1}, s_strides[] = {1}, o_strides[] = {2, 1};
  aclTensor* g =
      aclCreateTensor(g_dims, 2, ACL_FLOAT, g_strides, 0, ACL_FORMAT_ND, g_dims, 2, grad.data());
  aclTensor* s =
      aclCreateTensor(s_dims, 1, ACL_INT32, s_strides, 0, ACL_FORMAT_ND, s_dims, 1, indices.data());
  aclTensor* o =
      aclCreateTensor(o_dims, 2, ACL_FLOAT, o_strides, 0, ACL_FORMAT_ND, o_dims, 2, out.data());
  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  aclnnStatus status =
      aclnnMoeTokenPermuteGradGetWorkspaceSize(g, s, 2, false, o, &workspace_size, &executor);
  void* workspace = nullptr;
  if (status == ACLNN_SUCCESS && workspace_size > 0) {
    status = aclrtMalloc(&workspace, workspace_size, ACL_MEM_MALLOC_HUGE_FIRST);
  }
  if (status == ACLNN_SUCCESS) {
    status = aclnnMoeTokenPermuteGrad(workspace, workspace_size, executor, stream);
  }
  if (status == ACLNN_SUCCESS) status = aclrtSynchronizeStream(stream);
  aclDestroyTensor(g);
  aclDestroyTensor(s);
  aclDestroyTensor(o);
  if (workspace != nullptr) aclrtFree(workspace);
  aclrtDestroyStream(stream);
  aclrtResetDevice(0);
  aclFinalize();
  if (status != ACLNN_SUCCESS || out != std::vector<float>{3, 30}) {
    const char* message = aclGetRecentErrMsg();
    std::printf("FAILED: status %d (%s), out = {%g, %g}\n", status, message ? message : "", out[0],
                out[1]);
    return 1;
  }
  std::printf("mpg::acl_host consumer: ok\n");
  return 0;
}
