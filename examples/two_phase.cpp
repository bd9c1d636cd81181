// two_phase: the two-phase API step by step, the way the vendor's sample for
// aclnnMoeTokenPermuteGrad walks it, on host memory and a small padded-mode (capacity) case.
//
// It includes only mpg/aclnn.hpp and links nothing; from the repository root, with prog.cpp
// standing for examples/two_phase.cpp:
//   g++ -std=c++17 -O2 -fopenmp -pthread -I include $(pkg-config --cflags eigen3) prog.cpp
#include <cstdint>
#include <cstdio>
#include <vector>

#include "mpg/aclnn.hpp"

namespace acl = mpg::aclnn;

#define CHECK_RET(cond, return_expr) \
  do {                               \
    if (!(cond)) {                   \
      return_expr;                   \
    }                                \
  } while (0)

#define LOG_PRINT(...)        \
  do {                        \
    std::printf(__VA_ARGS__); \
  } while (0)

namespace {

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Describes host data as a contiguous tensor (the vendor's sample also copies it to the device;
// here the data already is where the op runs).
template <class T>
int CreateTensor(std::vector<T>& host_data, const std::vector<int64_t>& shape, acl::DataType dtype,
                 acl::Tensor** tensor) {
  CHECK_RET(static_cast<int64_t>(host_data.size()) == element_count(shape),
            LOG_PRINT("host data does not match its shape\n");
            return 1);
  *tensor = acl::CreateTensor(shape.data(), shape.size(), dtype, nullptr, 0, host_data.data());
  CHECK_RET(*tensor != nullptr, LOG_PRINT("CreateTensor failed: %s\n", acl::GetLastErrorMessage());
            return 1);
  return 0;
}

}  // namespace

int main() {
  // 5 tokens, top-2, 3 experts with capacity 2, hidden size 3.
  const int64_t num_topk = 2;
  const int64_t experts = 3, capacity = 2, hidden = 3, tokens = 5;

  // Routing (expert of each copy): t0 -> {0, 1}, t1 -> {0, 2}, t2 -> {0, 1}, t3 -> {2, 1},
  // t4 -> {0, 1}. Taking copies in (t, k) order, each expert keeps its first 2 in slots 0 and 1
  // at row e*2 + slot; expert 0's third copy (t2, k0) and later ones, and expert 1's third copy
  // (t3, k1) and later ones, exceed capacity and are dropped (-1). Token 4 loses both copies.
  std::vector<int32_t> sorted_indices = {0, 2, 1, 4, -1, 3, 5, -1, -1, -1};
  // permutedOutputGrad [E, C, H]: row r = e*C + c holds (r + 1) + 0.25 * h.
  std::vector<float> grad(static_cast<size_t>(experts * capacity * hidden));
  for (int64_t r = 0; r < experts * capacity; ++r) {
    for (int64_t h = 0; h < hidden; ++h) grad[r * hidden + h] = (r + 1) + 0.25f * h;
  }
  std::vector<float> out(static_cast<size_t>(tokens * hidden), -7.0f);

  // 1. Create the tensors.
  acl::Tensor* grad_tensor = nullptr;
  acl::Tensor* indices_tensor = nullptr;
  acl::Tensor* out_tensor = nullptr;
  int ret = CreateTensor(grad, {experts, capacity, hidden}, acl::DataType::kFloat, &grad_tensor);
  CHECK_RET(ret == 0, return ret);
  ret = CreateTensor(sorted_indices, {tokens * num_topk}, acl::DataType::kInt32, &indices_tensor);
  CHECK_RET(ret == 0, return ret);
  ret = CreateTensor(out, {tokens, hidden}, acl::DataType::kFloat, &out_tensor);
  CHECK_RET(ret == 0, return ret);

  // 2. Phase one: validate shapes and dtypes, size the workspace, get an executor.
  uint64_t workspace_size = 0;
  acl::Executor* executor = nullptr;
  acl::aclnnStatus status = acl::MoeTokenPermuteGradGetWorkspaceSize(
      grad_tensor, indices_tensor, num_topk, /*padded_mode=*/true, out_tensor, &workspace_size,
      &executor);
  CHECK_RET(status == acl::kSuccess,
            LOG_PRINT("MoeTokenPermuteGradGetWorkspaceSize failed. ERROR: %d (%s)\n", status,
                      acl::GetLastErrorMessage());
            return 1);
  LOG_PRINT("phase one: ok, workspace %llu bytes\n",
            static_cast<unsigned long long>(workspace_size));

  // 3. Allocate the workspace it asked for, then phase two: check the indices and compute.
  std::vector<uint8_t> workspace(workspace_size);
  status = acl::MoeTokenPermuteGrad(workspace.data(), workspace_size, executor);
  CHECK_RET(status == acl::kSuccess, LOG_PRINT("MoeTokenPermuteGrad failed. ERROR: %d (%s)\n",
                                               status, acl::GetLastErrorMessage());
            return 1);
  LOG_PRINT("phase two: ok\n");

  // 4. Print the result next to the sums worked out by hand from the routing above.
  const float expected[5][3] = {
      {4.0f, 4.5f, 5.0f},   // rows 0 + 2
      {7.0f, 7.5f, 8.0f},   // rows 1 + 4
      {4.0f, 4.25f, 4.5f},  // row 3 (copy 0 dropped)
      {6.0f, 6.25f, 6.5f},  // row 5 (copy 1 dropped)
      {0.0f, 0.0f, 0.0f},   // both copies dropped
  };
  int mismatches = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    LOG_PRINT("out[%lld] = [", static_cast<long long>(t));
    for (int64_t h = 0; h < hidden; ++h) {
      const float value = out[t * hidden + h];
      LOG_PRINT("%s%g", h ? ", " : "", value);
      mismatches += value != expected[t][h];
    }
    LOG_PRINT("]  (sorted_indices %d, %d)\n", sorted_indices[t * num_topk],
              sorted_indices[t * num_topk + 1]);
  }

  // 5. A bad call: a repeated index is caught in phase two, and out is left as it was.
  sorted_indices[1] = 0;
  const std::vector<float> before = out;
  status = acl::MoeTokenPermuteGradGetWorkspaceSize(grad_tensor, indices_tensor, num_topk, true,
                                                    out_tensor, &workspace_size, &executor);
  if (status == acl::kSuccess) {
    workspace.resize(workspace_size);
    status = acl::MoeTokenPermuteGrad(workspace.data(), workspace_size, executor);
  }
  LOG_PRINT("with sorted_indices[1] = 0: status %d (%s)\n", status, acl::GetLastErrorMessage());
  const bool rejected = status == acl::kErrParamInvalid && out == before;

  // 6. Destroy the tensors.
  acl::DestroyTensor(grad_tensor);
  acl::DestroyTensor(indices_tensor);
  acl::DestroyTensor(out_tensor);

  if (mismatches != 0 || !rejected) {
    LOG_PRINT("FAILED: %d values differ from the hand-worked sums%s\n", mismatches,
              rejected ? "" : "; the bad call was not rejected with 161002");
    return 1;
  }
  LOG_PRINT("all values match the hand-worked sums\n");
  return 0;
}
