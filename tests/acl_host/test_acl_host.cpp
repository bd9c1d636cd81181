// The host shim's own behaviour, call by call: enumerator values, the runtime calls (memory,
// copies, streams, recent error message) and the checks the shim adds in front of mpg::aclnn
// (format, view inside storage). The ops' results: the vendor-style programs beside this file.
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_permute_grad.h"

namespace {

// The vendor's values, which programs and serialized data depend on.
static_assert(ACL_FLOAT == 0 && ACL_FLOAT16 == 1 && ACL_INT8 == 2 && ACL_INT32 == 3 &&
              ACL_INT64 == 9 && ACL_BF16 == 27 && ACL_DOUBLE == 11 && ACL_DT_UNDEFINED == -1);
static_assert(ACL_FORMAT_ND == 2 && ACL_FORMAT_NCHW == 0 && ACL_FORMAT_NHWC == 1 &&
              ACL_FORMAT_FRACTAL_NZ == 29);
static_assert(ACL_MEMCPY_HOST_TO_HOST == 0 && ACL_MEMCPY_HOST_TO_DEVICE == 1 &&
              ACL_MEMCPY_DEVICE_TO_HOST == 2 && ACL_MEMCPY_DEVICE_TO_DEVICE == 3 &&
              ACL_MEMCPY_DEFAULT == 4);
static_assert(ACL_MEM_MALLOC_HUGE_FIRST == 0 && ACL_MEM_MALLOC_HUGE_ONLY == 1 &&
              ACL_MEM_MALLOC_NORMAL_ONLY == 2 && ACL_MEM_MALLOC_HUGE_FIRST_P2P == 3);
static_assert(ACL_SUCCESS == 0 && ACLNN_SUCCESS == 0 && ACLNN_ERR_PARAM_NULLPTR == 161001 &&
              ACLNN_ERR_PARAM_INVALID == 161002);

std::string recent() {
  const char* message = aclGetRecentErrMsg();
  return message == nullptr ? "(null)" : message;
}

TEST(AclRuntime, RecentErrMsgIsNullUntilAFailureThenKeepsTheLastOne) {
  std::thread([] {
    EXPECT_EQ(aclGetRecentErrMsg(), nullptr);
    EXPECT_EQ(aclInit(nullptr), ACL_SUCCESS);
    EXPECT_EQ(aclGetRecentErrMsg(), nullptr);
    EXPECT_EQ(aclrtFree(nullptr), ACL_ERROR_INVALID_PARAM);
    EXPECT_EQ(recent(), "aclrtFree: devPtr is null");
    // A later success keeps the message; a later failure replaces it.
    EXPECT_EQ(aclrtSetDevice(0), ACL_SUCCESS);
    EXPECT_EQ(recent(), "aclrtFree: devPtr is null");
    EXPECT_EQ(aclrtMalloc(nullptr, 4, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    EXPECT_EQ(recent(), "aclrtMalloc: devPtr is null");
  }).join();
  // Per thread: the other thread's failures are not this one's.
  std::thread([] { EXPECT_EQ(aclGetRecentErrMsg(), nullptr); }).join();
}

TEST(AclRuntime, LifecycleCallsSucceed) {
  EXPECT_EQ(aclInit(nullptr), ACL_SUCCESS);
  EXPECT_EQ(aclrtSetDevice(3), ACL_SUCCESS);
  EXPECT_EQ(aclrtResetDevice(3), ACL_SUCCESS);
  EXPECT_EQ(aclFinalize(), ACL_SUCCESS);
}

TEST(AclRuntime, MallocIsAlignedWritableAndFreedOnce) {
  for (size_t size : {size_t{1}, size_t{31}, size_t{32}, size_t{4097}}) {
    void* p = nullptr;
    ASSERT_EQ(aclrtMalloc(&p, size, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << size;
    std::memset(p, 0xAB, size + 32);  // the runtime pads by 32 bytes; so does the shim
    EXPECT_EQ(aclrtFree(p), ACL_SUCCESS);
    EXPECT_EQ(aclrtFree(p), ACL_ERROR_INVALID_PARAM);  // already freed: refused, not UB
    EXPECT_EQ(recent(), "aclrtFree: devPtr was not returned by aclrtMalloc, or was already freed");
  }
  void* p = nullptr;
  EXPECT_EQ(aclrtMalloc(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(recent(), "aclrtMalloc: size is 0: must be > 0");
  EXPECT_EQ(aclrtMalloc(&p, SIZE_MAX - 8, ACL_MEM_MALLOC_HUGE_FIRST),
            ACL_ERROR_RT_MEMORY_ALLOCATION);
  int on_stack = 0;
  EXPECT_EQ(aclrtFree(&on_stack), ACL_ERROR_INVALID_PARAM);
}

TEST(AclRuntime, MemcpyRefusesCountOverDestMaxAndLeavesDstAlone) {
  const std::vector<uint8_t> src = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> dst(8, 0xEE);
  EXPECT_EQ(aclrtMemcpy(dst.data(), 7, src.data(), 8, ACL_MEMCPY_HOST_TO_DEVICE),
            ACL_ERROR_RT_PARAM_INVALID);
  EXPECT_EQ(recent(), "aclrtMemcpy: count = 8 bytes is more than destMax = 7 bytes");
  EXPECT_EQ(dst, std::vector<uint8_t>(8, 0xEE));
  for (aclrtMemcpyKind kind :
       {ACL_MEMCPY_HOST_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST,
        ACL_MEMCPY_DEVICE_TO_DEVICE, ACL_MEMCPY_DEFAULT}) {
    std::fill(dst.begin(), dst.end(), 0);
    EXPECT_EQ(aclrtMemcpy(dst.data(), 8, src.data(), 8, kind), ACL_SUCCESS);
    EXPECT_EQ(dst, src) << kind;
  }
  EXPECT_EQ(aclrtMemcpy(dst.data(), 8, src.data(), 8, ACL_MEMCPY_INNER_DEVICE_TO_DEVICE),
            ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemcpy(nullptr, 8, src.data(), 8, ACL_MEMCPY_HOST_TO_HOST),
            ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtMemcpy(nullptr, 0, nullptr, 0, ACL_MEMCPY_HOST_TO_HOST), ACL_SUCCESS);
}

TEST(AclRuntime, MemsetRefusesCountOverMaxCount) {
  std::vector<uint8_t> buffer(4, 0);
  EXPECT_EQ(aclrtMemset(buffer.data(), 3, 0x5A, 4), ACL_ERROR_RT_PARAM_INVALID);
  EXPECT_EQ(buffer, std::vector<uint8_t>(4, 0));
  EXPECT_EQ(aclrtMemset(buffer.data(), 4, 0x5A, 3), ACL_SUCCESS);
  EXPECT_EQ(buffer, (std::vector<uint8_t>{0x5A, 0x5A, 0x5A, 0}));
}

TEST(AclRuntime, StreamsAreDistinctHandlesDestroyedOnce) {
  aclrtStream a = nullptr;
  aclrtStream b = nullptr;
  ASSERT_EQ(aclrtCreateStream(&a), ACL_SUCCESS);
  ASSERT_EQ(aclrtCreateStream(&b), ACL_SUCCESS);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(aclrtSynchronizeStream(a), ACL_SUCCESS);
  EXPECT_EQ(aclrtSynchronizeStream(nullptr), ACL_SUCCESS);  // the default stream
  EXPECT_EQ(aclrtFree(a), ACL_ERROR_INVALID_PARAM);         // a stream is not memory
  EXPECT_EQ(aclrtDestroyStream(a), ACL_SUCCESS);
  EXPECT_EQ(aclrtDestroyStream(a), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclrtDestroyStream(b), ACL_SUCCESS);
  EXPECT_EQ(aclrtCreateStream(nullptr), ACL_ERROR_INVALID_PARAM);
}

// A small dropless PermuteGrad call whose tensors the tests below vary: G [2, 2], S [2], K = 2,
// out [1, 2], all float32/int32 and ND unless a test says otherwise.
struct PermuteGradCall {
  std::vector<float> grad = {1, 2, 3, 4};
  std::vector<int32_t> indices = {1, 0};
  std::vector<float> out = {-1, -1};
  aclFormat out_format = ACL_FORMAT_ND;
  std::vector<int64_t> out_storage = {2};

  aclTensor* make(std::vector<int64_t> dims, aclDataType dtype, void* data, aclFormat format,
                  const std::vector<int64_t>& storage) {
    return aclCreateTensor(dims.data(), dims.size(), dtype, nullptr, 0, format, storage.data(),
                           storage.size(), data);
  }

  // Runs both phases (the second only if the first succeeded); returns the first failure.
  aclnnStatus run(bool null_grad = false) {
    aclTensor* g = null_grad ? nullptr : make({2, 2}, ACL_FLOAT, grad.data(), ACL_FORMAT_ND, {4});
    aclTensor* s = make({2}, ACL_INT32, indices.data(), ACL_FORMAT_ND, {2});
    aclTensor* o = make({1, 2}, ACL_FLOAT, out.data(), out_format, out_storage);
    uint64_t workspace_size = 0;
    aclOpExecutor* executor = reinterpret_cast<aclOpExecutor*>(&workspace_size);  // not null
    aclnnStatus status =
        aclnnMoeTokenPermuteGradGetWorkspaceSize(g, s, 2, false, o, &workspace_size, &executor);
    aclDestroyTensor(g);
    aclDestroyTensor(s);
    aclDestroyTensor(o);
    if (status != ACLNN_SUCCESS) {
      EXPECT_EQ(executor, nullptr);  // a failed phase one hands out no executor
      return status;
    }
    std::vector<uint8_t> workspace(workspace_size + 1);
    return aclnnMoeTokenPermuteGrad(workspace.data(), workspace_size, executor, nullptr);
  }
};

TEST(AclShim, PermuteGradComputesOnNdTensors) {
  PermuteGradCall call;
  EXPECT_EQ(call.run(), ACLNN_SUCCESS) << recent();
  EXPECT_EQ(call.out, (std::vector<float>{1 + 3, 2 + 4}));
}

TEST(AclShim, OtherFormatsAreRefusedWith161002) {
  for (aclFormat format :
       {ACL_FORMAT_NCHW, ACL_FORMAT_NHWC, ACL_FORMAT_FRACTAL_NZ, ACL_FORMAT_UNDEFINED}) {
    PermuteGradCall call;
    call.out_format = format;
    EXPECT_EQ(call.run(), ACLNN_ERR_PARAM_INVALID);
    EXPECT_EQ(recent(), "aclnnMoeTokenPermuteGradGetWorkspaceSize: out format = " +
                            std::to_string(static_cast<int>(format)) +
                            ": only ACL_FORMAT_ND (2) is computed on the host");
    EXPECT_EQ(call.out, (std::vector<float>{-1, -1}));
  }
}

TEST(AclShim, AViewOutsideItsStorageIsRefused) {
  PermuteGradCall call;
  call.out_storage = {1};  // out's view [1, 2] needs 2 elements
  EXPECT_EQ(call.run(), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(recent(),
            "aclnnMoeTokenPermuteGradGetWorkspaceSize: out view (shape [1, 2], strides [2, 1], "
            "offset 0) reaches element 1, outside its storage of 1 elements (storage dims [1])");
  call.out_storage = {2, 1};  // any storage shape of enough elements will do
  EXPECT_EQ(call.run(), ACLNN_SUCCESS) << recent();
}

TEST(AclShim, ANullTensorIsReportedBeforeTheShimsOwnChecks) {
  PermuteGradCall call;
  call.out_format = ACL_FORMAT_NCHW;
  EXPECT_EQ(call.run(/*null_grad=*/true), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(recent(), "aclnnMoeTokenPermuteGradGetWorkspaceSize: permuted_output_grad is null");
}

TEST(AclShim, ErrorsFromMpgCarryItsMessageAndTheFunction) {
  PermuteGradCall call;
  call.indices = {1, 1};
  EXPECT_EQ(call.run(), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(recent().find("aclnnMoeTokenPermuteGrad: "), std::string::npos) << recent();
  EXPECT_NE(recent().find("sorted_indices"), std::string::npos) << recent();
  EXPECT_EQ(call.out, (std::vector<float>{-1, -1}));
}

TEST(AclShim, AnExecutorRunsOnce) {
  std::vector<float> grad = {1, 2, 3, 4};
  std::vector<int32_t> indices = {0, 1};
  std::vector<float> out = {0, 0};
  const int64_t g_dims[] = {2, 2}, s_dims[] = {2}, o_dims[] = {1, 2};
  aclTensor* g =
      aclCreateTensor(g_dims, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, g_dims, 2, grad.data());
  aclTensor* s =
      aclCreateTensor(s_dims, 1, ACL_INT32, nullptr, 0, ACL_FORMAT_ND, s_dims, 1, indices.data());
  aclTensor* o =
      aclCreateTensor(o_dims, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, o_dims, 2, out.data());
  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  ASSERT_EQ(aclnnMoeTokenPermuteGradGetWorkspaceSize(g, s, 2, false, o, &workspace_size, &executor),
            ACLNN_SUCCESS);
  std::vector<uint8_t> workspace(workspace_size + 1);
  EXPECT_EQ(aclnnMoeTokenPermuteGrad(workspace.data(), workspace_size, executor, nullptr),
            ACLNN_SUCCESS);
  EXPECT_EQ(aclnnMoeTokenPermuteGrad(workspace.data(), workspace_size, executor, nullptr),
            ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(recent().find("already used"), std::string::npos) << recent();
  EXPECT_EQ(aclnnMoeTokenPermuteGrad(nullptr, 0, nullptr, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  aclDestroyTensor(g);
  aclDestroyTensor(s);
  aclDestroyTensor(o);
}

TEST(AclShim, CreateTensorRefusesWhatMpgCannotDescribe) {
  const int64_t dims[] = {2, 2};
  float data[4] = {};
  EXPECT_EQ(aclCreateTensor(dims, 2, ACL_FLOAT, nullptr, -1, ACL_FORMAT_ND, dims, 2, data),
            nullptr);
  EXPECT_NE(recent().find("aclCreateTensor: "), std::string::npos) << recent();
  EXPECT_EQ(aclCreateTensor(dims, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, nullptr, 2, data),
            nullptr);
  EXPECT_EQ(recent(), "aclCreateTensor: storageDims is null");
  EXPECT_EQ(aclDestroyTensor(nullptr), ACLNN_SUCCESS);
}

TEST(AclShim, IntArraysCopyTheirValues) {
  std::vector<int64_t> values = {3, 4};
  aclIntArray* array = aclCreateIntArray(values.data(), values.size());
  ASSERT_NE(array, nullptr);
  values[0] = 99;  // the array holds its own copy, as the vendor's does
  const auto* mpg_array = reinterpret_cast<const mpg::aclnn::IntArray*>(array);
  EXPECT_EQ(mpg_array->values(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(aclDestroyIntArray(array), ACLNN_SUCCESS);
  EXPECT_EQ(aclCreateIntArray(nullptr, 2), nullptr);
  EXPECT_NE(recent().find("aclCreateIntArray: "), std::string::npos) << recent();
  aclIntArray* empty = aclCreateIntArray(nullptr, 0);
  EXPECT_NE(empty, nullptr);
  EXPECT_EQ(aclDestroyIntArray(empty), ACLNN_SUCCESS);
}

TEST(AclShim, ScalarsCopyTheirValue) {
  int32_t k = 4;
  aclScalar* scalar = aclCreateScalar(&k, ACL_INT32);
  ASSERT_NE(scalar, nullptr);
  k = 5;
  int32_t stored = 0;
  std::memcpy(&stored, scalar->bytes.data(), sizeof(stored));
  EXPECT_EQ(stored, 4);
  EXPECT_EQ(aclDestroyScalar(scalar), ACLNN_SUCCESS);
  EXPECT_EQ(aclCreateScalar(nullptr, ACL_INT32), nullptr);
  EXPECT_EQ(aclCreateScalar(&k, ACL_STRING), nullptr);
}

}  // namespace
