// Every error class of docs/contract.md section 4, through both layers: the typed API returns the
// right ErrorCode, the two-phase API 161001 / 161002, both with a message naming the argument,
// value and position; and out (sentinel-filled, guarded on both sides) is never touched.
#include "test_util.hpp"

#include <functional>
#include <sstream>

namespace {

using mpg::ErrorCode;
using mpg::Mode;
using mpg::aclnn::DataType;
using mpg_test::GuardedBuffer;
using mpg_test::GuardedMatrix;

constexpr int64_t kTokens = 4, kTopK = 2, kHidden = 8, kCopies = kTokens * kTopK;

// A valid call to start from: dropless, R = N*K = 8 rows of G, S a permutation of [0, 8).
struct Valid {
  GuardedMatrix<float> grad{kCopies, kHidden};
  GuardedMatrix<float> out{kTokens, kHidden};
  std::vector<int32_t> indices = {3, 0, 7, 1, 2, 6, 5, 4};
  Valid() {
    std::mt19937_64 rng(1);
    mpg_test::fill_random(grad, rng);
  }
};

struct TypedCase {
  const char* name;
  ErrorCode code;
  const char* message;  // a substring the message must contain
  std::function<mpg::Status(Valid&)> call;
};

mpg::Status call_with(mpg::ConstMatrixView<float> grad, const std::vector<int32_t>& s, int64_t topk,
                      Mode mode, mpg::MatrixView<float> out, const mpg::Options& options = {}) {
  return mpg::permute_grad(grad, s, topk, mode, out, options);
}

std::vector<TypedCase> typed_cases() {
  using V = Valid;
  const auto with_index = [](int64_t position, int32_t value) {
    return [position, value](V& v) {
      auto s = v.indices;
      s[static_cast<size_t>(position)] = value;
      return call_with(v.grad.const_view(), s, kTopK, Mode::kDropless, v.out.view());
    };
  };
  return {
      {"NullGradData", ErrorCode::kNullPointer, "permuted_output_grad data is null",
       [](V& v) {
         return call_with({nullptr, kCopies, kHidden}, v.indices, kTopK, Mode::kDropless,
                          v.out.view());
       }},
      {"NullOutData", ErrorCode::kNullPointer, "out data is null",
       [](V& v) {
         return call_with(v.grad.const_view(), v.indices, kTopK, Mode::kDropless,
                          {nullptr, kTokens, kHidden});
       }},
      {"NullIndexData", ErrorCode::kNullPointer, "sorted_indices data is null",
       [](V& v) {
         return mpg::permute_grad<float, int32_t>(v.grad.const_view(), {nullptr, kCopies}, kTopK,
                                                  Mode::kDropless, v.out.view());
       }},
      {"TopKZero", ErrorCode::kInvalidArgument, "num_topk = 0",
       [](V& v) {
         return call_with(v.grad.const_view(), v.indices, 0, Mode::kDropless, v.out.view());
       }},
      {"TopKNegative", ErrorCode::kInvalidArgument, "num_topk = -3",
       [](V& v) {
         return call_with(v.grad.const_view(), v.indices, -3, Mode::kDropless, v.out.view());
       }},
      {"IndicesNotMultipleOfTopK", ErrorCode::kShapeMismatch,
       "sorted_indices has 8 elements, which is not a multiple of num_topk = 3",
       [](V& v) {
         return call_with(v.grad.const_view(), v.indices, 3, Mode::kDropless,
                          {v.out.data(), 2, kHidden});
       }},
      {"OutRowsWrong", ErrorCode::kShapeMismatch, "out has 3 rows but must have N",
       [](V& v) {
         return call_with(v.grad.const_view(), v.indices, kTopK, Mode::kDropless,
                          {v.out.data(), 3, kHidden});
       }},
      {"HiddenMismatch", ErrorCode::kShapeMismatch,
       "out has hidden size 7 but permuted_output_grad has hidden size 8",
       [](V& v) {
         return call_with(v.grad.const_view(), v.indices, kTopK, Mode::kDropless,
                          {v.out.data(), kTokens, 7, kHidden});
       }},
      {"DroplessMoreRowsThanCopies", ErrorCode::kShapeMismatch,
       "permuted_output_grad has 9 rows, more than N * num_topk = 8",
       [](V& v) {
         GuardedMatrix<float> nine_rows(9, kHidden);
         return call_with(nine_rows.const_view(), v.indices, kTopK, Mode::kDropless, v.out.view());
       }},
      {"NegativeRows", ErrorCode::kShapeMismatch, "permuted_output_grad has shape [-1, 8]",
       [](V& v) {
         return call_with({v.grad.data(), -1, kHidden}, v.indices, kTopK, Mode::kDropless,
                          v.out.view());
       }},
      {"RowStrideBelowRowLength", ErrorCode::kInvalidArgument,
       "permuted_output_grad row stride 4 is smaller than its row length 8",
       [](V& v) {
         return call_with({v.grad.data(), kCopies, kHidden, 4}, v.indices, kTopK, Mode::kDropless,
                          v.out.view());
       }},
      {"DroplessIndexOutOfRange", ErrorCode::kIndexOutOfRange,
       "sorted_indices[5] = 99 is out of range [0, 8)", with_index(5, 99)},
      {"DroplessMinusOne", ErrorCode::kIndexOutOfRange,
       "sorted_indices[2] = -1 is out of range [0, 8)", with_index(2, -1)},
      {"DroplessDuplicate", ErrorCode::kDuplicateIndex,
       "sorted_indices[7] = 0 duplicates sorted_indices[1]", with_index(7, 0)},
      {"PaddedIndexOutOfRange", ErrorCode::kIndexOutOfRange,
       "sorted_indices[3] = 8 is out of range [-1, 8)",
       [](V& v) {
         const std::vector<int32_t> s = {0, -1, 5, 8, 2, 3, -1, 1};
         return call_with(v.grad.const_view(), s, kTopK, Mode::kPadded, v.out.view());
       }},
      {"PaddedMinusTwo", ErrorCode::kIndexOutOfRange,
       "sorted_indices[1] = -2 is out of range [-1, 8)",
       [](V& v) {
         const std::vector<int32_t> s = {0, -2, 5, 7, 2, 3, -1, 1};
         return call_with(v.grad.const_view(), s, kTopK, Mode::kPadded, v.out.view());
       }},
      {"PaddedDuplicate", ErrorCode::kDuplicateIndex,
       "sorted_indices[4] = 5 duplicates sorted_indices[2]",
       [](V& v) {
         // -1 may repeat; 5 may not.
         const std::vector<int32_t> s = {0, -1, 5, -1, 5, 3, -1, 1};
         return call_with(v.grad.const_view(), s, kTopK, Mode::kPadded, v.out.view());
       }},
      {"Int64BeyondInt32Dropless", ErrorCode::kIndexOutOfRange,
       "sorted_indices[4] = 4294967297 is out of range [0, 8)",
       [](V& v) {
         // Truncated to 32 bits this would be 1, a duplicate: the full value must be checked.
         const std::vector<int64_t> s = {3, 0, 7, 2, (int64_t{1} << 32) + 1, 6, 5, 4};
         return mpg::permute_grad(v.grad.const_view(), s, kTopK, Mode::kDropless, v.out.view());
       }},
      {"Int64BeyondInt32Padded", ErrorCode::kIndexOutOfRange,
       "sorted_indices[0] = -4294967295 is out of range [-1, 8)",
       [](V& v) {
         const std::vector<int64_t> s = {-(int64_t{1} << 32) + 1, -1, 5, 7, 2, 3, -1, 1};
         return mpg::permute_grad(v.grad.const_view(), s, kTopK, Mode::kPadded, v.out.view());
       }},
      {"OutOverlapsGrad", ErrorCode::kOverlap, "out overlaps permuted_output_grad",
       [](V& v) {
         // out is rows 2..5 of G: the result would clobber rows still to be read.
         return call_with(v.grad.const_view(), v.indices, kTopK, Mode::kDropless,
                          {v.grad.data() + 2 * kHidden, kTokens, kHidden});
       }},
      {"NegativeThreads", ErrorCode::kInvalidArgument, "num_threads = -1",
       [](V& v) {
         mpg::Options o;
         o.num_threads = -1;
         return call_with(v.grad.const_view(), v.indices, kTopK, Mode::kDropless, v.out.view(), o);
       }},
  };
}

class TypedErrors : public ::testing::TestWithParam<size_t> {};

TEST_P(TypedErrors, CodeMessageAndOutUntouched) {
  const TypedCase c = typed_cases()[GetParam()];
  Valid v;
  const GuardedMatrix<float> grad_before = v.grad;
  const mpg::Status s = c.call(v);
  EXPECT_EQ(s.code(), c.code) << mpg::name_of(s.code()) << ": " << s.message();
  EXPECT_NE(s.message().find(c.message), std::string::npos)
      << "message: \"" << s.message() << "\"\nexpected to contain: \"" << c.message << "\"";
  EXPECT_TRUE(v.out.payload_untouched());
  EXPECT_TRUE(v.out.guards_intact());
  EXPECT_TRUE(v.grad.same_bytes(grad_before));  // G is never written either
  EXPECT_TRUE(v.grad.guards_intact());
}

INSTANTIATE_TEST_SUITE_P(Typed, TypedErrors, ::testing::Range(size_t{0}, typed_cases().size()),
                         [](const auto& info) { return typed_cases()[info.param].name; });

// out overlapping S: both live in one guarded buffer, S in its first 32 bytes.
TEST(TypedErrors, OutOverlapsIndices) {
  Valid v;
  GuardedBuffer<float> shared(64);
  std::memcpy(shared.data(), v.indices.data(), v.indices.size() * sizeof(int32_t));
  const auto* s = reinterpret_cast<const int32_t*>(shared.data());
  std::vector<uint8_t> before(shared.size_bytes());
  std::memcpy(before.data(), shared.data(), before.size());
  const mpg::Status status =
      mpg::permute_grad(v.grad.const_view(), mpg::IndexView(s, kCopies), kTopK, Mode::kDropless,
                        mpg::MatrixView(shared.data() + 4, kTokens, kHidden));
  EXPECT_EQ(status.code(), ErrorCode::kOverlap) << status.message();
  EXPECT_NE(status.message().find("out overlaps sorted_indices"), std::string::npos)
      << status.message();
  EXPECT_EQ(std::memcmp(before.data(), shared.data(), before.size()), 0);
  EXPECT_TRUE(shared.guards_intact());
}

// Every ISA except portable, masked in turn (as if the CPU lacked it): forcing it is refused.
TEST(TypedErrors, ForcedIsaTheCpuLacks) {
  int checked = 0;
  for (const mpg::Isa isa : mpg_test::kernel_table_isas()) {
    if (isa == mpg::Isa::kPortable) continue;
    const mpg_test::ScopedDisabledIsas masked(mpg::detail::isa_bit(isa));
    Valid v;
    mpg::Options o;
    o.isa = isa;
    const mpg::Status s =
        call_with(v.grad.const_view(), v.indices, kTopK, Mode::kDropless, v.out.view(), o);
    EXPECT_EQ(s.code(), ErrorCode::kUnsupportedIsa) << s.message();
    EXPECT_NE(s.message().find(mpg::name_of(isa)), std::string::npos) << s.message();
    EXPECT_TRUE(v.out.payload_untouched());
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "this build has only the portable kernel set";
}

// ---------------------------------------------------------------------------------------------
// The two-phase API.

struct AclnnCall {
  Valid v;
  std::vector<int64_t> grad_dims = {kCopies, kHidden};
  std::vector<int64_t> index_dims = {kCopies};
  std::vector<int64_t> out_dims = {kTokens, kHidden};
  DataType grad_dtype = DataType::kFloat;
  DataType index_dtype = DataType::kInt32;
  DataType out_dtype = DataType::kFloat;
  void* grad_data = v.grad.data();
  void* index_data = v.indices.data();
  void* out_data = v.out.data();
  int64_t topk = kTopK;
  bool padded = false;
  bool no_grad_tensor = false, no_index_tensor = false, no_out_tensor = false;
  bool no_workspace_size = false, no_executor = false;
  enum class Workspace { kAsked, kOneTooFew, kNullButAsked } workspace_kind = Workspace::kAsked;

  struct Result {
    int phase = 0;  // where it failed: 1 or 2 (0: it did not)
    int32_t status = 0;
    std::string message;
  };

  Result run() {
    using namespace mpg::aclnn;
    const auto make = [](bool skip, const std::vector<int64_t>& dims, DataType dtype,
                         void* data) -> Tensor* {
      return skip ? nullptr : CreateTensor(dims.data(), dims.size(), dtype, nullptr, 0, data);
    };
    Tensor* grad = make(no_grad_tensor, grad_dims, grad_dtype, grad_data);
    Tensor* index = make(no_index_tensor, index_dims, index_dtype, index_data);
    Tensor* out = make(no_out_tensor, out_dims, out_dtype, out_data);
    uint64_t workspace_size = 0;
    Executor* executor = reinterpret_cast<Executor*>(uintptr_t{0x10});  // must be reset
    Result r;
    r.status = MoeTokenPermuteGradGetWorkspaceSize(grad, index, topk, padded, out,
                                                   no_workspace_size ? nullptr : &workspace_size,
                                                   no_executor ? nullptr : &executor);
    DestroyTensor(grad);
    DestroyTensor(index);
    DestroyTensor(out);
    if (r.status != kSuccess) {
      r.phase = 1;
      r.message = GetLastErrorMessage();
      if (!no_executor) {
        EXPECT_EQ(executor, nullptr) << "phase one failed but set an executor";
      }
      return r;
    }
    std::vector<uint8_t> workspace(workspace_size + 1);
    switch (workspace_kind) {
      case Workspace::kAsked: break;
      case Workspace::kOneTooFew: --workspace_size; break;
      case Workspace::kNullButAsked: workspace.clear(); break;
    }
    r.status = MoeTokenPermuteGrad(workspace.empty() ? nullptr : workspace.data(), workspace_size,
                                   executor);
    if (r.status != kSuccess) {
      r.phase = 2;
      r.message = GetLastErrorMessage();
      // Consumed even though it failed: a second run is refused (without touching freed memory).
      EXPECT_EQ(MoeTokenPermuteGrad(workspace.data(), workspace_size, executor), kErrParamInvalid);
    }
    return r;
  }
};

struct AclnnCase {
  const char* name;
  int phase;
  int32_t status;
  const char* message;
  std::function<void(AclnnCall&)> setup;
};

std::vector<AclnnCase> aclnn_cases() {
  using C = AclnnCall;
  constexpr int32_t kNull = mpg::aclnn::kErrParamNullptr;
  constexpr int32_t kInvalid = mpg::aclnn::kErrParamInvalid;
  const auto set_index = [](size_t position, int32_t value) {
    return [position, value](C& c) { c.v.indices[position] = value; };
  };
  return {
      {"NullGradTensor", 1, kNull, "permuted_output_grad is null",
       [](C& c) { c.no_grad_tensor = true; }},
      {"NullIndexTensor", 1, kNull, "sorted_indices is null",
       [](C& c) { c.no_index_tensor = true; }},
      {"NullOutTensor", 1, kNull, "out is null", [](C& c) { c.no_out_tensor = true; }},
      {"NullGradData", 1, kNull, "permuted_output_grad data is null",
       [](C& c) { c.grad_data = nullptr; }},
      {"NullIndexData", 1, kNull, "sorted_indices data is null",
       [](C& c) { c.index_data = nullptr; }},
      {"NullOutData", 1, kNull, "out data is null", [](C& c) { c.out_data = nullptr; }},
      {"NullWorkspaceSizeOut", 1, kNull, "workspace_size is null",
       [](C& c) { c.no_workspace_size = true; }},
      {"NullExecutorOut", 1, kNull, "executor is null", [](C& c) { c.no_executor = true; }},
      {"GradDtypeInt32", 1, kInvalid, "permuted_output_grad dtype 3 is not supported",
       [](C& c) { c.grad_dtype = c.out_dtype = DataType::kInt32; }},
      {"GradDtypeInt64", 1, kInvalid, "permuted_output_grad dtype 9 is not supported",
       [](C& c) { c.grad_dtype = c.out_dtype = DataType::kInt64; }},
      // int8 is a token dtype for copying ops only: the arithmetic ops refuse it.
      {"GradDtypeInt8", 1, kInvalid,
       "permuted_output_grad dtype 2 is not supported: must be float32 (0), float16 (1) or "
       "bfloat16 (27)",
       [](C& c) { c.grad_dtype = c.out_dtype = DataType::kInt8; }},
      {"GradDtypeUnknown", 1, kInvalid, "permuted_output_grad dtype 5 is not supported",
       [](C& c) { c.grad_dtype = c.out_dtype = static_cast<DataType>(5); }},
      {"OutDtypeDiffers", 1, kInvalid, "out dtype 27 differs from permuted_output_grad dtype 0",
       [](C& c) { c.out_dtype = DataType::kBFloat16; }},
      {"IndexDtypeInt8", 1, kInvalid,
       "sorted_indices dtype 2 is not supported: must be int32 (3) or int64 (9)",
       [](C& c) { c.index_dtype = DataType::kInt8; }},
      {"IndexDtypeFloat", 1, kInvalid, "sorted_indices dtype 0 is not supported",
       [](C& c) { c.index_dtype = DataType::kFloat; }},
      {"GradRank1", 1, kInvalid, "permuted_output_grad has rank 1",
       [](C& c) { c.grad_dims = {kCopies * kHidden}; }},
      {"GradRank3Dropless", 1, kInvalid, "permuted_output_grad has rank 3",
       [](C& c) {
         c.grad_dims = {2, 4, kHidden};
       }},
      {"OutRank3", 1, kInvalid, "out has rank 3",
       [](C& c) {
         c.out_dims = {2, 2, kHidden};
       }},
      {"IndexRank2", 1, kInvalid, "sorted_indices has rank 2",
       [](C& c) {
         c.index_dims = {kTokens, kTopK};
       }},
      {"TopKZero", 1, kInvalid, "num_topk = 0", [](C& c) { c.topk = 0; }},
      {"IndicesNotMultipleOfTopK", 1, kInvalid, "not a multiple of num_topk = 3",
       [](C& c) { c.topk = 3; }},
      {"OutRowsWrong", 1, kInvalid, "out has 3 rows",
       [](C& c) {
         c.out_dims = {3, kHidden};
       }},
      {"HiddenMismatch", 1, kInvalid, "out has hidden size 7",
       [](C& c) {
         c.out_dims = {kTokens, 7};
       }},
      {"DroplessMoreRowsThanCopies", 1, kInvalid, "has 9 rows, more than N * num_topk = 8",
       [](C& c) {
         c.grad_dims = {9, kHidden};
       }},
      {"OutOverlapsGrad", 1, kInvalid, "out overlaps permuted_output_grad",
       [](C& c) { c.out_data = c.v.grad.data() + kHidden; }},
      {"DroplessIndexOutOfRange", 2, kInvalid, "sorted_indices[5] = 99 is out of range [0, 8)",
       set_index(5, 99)},
      {"DroplessMinusOne", 2, kInvalid, "sorted_indices[2] = -1", set_index(2, -1)},
      {"DroplessDuplicate", 2, kInvalid, "sorted_indices[7] = 0 duplicates sorted_indices[1]",
       set_index(7, 0)},
      {"PaddedIndexOutOfRange", 2, kInvalid, "sorted_indices[3] = 8 is out of range [-1, 8)",
       [](C& c) {
         c.padded = true;
         c.grad_dims = {2, 4, kHidden};  // [E, C, H]
         c.v.indices = {0, -1, 5, 8, 2, 3, -1, 1};
       }},
      {"PaddedDuplicate", 2, kInvalid, "sorted_indices[4] = 5 duplicates sorted_indices[2]",
       [](C& c) {
         c.padded = true;
         c.v.indices = {0, -1, 5, -1, 5, 3, -1, 1};
       }},
      {"WorkspaceOneByteShort", 2, kInvalid, "is smaller than the 1 bytes",
       [](C& c) { c.workspace_kind = C::Workspace::kOneTooFew; }},
      {"WorkspaceNullButAsked", 2, kInvalid, "workspace is null",
       [](C& c) { c.workspace_kind = C::Workspace::kNullButAsked; }},
  };
}

class AclnnErrors : public ::testing::TestWithParam<size_t> {};

TEST_P(AclnnErrors, StatusMessageAndOutUntouched) {
  const AclnnCase c = aclnn_cases()[GetParam()];
  AclnnCall call;
  c.setup(call);
  // Re-point the index tensor at the (possibly replaced) vector.
  if (call.index_data != nullptr) call.index_data = call.v.indices.data();
  const AclnnCall::Result r = call.run();
  EXPECT_EQ(r.phase, c.phase) << r.message;
  EXPECT_EQ(r.status, c.status) << r.message;
  EXPECT_NE(r.message.find(c.message), std::string::npos)
      << "message: \"" << r.message << "\"\nexpected to contain: \"" << c.message << "\"";
  EXPECT_TRUE(call.v.out.payload_untouched());
  EXPECT_TRUE(call.v.out.guards_intact());
}

INSTANTIATE_TEST_SUITE_P(Aclnn, AclnnErrors, ::testing::Range(size_t{0}, aclnn_cases().size()),
                         [](const auto& info) { return aclnn_cases()[info.param].name; });

TEST(AclnnErrors, Int64IndexBeyondInt32) {
  AclnnCall call;
  std::vector<int64_t> wide = {3, 0, 7, 2, (int64_t{1} << 32) + 1, 6, 5, 4};
  call.index_dtype = DataType::kInt64;
  call.index_data = wide.data();
  const AclnnCall::Result r = call.run();
  EXPECT_EQ(r.phase, 2);
  EXPECT_EQ(r.status, mpg::aclnn::kErrParamInvalid);
  EXPECT_NE(r.message.find("sorted_indices[4] = 4294967297"), std::string::npos) << r.message;
  EXPECT_TRUE(call.v.out.payload_untouched());
  EXPECT_TRUE(call.v.out.guards_intact());
}

TEST(AclnnErrors, OutOverlapsIndices) {
  AclnnCall call;
  GuardedBuffer<float> shared(64);
  std::memcpy(shared.data(), call.v.indices.data(), kCopies * sizeof(int32_t));
  call.index_data = shared.data();
  call.out_data = shared.data() + 4;
  const AclnnCall::Result r = call.run();
  EXPECT_EQ(r.phase, 1);
  EXPECT_EQ(r.status, mpg::aclnn::kErrParamInvalid);
  EXPECT_NE(r.message.find("out overlaps sorted_indices"), std::string::npos) << r.message;
  EXPECT_TRUE(shared.guards_intact());
}

// A padded G far wider than the indices (2^20 rows, 6 indices) checks duplicates with a sorted
// copy instead of a 128 KiB bitmap; errors and the workspace size must follow the same rules.
TEST(AclnnErrors, WideGradChecksDuplicatesWithoutABitmap) {
  constexpr int64_t kRows = int64_t{1} << 20;
  std::vector<float> grad(kRows, 1.0f);
  const std::vector<int32_t> duplicated = {-1, 900000, 5, 12, 900000, 5};
  GuardedBuffer<float> out(3);
  mpg::Status s = mpg::permute_grad(mpg::MatrixView(grad.data(), kRows, 1), duplicated, 2,
                                    Mode::kPadded, mpg::MatrixView(out.data(), 3, 1));
  EXPECT_EQ(s.code(), ErrorCode::kDuplicateIndex);
  EXPECT_NE(s.message().find("sorted_indices[4] = 900000 duplicates sorted_indices[1]"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(out.payload_untouched());
  EXPECT_TRUE(out.guards_intact());

  const int64_t grad_dims[2] = {kRows, 1}, index_dims[1] = {6}, out_dims[2] = {3, 1};
  const std::vector<int32_t> distinct = {-1, 900000, 5, 12, kRows - 1, -1};
  auto* g = mpg::aclnn::CreateTensor(grad_dims, 2, DataType::kFloat, nullptr, 0, grad.data());
  auto* i = mpg::aclnn::CreateTensor(index_dims, 1, DataType::kInt32, nullptr, 0,
                                     const_cast<int32_t*>(distinct.data()));
  auto* o = mpg::aclnn::CreateTensor(out_dims, 2, DataType::kFloat, nullptr, 0, out.data());
  uint64_t workspace_size = 0;
  mpg::aclnn::Executor* executor = nullptr;
  ASSERT_EQ(
      mpg::aclnn::MoeTokenPermuteGradGetWorkspaceSize(g, i, 2, true, o, &workspace_size, &executor),
      mpg::aclnn::kSuccess);
  EXPECT_LT(workspace_size, uint64_t{1} << 10);  // not kRows / 8 = 128 KiB
  std::vector<uint8_t> workspace(workspace_size + 1);
  // An odd address: the sorted copy must align itself inside any workspace.
  ASSERT_EQ(mpg::aclnn::MoeTokenPermuteGrad(workspace.data() + 1, workspace_size, executor),
            mpg::aclnn::kSuccess)
      << mpg::aclnn::GetLastErrorMessage();
  EXPECT_EQ(out.data()[0], 1.0f);  // copy 0 dropped, copy 1 kept
  EXPECT_EQ(out.data()[1], 2.0f);
  EXPECT_EQ(out.data()[2], 1.0f);
  mpg::aclnn::DestroyTensor(g);
  mpg::aclnn::DestroyTensor(i);
  mpg::aclnn::DestroyTensor(o);
}

TEST(AclnnErrors, NullExecutorInPhaseTwo) {
  uint8_t workspace[8];
  EXPECT_EQ(mpg::aclnn::MoeTokenPermuteGrad(workspace, sizeof workspace, nullptr),
            mpg::aclnn::kErrParamNullptr);
  EXPECT_NE(std::string(mpg::aclnn::GetLastErrorMessage()).find("executor is null"),
            std::string::npos);
}

TEST(AclnnErrors, ReusedExecutorIsRefused) {
  using namespace mpg::aclnn;
  Valid v;
  const int64_t grad_dims[] = {kCopies, kHidden}, index_dims[] = {kCopies},
                out_dims[] = {kTokens, kHidden};
  Tensor* grad = CreateTensor(grad_dims, 2, DataType::kFloat, nullptr, 0, v.grad.data());
  Tensor* index = CreateTensor(index_dims, 1, DataType::kInt32, nullptr, 0, v.indices.data());
  Tensor* out = CreateTensor(out_dims, 2, DataType::kFloat, nullptr, 0, v.out.data());
  uint64_t size = 0;
  Executor* executor = nullptr;
  ASSERT_EQ(MoeTokenPermuteGradGetWorkspaceSize(grad, index, kTopK, false, out, &size, &executor),
            kSuccess);
  std::vector<uint8_t> workspace(size);
  ASSERT_EQ(MoeTokenPermuteGrad(workspace.data(), size, executor), kSuccess);
  v.out.buffer().fill_sentinel();
  EXPECT_EQ(MoeTokenPermuteGrad(workspace.data(), size, executor), kErrParamInvalid);
  EXPECT_NE(std::string(GetLastErrorMessage()).find("already used"), std::string::npos)
      << GetLastErrorMessage();
  EXPECT_TRUE(v.out.payload_untouched());
  DestroyTensor(grad);
  DestroyTensor(index);
  DestroyTensor(out);
}

// Phase two of one op refuses an executor made by another op's phase one, and frees it.
TEST(AclnnErrors, ExecutorOfAnotherOpIsRefused) {
  using namespace mpg::aclnn;
  uint64_t size = 0;
  Executor* executor = nullptr;
  bool ran = false;
  ASSERT_EQ(detail::plan(
                "SomeOtherOp", 0, {}, [&ran](uint8_t*) { return ran = true, mpg::Status(); }, &size,
                &executor),
            kSuccess);
  EXPECT_EQ(MoeTokenPermuteGrad(nullptr, 0, executor), kErrParamInvalid);
  EXPECT_STREQ(GetLastErrorMessage(),
               "executor was returned by SomeOtherOpGetWorkspaceSize, not by "
               "MoeTokenPermuteGradGetWorkspaceSize (it is consumed all the same)");
  EXPECT_FALSE(ran);
  EXPECT_EQ(MoeTokenPermuteGrad(nullptr, 0, executor), kErrParamInvalid);  // consumed
  EXPECT_NE(std::string(GetLastErrorMessage()).find("already used"), std::string::npos);
}

TEST(StatusText, ToStringAndStreamGiveCodeNameAndMessage) {
  const mpg::Status ok;
  EXPECT_EQ(ok.to_string(), "ok");
  const mpg::Status bad(ErrorCode::kIndexOutOfRange,
                        "sorted_indices[3] = 9 is out of range [0, 8)");
  EXPECT_EQ(bad.to_string(), "index out of range: sorted_indices[3] = 9 is out of range [0, 8)");
  std::ostringstream os;
  os << bad;
  EXPECT_EQ(os.str(), bad.to_string());
}

TEST(IntArrays, CopyTheirValuesAndRefuseNull) {
  using namespace mpg::aclnn;
  std::vector<int64_t> values = {4, 7168};
  const IntArray* array = CreateIntArray(values.data(), values.size());
  ASSERT_NE(array, nullptr);
  values[0] = -1;  // the array holds its own copy
  EXPECT_EQ(array->values(), (std::vector<int64_t>{4, 7168}));
  EXPECT_EQ(array->size(), 2u);
  DestroyIntArray(array);
  const IntArray* empty = CreateIntArray(nullptr, 0);
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->size(), 0u);
  DestroyIntArray(empty);
  EXPECT_EQ(CreateIntArray(nullptr, 3), nullptr);
  EXPECT_STREQ(GetLastErrorMessage(), "CreateIntArray: values is null");
}

// The dtype table: every row agrees with the free functions and the aclnn codes.
TEST(DTypeTable, RowsDriveNamesSizesAndCodes) {
  EXPECT_STREQ(mpg::name_of(mpg::DType::kInt8), "int8");
  EXPECT_EQ(mpg::size_of(mpg::DType::kInt8), 1);
  EXPECT_EQ(mpg::size_of(mpg::DType::kBFloat16), 2);
  EXPECT_EQ(mpg::size_of(mpg::IndexType::kInt64), 8);
  EXPECT_TRUE(mpg::is_arithmetic(mpg::DType::kFloat16));
  EXPECT_FALSE(mpg::is_arithmetic(mpg::DType::kInt8));
  EXPECT_FALSE(mpg::is_valid(static_cast<mpg::DType>(17)));
  EXPECT_STREQ(mpg::name_of(static_cast<mpg::DType>(17)), "unknown");
  EXPECT_EQ(mpg::size_of(static_cast<mpg::DType>(17)), 0);
  static_assert(mpg::kIsElement<mpg::bfloat16> && !mpg::kIsElement<int8_t>);
  static_assert(mpg::kIsToken<int8_t> && !mpg::kIsToken<double>);
  mpg::DType dtype{};
  EXPECT_TRUE(mpg::aclnn::to_dtype(mpg::aclnn::DataType::kInt8, &dtype));
  EXPECT_EQ(dtype, mpg::DType::kInt8);
  EXPECT_FALSE(mpg::aclnn::to_dtype(mpg::aclnn::DataType::kInt32, &dtype));
  mpg::IndexType index_type{};
  EXPECT_TRUE(mpg::aclnn::to_index_type(mpg::aclnn::DataType::kInt64, &index_type));
  EXPECT_EQ(index_type, mpg::IndexType::kInt64);
  EXPECT_EQ(mpg::aclnn::size_of(mpg::aclnn::DataType::kInt8), 1);
  EXPECT_EQ(mpg::aclnn::size_of(static_cast<mpg::aclnn::DataType>(5)), 0);
}

}  // namespace
