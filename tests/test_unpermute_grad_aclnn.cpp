// MoeTokenUnpermuteGrad through the two-phase API: exact results on small integers (checked
// against plain double arithmetic, and against the typed API's bits), and every refusal of
// docs/contract.md sections 4 and 10 with both outputs and the inputs untouched.
#include "test_util.hpp"

#include <string>
#include <vector>

namespace {

using mpg::bfloat16;
using mpg::half;
using mpg_test::bits_of;
using mpg_test::GuardedMatrix;
using namespace mpg::aclnn;  // NOLINT(google-build-using-namespace)

struct GradCall {
  std::vector<int64_t> tokens_dims = {6, 16};
  std::vector<int64_t> grad_dims = {4, 16};
  std::vector<int64_t> probs_dims = {4, 2};
  std::vector<int64_t> dx_dims = {8, 16};
  std::vector<int64_t> dp_dims = {4, 2};
  std::vector<int64_t> restore_shape;
  bool pass_restore_shape = false;
  bool padded_mode = false;
  DataType dtype = DataType::kFloat;
  DataType grad_dtype = DataType::kFloat;
  DataType dx_dtype = DataType::kFloat;
  DataType probs_dtype = DataType::kFloat16;
  DataType dp_dtype = DataType::kFloat16;
  DataType index_dtype = DataType::kInt32;
  void* tokens = nullptr;
  void* grad = nullptr;
  void* indices = nullptr;
  int64_t num_indices = 8;
  void* probs = nullptr;  // null: no probs tensor
  void* dx = nullptr;
  void* dp = nullptr;  // null: no probs_grad_out tensor
  bool null_tokens = false;
  bool null_grad = false;
  bool null_indices = false;
  bool null_dx = false;
  bool workspace_on_grad = false;
  bool run_twice = false;  // phase two again with the consumed executor
};

Tensor* make(const std::vector<int64_t>& dims, DataType dtype, void* data) {
  return CreateTensor(dims.data(), dims.size(), dtype, nullptr, 0, data);
}

aclnnStatus run_two_phase(const GradCall& c) {
  Tensor* x = c.null_tokens ? nullptr : make(c.tokens_dims, c.dtype, c.tokens);
  Tensor* g = c.null_grad ? nullptr : make(c.grad_dims, c.grad_dtype, c.grad);
  Tensor* s = c.null_indices
                  ? nullptr
                  : CreateTensor(&c.num_indices, 1, c.index_dtype, nullptr, 0, c.indices);
  Tensor* p = c.probs == nullptr ? nullptr : make(c.probs_dims, c.probs_dtype, c.probs);
  Tensor* dx = c.null_dx ? nullptr : make(c.dx_dims, c.dx_dtype, c.dx);
  Tensor* dp = c.dp == nullptr ? nullptr : make(c.dp_dims, c.dp_dtype, c.dp);
  IntArray* restore = c.pass_restore_shape
                          ? CreateIntArray(c.restore_shape.data(), c.restore_shape.size())
                          : nullptr;
  uint64_t workspace_size = 0;
  Executor* executor = nullptr;
  const aclnnStatus first = MoeTokenUnpermuteGradGetWorkspaceSize(
      x, g, s, p, c.padded_mode, restore, dx, dp, &workspace_size, &executor);
  for (const Tensor* t : {x, g, s, p, dx, dp}) DestroyTensor(t);
  DestroyIntArray(restore);
  if (first != kSuccess) {
    EXPECT_EQ(executor, nullptr);
    return first;
  }
  EXPECT_STREQ(GetLastErrorMessage(), "");
  std::vector<uint8_t> workspace(workspace_size + 64);
  void* space = c.workspace_on_grad ? c.grad : workspace.data();
  const aclnnStatus second = MoeTokenUnpermuteGrad(space, workspace_size + 64, executor);
  if (c.run_twice && second == kSuccess) {
    return MoeTokenUnpermuteGrad(space, workspace_size + 64, executor);
  }
  return second;
}

// Small integers: every product and every partial sum is exact in fp32, so dX and dP are the
// plain double formulas whatever the order; bf16 tokens, fp16 probs, int64 indices.
TEST(UnpermuteGradAclnn, WithAndWithoutProbsMatchTheFormulasAndTheTypedApi) {
  std::mt19937_64 rng(17);
  const int64_t tokens = 7, topk = 3, hidden = 70;  // 70: a vector tail and the padded tree
  const auto routing = mpg_test::make_routing<int64_t>(rng, mpg::Mode::kDropless, tokens, topk, 5);
  GuardedMatrix<bfloat16> x(routing.grad_rows, hidden), g(tokens, hidden);
  mpg_test::fill_random(x, rng, mpg_test::Values::kSmallIntegers);
  mpg_test::fill_random(g, rng, mpg_test::Values::kSmallIntegers);
  GuardedMatrix<half> probs(tokens, topk), dp(tokens, topk);
  const float weights[] = {0.5f, 1.0f, -2.0f, 0.0f};
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < topk; ++k) probs.at(t, k) = half(weights[(t + k) % 4]);
  }
  GuardedMatrix<bfloat16> dx(tokens * topk, hidden);
  GradCall c;
  c.tokens_dims = {routing.grad_rows, hidden};
  c.grad_dims = {tokens, hidden};
  c.probs_dims = c.dp_dims = {tokens, topk};
  c.dx_dims = {tokens * topk, hidden};
  c.dtype = c.grad_dtype = c.dx_dtype = DataType::kBFloat16;
  c.index_dtype = DataType::kInt64;
  c.tokens = x.data();
  c.grad = g.data();
  c.indices = const_cast<int64_t*>(routing.sorted_indices.data());
  c.num_indices = tokens * topk;
  c.probs = probs.data();
  c.dx = dx.data();
  c.dp = dp.data();
  c.pass_restore_shape = true;
  c.restore_shape = {tokens, hidden};
  ASSERT_EQ(run_two_phase(c), kSuccess) << GetLastErrorMessage();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < topk; ++k) {
      const int64_t row = routing.sorted_indices[t * topk + k];
      const bool kept = row < routing.grad_rows;
      const double p = static_cast<float>(probs.at(t, k));
      double dot = 0;
      for (int64_t h = 0; h < hidden; ++h) {
        const double gh = static_cast<float>(g.at(t, h));
        const double want = kept ? gh * p : 0.0;
        ASSERT_EQ(static_cast<float>(dx.at(row, h)), want) << t << ", " << k << ", " << h;
        if (!kept) {
          ASSERT_EQ(bits_of(dx.at(row, h)), 0) << "a dropped row is +0.0";
        }
        if (kept) dot += static_cast<float>(x.at(row, h)) * gh;
      }
      ASSERT_EQ(bits_of(dp.at(t, k)), bits_of(half(static_cast<float>(dot)))) << t << ", " << k;
    }
  }
  // The typed API gives the same bits.
  GuardedMatrix<bfloat16> dx_typed(tokens * topk, hidden);
  GuardedMatrix<half> dp_typed(tokens, topk);
  ASSERT_TRUE(mpg::unpermute_grad(x.const_view(), g.const_view(),
                                  mpg::IndexView<int64_t>(routing.sorted_indices),
                                  probs.const_view(), dx_typed.view(), dp_typed.view())
                  .ok());
  EXPECT_EQ(mpg_test::first_difference(dx, dx_typed), "");
  EXPECT_EQ(mpg_test::first_difference(dp, dp_typed), "");

  // Without probs: K = 1, g has len(S) rows, dX[S[i]] = g[i] or +0.0.
  GuardedMatrix<bfloat16> g1(tokens * topk, hidden);
  mpg_test::fill_random(g1, rng);
  GuardedMatrix<bfloat16> dx1(tokens * topk, hidden);
  c.grad = g1.data();
  c.grad_dims = {tokens * topk, hidden};
  c.restore_shape = {tokens * topk, hidden};
  c.probs = nullptr;
  c.dp = nullptr;
  c.dx = dx1.data();
  ASSERT_EQ(run_two_phase(c), kSuccess) << GetLastErrorMessage();
  for (int64_t i = 0; i < tokens * topk; ++i) {
    const int64_t row = routing.sorted_indices[i];
    for (int64_t h = 0; h < hidden; ++h) {
      const uint16_t want = row < routing.grad_rows ? bits_of(g1.at(i, h)) : 0;
      ASSERT_EQ(bits_of(dx1.at(row, h)), want) << i << ", " << h;
    }
  }
}

// Errors. Valid base call: X [6, 16] fp32, g [4, 16] fp32, S a permutation of [0, 8), probs
// and probs_grad_out fp16 [4, 2], permuted_tokens_grad_out [8, 16] fp32.
struct ErrorCase {
  const char* name;
  aclnnStatus status;
  const char* message;
  void (*mutate)(GradCall& c);
};

std::vector<ErrorCase> error_cases() {
  return {
      {"NullTokens", kErrParamNullptr, "permuted_tokens is null",
       [](GradCall& c) { c.null_tokens = true; }},
      {"NullGrad", kErrParamNullptr, "unpermuted_tokens_grad is null",
       [](GradCall& c) { c.null_grad = true; }},
      {"NullIndices", kErrParamNullptr, "sorted_indices is null",
       [](GradCall& c) { c.null_indices = true; }},
      {"NullDx", kErrParamNullptr, "permuted_tokens_grad_out is null",
       [](GradCall& c) { c.null_dx = true; }},
      {"ProbsWithoutProbsGrad", kErrParamNullptr, "probs_grad_out is null but probs is given",
       [](GradCall& c) { c.dp = nullptr; }},
      {"ProbsGradWithoutProbs", kErrParamInvalid, "probs_grad_out is given but probs is null",
       [](GradCall& c) { c.probs = nullptr; }},
      {"PaddedMode", kErrParamInvalid, "padded_mode = true is not supported",
       [](GradCall& c) { c.padded_mode = true; }},
      {"TokensDtype", kErrParamInvalid, "permuted_tokens dtype 3 is not supported",
       [](GradCall& c) { c.dtype = DataType::kInt32; }},
      {"GradDtype", kErrParamInvalid, "unpermuted_tokens_grad dtype 1 differs",
       [](GradCall& c) { c.grad_dtype = DataType::kFloat16; }},
      {"DxDtype", kErrParamInvalid, "permuted_tokens_grad_out dtype 27 differs",
       [](GradCall& c) { c.dx_dtype = DataType::kBFloat16; }},
      {"IndexDtype", kErrParamInvalid, "sorted_indices dtype 0 is not supported",
       [](GradCall& c) { c.index_dtype = DataType::kFloat; }},
      {"ProbsDtype", kErrParamInvalid, "probs dtype 2 is not supported",
       [](GradCall& c) { c.probs_dtype = c.dp_dtype = DataType::kInt8; }},
      {"ProbsGradDtype", kErrParamInvalid, "probs_grad_out dtype 0 differs from probs dtype 1",
       [](GradCall& c) { c.dp_dtype = DataType::kFloat; }},
      {"ProbsRank", kErrParamInvalid, "probs has rank 1", [](GradCall& c) { c.probs_dims = {8}; }},
      {"ProbsNotNK", kErrParamInvalid, "sorted_indices has 8 elements but probs [2, 2] needs",
       [](GradCall& c) {
         c.probs_dims = c.dp_dims = {2, 2};
       }},
      {"ProbsGradShape", kErrParamInvalid, "probs_grad_out has shape [4, 1]",
       [](GradCall& c) {
         c.dp_dims = {4, 1};
       }},
      {"GradRows", kErrParamInvalid, "unpermuted_tokens_grad has 3 rows but must have N = 4",
       [](GradCall& c) {
         c.grad_dims = {3, 16};
       }},
      {"TokensHidden", kErrParamInvalid, "permuted_tokens has hidden size 15",
       [](GradCall& c) {
         c.tokens_dims = {6, 15};
       }},
      {"TooManyRows", kErrParamInvalid, "permuted_tokens has 9 rows, more than len",
       [](GradCall& c) {
         c.tokens_dims = {9, 16};
       }},
      {"DxShape", kErrParamInvalid, "permuted_tokens_grad_out has shape [7, 16]",
       [](GradCall& c) {
         c.dx_dims = {7, 16};
       }},
      {"RestoreShape", kErrParamInvalid,
       "restore_shape = [4, 17] does not describe unpermuted_tokens_grad, whose shape is [4, 16]",
       [](GradCall& c) {
         c.pass_restore_shape = true;
         c.restore_shape = {4, 17};
       }},
      {"DxOverTokens", kErrParamInvalid, "permuted_tokens_grad_out overlaps permuted_tokens",
       [](GradCall& c) { c.dx = static_cast<float*>(c.tokens) + 3; }},
      {"DxOverGrad", kErrParamInvalid, "permuted_tokens_grad_out overlaps unpermuted_tokens_grad",
       [](GradCall& c) { c.grad = c.dx; }},  // grad inside dx: dx is the larger one
      {"DxOverIndices", kErrParamInvalid, "permuted_tokens_grad_out overlaps sorted_indices",
       [](GradCall& c) { c.indices = static_cast<float*>(c.dx) + 100; }},
      {"DxOverProbs", kErrParamInvalid, "permuted_tokens_grad_out overlaps probs",
       [](GradCall& c) { c.probs = static_cast<float*>(c.dx) + 127; }},
      {"DpOverProbs", kErrParamInvalid, "probs_grad_out overlaps probs",
       [](GradCall& c) { c.dp = static_cast<half*>(c.probs) + 7; }},
      {"DpOverGrad", kErrParamInvalid, "probs_grad_out overlaps unpermuted_tokens_grad",
       [](GradCall& c) { c.dp = static_cast<float*>(c.grad) + 63; }},
      {"DpOverIndices", kErrParamInvalid, "probs_grad_out overlaps sorted_indices",
       [](GradCall& c) { c.dp = c.indices; }},
      {"DpOverDx", kErrParamInvalid, "permuted_tokens_grad_out overlaps probs_grad_out",
       [](GradCall& c) { c.dp = static_cast<float*>(c.dx) + 127; }},
      {"WorkspaceOverGrad", kErrParamInvalid, "workspace overlaps unpermuted_tokens_grad",
       [](GradCall& c) { c.workspace_on_grad = true; }},
      {"IndexOutOfRange", kErrParamInvalid, "sorted_indices[3] = 8 is out of range [0, 8)",
       [](GradCall& c) { static_cast<int32_t*>(c.indices)[3] = 8; }},
      {"DuplicateIndex", kErrParamInvalid, "sorted_indices[6] = 3 duplicates sorted_indices[0]",
       [](GradCall& c) { static_cast<int32_t*>(c.indices)[6] = 3; }},
  };
}

class UnpermuteGradAclnnErrors : public ::testing::TestWithParam<size_t> {};

TEST_P(UnpermuteGradAclnnErrors, StatusMessageAndEverythingUntouched) {
  const ErrorCase e = error_cases()[GetParam()];
  // One arena per operand kind, big enough that any aliasing a case sets up stays inside it.
  GuardedMatrix<float> tokens(9, 16), grad(4, 16), dx(8, 16);
  GuardedMatrix<half> probs(1, 16), dp(1, 16);
  std::mt19937_64 rng(5);
  mpg_test::fill_random(tokens, rng);
  mpg_test::fill_random(grad, rng);
  mpg_test::fill_random(probs, rng);
  std::vector<int32_t> indices = {3, 0, 7, 2, 1, 6, 5, 4};
  GradCall c;
  c.tokens = tokens.data();
  c.grad = grad.data();
  c.indices = indices.data();
  c.probs = probs.data();
  c.dx = dx.data();
  c.dp = dp.data();
  e.mutate(c);
  const GuardedMatrix<float> tokens_before = tokens, grad_before = grad;
  const GuardedMatrix<half> probs_before = probs;
  const std::vector<int32_t> indices_before = indices;
  const bool dx_is_arena = c.dx == dx.data();
  const bool dp_is_arena = c.dp == dp.data();
  EXPECT_EQ(run_two_phase(c), e.status);
  EXPECT_NE(std::string(GetLastErrorMessage()).find(e.message), std::string::npos)
      << "message: \"" << GetLastErrorMessage() << "\"\nexpected to contain: \"" << e.message
      << "\"";
  if (dx_is_arena) {
    EXPECT_TRUE(dx.payload_untouched());
  }
  if (dp_is_arena) {
    EXPECT_TRUE(dp.payload_untouched());
  }
  EXPECT_TRUE(dx.guards_intact() && dp.guards_intact());
  EXPECT_TRUE(tokens.same_bytes(tokens_before));
  EXPECT_TRUE(grad.same_bytes(grad_before));
  EXPECT_TRUE(probs.same_bytes(probs_before));
  if (c.indices == indices.data()) {
    EXPECT_EQ(indices, indices_before);
  }
}

INSTANTIATE_TEST_SUITE_P(Aclnn, UnpermuteGradAclnnErrors,
                         ::testing::Range<size_t>(0, error_cases().size()), [](const auto& info) {
                           return std::string(error_cases()[info.param].name);
                         });

// An executor runs once; the second run is refused without touching freed memory.
TEST(UnpermuteGradAclnn, ExecutorRunsOnce) {
  GuardedMatrix<float> tokens(6, 16), grad(4, 16), dx(8, 16);
  GuardedMatrix<half> probs(4, 2), dp(4, 2);
  std::mt19937_64 rng(6);
  mpg_test::fill_random(tokens, rng);
  mpg_test::fill_random(grad, rng);
  mpg_test::fill_random(probs, rng);
  std::vector<int32_t> indices = {3, 0, 7, 2, 1, 6, 5, 4};
  GradCall c;
  c.tokens = tokens.data();
  c.grad = grad.data();
  c.indices = indices.data();
  c.probs = probs.data();
  c.dx = dx.data();
  c.dp = dp.data();
  c.run_twice = true;
  EXPECT_EQ(run_two_phase(c), kErrParamInvalid);
  EXPECT_NE(std::string(GetLastErrorMessage()).find("already used"), std::string::npos)
      << GetLastErrorMessage();
}

}  // namespace
