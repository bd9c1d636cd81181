// MoeInitRoutingV2Grad (binary-bins order) through both API layers: hand-worked sums that only
// the binary-bins order produces, on every path; drops and signed zeros; the drop-pad modes of
// the two-phase API with docs/contract.md section 8's shape table; every error, with out untouched.
#include "test_util.hpp"

#include <cmath>
#include <map>

namespace {

using mpg::Mode;
using mpg_test::bits_of;
using mpg_test::GuardedMatrix;
using mpg_test::PathCase;

// ---------------------------------------------------------------------------------------------
// Hand-worked orders. Each case is one token with K copies x_0..x_{K-1} (fp32 integers, so every
// rounding below can be checked by hand: fp32 has 24 significant bits, so above 2^24 only even
// integers, above 2^25 only multiples of 4, ..., exist, and ties go to the even significand).
// `binary_bins` is the result of docs/contract.md section 7's binary-bins order; `sequential` that
// of ascending k. For K = 3, 5 and 6 an exhaustive search over every bracketing and operand order
// (3, 105 and 945 sum trees) found no other order giving binary_bins' bits; for K >= 8 the values
// differ from ascending and descending k, and from binary bins with any other bin count B (the bin
// count and the order of the extra evens are what implementations get wrong).

struct OrderCase {
  int64_t topk;
  std::map<int64_t, float> nonzero;  // x_k; all others are +0.0 (kept, adding nothing)
  float binary_bins;
  float sequential;
};

std::vector<OrderCase> order_cases() {
  return {
      // K=3, B=1: (x0 + x2) + x1 = -285154560 + 114526376 = -170628184 -> -170628192 (a multiple
      // of 16 above 2^27). Ascending: (x0 + x1) = -138048168, + x2 = -170628176 -> -170628160.
      {3, {{0, -252574544.f}, {1, 114526376.f}, {2, -32580008.f}}, -170628192.f, -170628160.f},
      // K=5, B=2: ((x0 + x4) + x1) + (x2 + x3) = (-433663024 -> -433663040, + x1 = -449301744 ->
      // -449301760) + 1431270 = -447870490 -> -447870496.
      {5,
       {{0, -39221008.f}, {1, -15638704.f}, {2, -3509036.f}, {3, 4940306.f}, {4, -394442016.f}},
       -447870496.f,
       -447870464.f},
      // K=6, B=2: (((x0 + x4) + x1) + x5) + (x2 + x3) = -332102352 -> -332102336; -742763040 ->
      // -742763008; -770625312 -> -770625280; x2 + x3 = 166543664; sum -604081616 -> -604081600.
      {6,
       {{0, -246668416.f},
        {1, -410660704.f},
        {2, 232240672.f},
        {3, -65697008.f},
        {4, -85433936.f},
        {5, -27862304.f}},
       -604081600.f,
       -604081664.f},
      // K=8, B=4, bins (x0+x1), (x2+x3), (x4+x5), (x6+x7) = 2, 3, 2^25 + 2 -> 2^25 (tie, even),
      // -2^24 + 3; then 2 + 3 = 5 and 2^25 - 2^24 + 3 = 16777219 -> 16777220 (tie, even);
      // then 5 + 16777220 = 16777225 -> 16777224. Ascending k gives 16777228.
      {8,
       {{0, 2.f}, {2, 3.f}, {4, 2.f}, {5, 33554432.f}, {6, -16777216.f}, {7, 3.f}},
       16777224.f,
       16777228.f},
      // K=128, B=64, bin b = x_2b + x_2b+1: bin0 = 2^24 + 1 -> 2^24, bin1 = 2, bin2 = -1,
      // bin32 = -2^24, bin63 = 4. Tree: s=1: bin0 = 2^24 + 2, bin2 = -1 (+ bin3 = 0), bin62 = 4;
      // s=2: bin0 = 2^24 + 1 -> 2^24, bin60 = 4; s=4..16: 4 reaches bin32 = -2^24 + 4;
      // s=32: bin0 = 2^24 - 2^24 + 4 = 4. Ascending k loses both +1s and gives 3.
      {128,
       {{0, 16777216.f}, {1, 1.f}, {2, 1.f}, {3, 1.f}, {5, -1.f}, {64, -16777216.f}, {127, 4.f}},
       4.f,
       3.f},
      // K=130, B=64: the extra evens (j = 128) go into bin (j/2) % 64 = 0 before the odds:
      // bin0 = ((x0 + x128) + x1) + x129 = ((2^24 + 1 -> 2^24) - 2^24) + 1 = 1; bin1 = x2 = 2^24;
      // bin32 = x64 = -2^24; bin63 = x127 = 4. Tree: s=1: bin0 = 1 + 2^24 -> 2^24, bin62 = 4;
      // 4 reaches bin32 = -2^24 + 4; s=32: bin0 = 4. Ascending k gives 6.
      {130,
       {{0, 16777216.f},
        {1, -16777216.f},
        {2, 16777216.f},
        {64, -16777216.f},
        {127, 4.f},
        {128, 1.f},
        {129, 1.f}},
       4.f,
       6.f},
      // K=256: B stays 64 (uncapped it would be 128, which gives 6): bin0 = ((x0 + x128) + x1) +
      // x129 = 1, bin1 = 2^24, bin32 = -2^24, bin63 = x255 = 4; then as for K=130: 4.
      {256,
       {{0, 16777216.f},
        {1, -16777216.f},
        {2, 16777216.f},
        {64, -16777216.f},
        {128, 1.f},
        {129, 1.f},
        {255, 4.f}},
       4.f,
       6.f},
  };
}

// Column h holds x_k * 2^(h % 5 - 2): scaling by a power of two changes no rounding, so every
// column has the same worked sum, scaled. 37 columns: a full vector block and a ragged tail.
constexpr int64_t kOrderHidden = 37;
float column_scale(int64_t h) {
  return std::ldexp(1.0f, static_cast<int>(h % 5) - 2);
}

// G row S[k] holds copy k, with S the reverse permutation: the gather must follow S.
struct OrderInputs {
  GuardedMatrix<float> grad;
  std::vector<int32_t> indices;
};
OrderInputs order_inputs(const OrderCase& c) {
  OrderInputs in{GuardedMatrix<float>(c.topk, kOrderHidden), {}};
  for (int64_t k = 0; k < c.topk; ++k) {
    const int32_t row = static_cast<int32_t>(c.topk - 1 - k);
    in.indices.push_back(row);
    const auto it = c.nonzero.find(k);
    const float x = it == c.nonzero.end() ? 0.0f : it->second;
    for (int64_t h = 0; h < kOrderHidden; ++h) in.grad.at(row, h) = x * column_scale(h);
  }
  return in;
}

class BinaryBinsOrder : public ::testing::TestWithParam<PathCase> {};

TEST_P(BinaryBinsOrder, HandWorkedSumsOnlyThisOrderGives) {
  MPG_SKIP_IF_UNSUPPORTED(GetParam());
  for (const OrderCase& c : order_cases()) {
    SCOPED_TRACE(testing::Message() << "K = " << c.topk);
    const OrderInputs in = order_inputs(c);
    GuardedMatrix<float> out(1, kOrderHidden);
    const mpg::Status s =
        mpg::init_routing_v2_grad(in.grad.const_view(), in.indices, c.topk, Mode::kDropless,
                                  out.view(), mpg_test::path_options(GetParam()));
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t h = 0; h < kOrderHidden; ++h) {
      ASSERT_EQ(bits_of(out.at(0, h)), bits_of(c.binary_bins * column_scale(h))) << "h = " << h;
    }
    ASSERT_TRUE(out.guards_intact());
    // The same data summed in PermuteGrad's ascending order: the cases do tell the orders apart.
    GuardedMatrix<float> sequential(1, kOrderHidden);
    ASSERT_TRUE(mpg_test::run_permute_grad(in.grad, in.indices, c.topk, Mode::kDropless, sequential,
                                           mpg_test::path_options(GetParam()))
                    .ok());
    EXPECT_EQ(bits_of(sequential.at(0, 0)), bits_of(c.sequential * column_scale(0)));
  }
}

// Drops in the binary-bins order: a bin whose leading copy was dropped starts from +0.0, so
// -0.0 added to it gives +0.0, while a bin's kept leading -0.0 is assigned. K=4, B=2:
// out = (x0 + x1) + (x2 + x3). Padded mode; G row 1 = 1.5, row 2 = 0.25, every other row -0.0.
TEST_P(BinaryBinsOrder, DroppedCopiesAndSignedZeros) {
  MPG_SKIP_IF_UNSUPPORTED(GetParam());
  const int64_t hidden = 19;
  GuardedMatrix<float> grad(12, hidden);
  for (int64_t r = 0; r < 12; ++r) {
    const float x = r == 1 ? 1.5f : r == 2 ? 0.25f : -0.0f;
    for (int64_t h = 0; h < hidden; ++h) grad.at(r, h) = x;
  }
  const std::vector<int32_t> indices = {
      0,  3,  -1, -1,  // (-0 + -0) + (+0) = +0: bin 1's copies were both dropped
      -1, 4,  5,  -1,  // (+0 + -0) + (-0) = +0 + -0 = +0
      6,  7,  8,  9,   // (-0 + -0) + (-0 + -0) = -0
      -1, -1, -1, -1,  // nothing kept: +0
      -1, 10, 1,  2,   // (+0 + -0) + (1.5 + 0.25) = 1.75
      11, -1, -1, -1,  // -0 + (+0) = +0, where ascending k would keep the lone -0
  };
  const uint32_t want[] = {0x00000000u, 0x00000000u,    0x80000000u,
                           0x00000000u, bits_of(1.75f), 0x00000000u};
  GuardedMatrix<float> out(6, hidden);
  const mpg::Status s = mpg::init_routing_v2_grad(grad.const_view(), indices, 4, Mode::kPadded,
                                                  out.view(), mpg_test::path_options(GetParam()));
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t t = 0; t < 6; ++t) {
    for (int64_t h = 0; h < hidden; ++h)
      ASSERT_EQ(bits_of(out.at(t, h)), want[t]) << t << ", " << h;
  }
  EXPECT_TRUE(out.guards_intact());
}

std::string path_param_name(const ::testing::TestParamInfo<PathCase>& info) {
  return mpg_test::path_name(info.param);
}

INSTANTIATE_TEST_SUITE_P(Paths, BinaryBinsOrder, ::testing::ValuesIn(mpg_test::kAllPaths),
                         path_param_name);

// ---------------------------------------------------------------------------------------------
// The two-phase API: docs/contract.md section 8's table of (drop_pad_mode, active_num) and G
// shapes. Values are small integers, so every order of adds is exact and the expected sums are
// plain double sums.

using namespace mpg::aclnn;  // NOLINT(google-build-using-namespace)

struct V2GradCall {
  std::vector<int64_t> grad_dims;
  std::vector<int64_t> out_dims;
  int64_t top_k = 2;
  int64_t drop_pad_mode = 0;
  int64_t active_num = 0;
  DataType grad_dtype = DataType::kFloat;
  DataType out_dtype = DataType::kFloat;
  DataType index_dtype = DataType::kInt32;
  void* grad = nullptr;
  void* indices = nullptr;
  int64_t num_indices = 0;
  void* out = nullptr;
  bool null_grad = false;
  bool null_indices = false;
  bool null_out = false;
};

// Phase one and, when it succeeds, phase two with a workspace of the asked size.
aclnnStatus run_v2_grad(const V2GradCall& c, aclnnStatus* phase_one = nullptr) {
  Tensor* g = c.null_grad ? nullptr
                          : CreateTensor(c.grad_dims.data(), c.grad_dims.size(), c.grad_dtype,
                                         nullptr, 0, c.grad);
  const int64_t n = c.num_indices;
  Tensor* s = c.null_indices ? nullptr : CreateTensor(&n, 1, c.index_dtype, nullptr, 0, c.indices);
  Tensor* o = c.null_out ? nullptr
                         : CreateTensor(c.out_dims.data(), c.out_dims.size(), c.out_dtype, nullptr,
                                        0, c.out);
  uint64_t workspace_size = 0;
  Executor* executor = nullptr;
  const aclnnStatus first = MoeInitRoutingV2GradGetWorkspaceSize(
      g, s, c.top_k, c.drop_pad_mode, c.active_num, o, &workspace_size, &executor);
  DestroyTensor(g);
  DestroyTensor(s);
  DestroyTensor(o);
  if (phase_one != nullptr) *phase_one = first;
  if (first != kSuccess) {
    EXPECT_EQ(executor, nullptr);
    return first;
  }
  std::vector<uint8_t> workspace(workspace_size);
  return MoeInitRoutingV2Grad(workspace.data(), workspace_size, executor);
}

// out[t][h] = sum of the kept G rows, as doubles (exact for small integers).
std::vector<double> expected_sums(const GuardedMatrix<float>& grad,
                                  const std::vector<int32_t>& indices, int64_t topk,
                                  int64_t kept_below) {
  const int64_t tokens = static_cast<int64_t>(indices.size()) / topk;
  std::vector<double> want(static_cast<size_t>(tokens * grad.cols()), 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(indices.size()); ++i) {
    const int64_t s = indices[i];
    if (s < 0 || s >= kept_below) continue;
    for (int64_t h = 0; h < grad.cols(); ++h) want[(i / topk) * grad.cols() + h] += grad.at(s, h);
  }
  return want;
}

TEST(InitRoutingV2GradAclnn, DroplessAllActiveGradIsNKbyH) {
  std::mt19937_64 rng(81);
  const int64_t tokens = 5, topk = 3, hidden = 21;
  const auto routing = mpg_test::make_routing<int32_t>(rng, Mode::kDropless, tokens, topk, 6);
  GuardedMatrix<float> grad(tokens * topk, hidden);
  mpg_test::fill_random(grad, rng, mpg_test::Values::kSmallIntegers);
  GuardedMatrix<float> out(tokens, hidden);
  V2GradCall c;
  c.grad_dims = {tokens * topk, hidden};
  c.out_dims = {tokens, hidden};
  c.top_k = topk;
  c.grad = grad.data();
  c.indices = const_cast<int32_t*>(routing.sorted_indices.data());
  c.num_indices = tokens * topk;
  c.out = out.data();
  ASSERT_EQ(run_v2_grad(c), kSuccess) << GetLastErrorMessage();
  const auto want = expected_sums(grad, routing.sorted_indices, topk, tokens * topk);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < hidden; ++h) ASSERT_EQ(out.at(t, h), want[t * hidden + h]);
  }
}

TEST(InitRoutingV2GradAclnn, DroplessActiveNumKeepsRowsBelowIt) {
  std::mt19937_64 rng(82);
  const int64_t tokens = 6, topk = 4, hidden = 33, active = 17;
  const auto routing = mpg_test::make_routing<int32_t>(rng, Mode::kDropless, tokens, topk, 8);
  GuardedMatrix<float> grad(active, hidden);
  mpg_test::fill_random(grad, rng, mpg_test::Values::kSmallIntegers);
  GuardedMatrix<float> out(tokens, hidden);
  V2GradCall c;
  c.grad_dims = {active, hidden};
  c.out_dims = {tokens, hidden};
  c.top_k = topk;
  c.active_num = active;
  c.grad = grad.data();
  c.indices = const_cast<int32_t*>(routing.sorted_indices.data());
  c.num_indices = tokens * topk;
  c.out = out.data();
  ASSERT_EQ(run_v2_grad(c), kSuccess) << GetLastErrorMessage();
  const auto want = expected_sums(grad, routing.sorted_indices, topk, active);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < hidden; ++h) ASSERT_EQ(out.at(t, h), want[t * hidden + h]);
  }
}

TEST(InitRoutingV2GradAclnn, DropPadGradIsECH) {
  std::mt19937_64 rng(83);
  const int64_t tokens = 7, topk = 2, hidden = 9;
  const auto routing = mpg_test::make_routing<int32_t>(rng, Mode::kPadded, tokens, topk, 4);
  GuardedMatrix<float> grad(routing.grad_rows, hidden);
  mpg_test::fill_random(grad, rng, mpg_test::Values::kSmallIntegers);
  GuardedMatrix<float> out(tokens, hidden);
  V2GradCall c;
  c.grad_dims = {routing.num_experts, routing.capacity, hidden};
  c.out_dims = {tokens, hidden};
  c.top_k = topk;
  c.drop_pad_mode = 1;
  c.active_num = 3;  // ignored in drop-pad mode
  c.grad = grad.data();
  c.indices = const_cast<int32_t*>(routing.sorted_indices.data());
  c.num_indices = tokens * topk;
  c.out = out.data();
  ASSERT_EQ(run_v2_grad(c), kSuccess) << GetLastErrorMessage();
  const auto want = expected_sums(grad, routing.sorted_indices, topk, routing.grad_rows);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < hidden; ++h) ASSERT_EQ(out.at(t, h), want[t * hidden + h]);
  }
}

// ---------------------------------------------------------------------------------------------
// Errors: the status, a message naming the argument, and out untouched. Valid base call:
// dropless, N = 4, K = 2, H = 8, G [8, 8], S a permutation of [0, 8).

struct ErrorCase {
  const char* name;
  aclnnStatus status;
  const char* message;
  void (*mutate)(V2GradCall& c);
};

std::vector<ErrorCase> error_cases() {
  return {
      {"NullGrad", kErrParamNullptr, "grad_expanded_x is null",
       [](V2GradCall& c) { c.null_grad = true; }},
      {"NullIndices", kErrParamNullptr, "expanded_row_idx is null",
       [](V2GradCall& c) { c.null_indices = true; }},
      {"NullOut", kErrParamNullptr, "out is null", [](V2GradCall& c) { c.null_out = true; }},
      {"NullGradData", kErrParamNullptr, "grad_expanded_x data is null",
       [](V2GradCall& c) { c.grad = nullptr; }},
      {"DropPadModeTwo", kErrParamInvalid, "drop_pad_mode = 2 must be 0 (dropless) or 1",
       [](V2GradCall& c) { c.drop_pad_mode = 2; }},
      {"DropPadModeNegative", kErrParamInvalid, "drop_pad_mode = -1 must be 0",
       [](V2GradCall& c) { c.drop_pad_mode = -1; }},
      {"TopKZero", kErrParamInvalid, "top_k = 0 must be >= 1", [](V2GradCall& c) { c.top_k = 0; }},
      {"TopKNegative", kErrParamInvalid, "top_k = -2 must be >= 1",
       [](V2GradCall& c) { c.top_k = -2; }},
      {"ActiveNumNegative", kErrParamInvalid, "active_num = -1 must be >= 0",
       [](V2GradCall& c) { c.active_num = -1; }},
      {"ActiveNumAboveNK", kErrParamInvalid, "active_num = 9 must be <= len(expanded_row_idx) = 8",
       [](V2GradCall& c) { c.active_num = 9; }},
      {"GradRowsNotNKWhenAllActive", kErrParamInvalid,
       "grad_expanded_x has 6 rows but must have len(expanded_row_idx) = 8",
       [](V2GradCall& c) {
         c.grad_dims = {6, 8};
       }},
      {"GradRowsNotActiveNum", kErrParamInvalid,
       "grad_expanded_x has 8 rows but must have active_num = 5",
       [](V2GradCall& c) { c.active_num = 5; }},
      {"Grad3dInDroplessMode", kErrParamInvalid, "grad_expanded_x has rank 3",
       [](V2GradCall& c) {
         c.grad_dims = {2, 4, 8};
       }},
      {"Grad1dInDropPadMode", kErrParamInvalid, "grad_expanded_x has rank 1",
       [](V2GradCall& c) {
         c.drop_pad_mode = 1;
         c.grad_dims = {64};
       }},
      {"IndicesNotMultipleOfTopK", kErrParamInvalid,
       "expanded_row_idx has 8 elements, which is not a multiple of top_k = 3",
       [](V2GradCall& c) { c.top_k = 3; }},
      {"OutRows", kErrParamInvalid,
       "out has 3 rows but must have N = len(expanded_row_idx) / top_k",
       [](V2GradCall& c) {
         c.out_dims = {3, 8};
       }},
      {"OutHidden", kErrParamInvalid, "out has hidden size 7 but grad_expanded_x has hidden size 8",
       [](V2GradCall& c) {
         c.out_dims = {4, 7};
       }},
      {"DtypeMismatch", kErrParamInvalid, "out dtype 1 differs from grad_expanded_x dtype 0",
       [](V2GradCall& c) { c.out_dtype = DataType::kFloat16; }},
      {"IndexDtype", kErrParamInvalid, "expanded_row_idx dtype 0 is not supported",
       [](V2GradCall& c) { c.index_dtype = DataType::kFloat; }},
      {"OutOverlapsGrad", kErrParamInvalid, "out overlaps grad_expanded_x in memory",
       [](V2GradCall& c) { c.out = static_cast<float*>(c.grad) + 8; }},
      {"DuplicateIndex", kErrParamInvalid, "expanded_row_idx[7] = 0 duplicates expanded_row_idx[",
       [](V2GradCall& c) { static_cast<int32_t*>(c.indices)[7] = 0; }},
      {"IndexOutOfRangeDropPad", kErrParamInvalid,
       "expanded_row_idx[2] = 8 is out of range [-1, 8)",
       [](V2GradCall& c) {
         c.drop_pad_mode = 1;
         static_cast<int32_t*>(c.indices)[2] = 8;
       }},
  };
}

class InitRoutingV2GradErrors : public ::testing::TestWithParam<size_t> {};

TEST_P(InitRoutingV2GradErrors, StatusMessageAndOutUntouched) {
  const ErrorCase e = error_cases()[GetParam()];
  GuardedMatrix<float> grad(8, 8);
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t h = 0; h < 8; ++h) grad.at(r, h) = static_cast<float>(r);
  }
  std::vector<int32_t> indices = {3, 0, 7, 2, 1, 6, 5, 4};
  GuardedMatrix<float> out(4, 8);
  V2GradCall c;
  c.grad_dims = {8, 8};
  c.out_dims = {4, 8};
  c.grad = grad.data();
  c.indices = indices.data();
  c.num_indices = 8;
  c.out = out.data();
  e.mutate(c);
  const GuardedMatrix<float> grad_before = grad;
  EXPECT_EQ(run_v2_grad(c), e.status);
  EXPECT_NE(std::string(GetLastErrorMessage()).find(e.message), std::string::npos)
      << "message: \"" << GetLastErrorMessage() << "\"\nexpected to contain: \"" << e.message
      << "\"";
  EXPECT_TRUE(out.payload_untouched());
  EXPECT_TRUE(out.guards_intact());
  EXPECT_TRUE(grad.same_bytes(grad_before));
}

INSTANTIATE_TEST_SUITE_P(Aclnn, InitRoutingV2GradErrors,
                         ::testing::Range<size_t>(0, error_cases().size()), [](const auto& info) {
                           return std::string(error_cases()[info.param].name);
                         });

// The typed layer names the same arguments.
TEST(InitRoutingV2GradTyped, ErrorsNameTheOpsArguments) {
  GuardedMatrix<float> grad(8, 8);
  std::vector<int32_t> indices = {3, 0, 7, 2, 1, 6, 5, 4};
  GuardedMatrix<float> out(4, 8);
  mpg::Status s =
      mpg::init_routing_v2_grad(grad.const_view(), indices, 0, Mode::kDropless, out.view());
  EXPECT_EQ(s.code(), mpg::ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("top_k = 0"), std::string::npos) << s.message();
  indices[5] = 9;
  s = mpg::init_routing_v2_grad(grad.const_view(), indices, 2, Mode::kDropless, out.view());
  EXPECT_EQ(s.code(), mpg::ErrorCode::kIndexOutOfRange);
  EXPECT_NE(s.message().find("expanded_row_idx[5] = 9 is out of range [0, 8)"), std::string::npos)
      << s.message();
  s = mpg::init_routing_v2_grad(grad.const_view(), indices, 2, Mode::kDropless,
                                mpg::MatrixView(grad.data(), 4, 8));
  EXPECT_EQ(s.code(), mpg::ErrorCode::kOverlap);
  EXPECT_TRUE(out.payload_untouched());
}

// Eigen overloads deduce every type.
TEST(InitRoutingV2GradTyped, EigenOverload) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  RowMajor grad(6, 5);
  for (int r = 0; r < 6; ++r) grad.row(r).setConstant(static_cast<float>(r + 1));
  const std::vector<int32_t> indices = {5, 0, 3, 1, 4, 2};
  RowMajor out(2, 5);
  ASSERT_TRUE(
      mpg::init_routing_v2_grad(grad, mpg::IndexView<int32_t>(indices), 3, Mode::kDropless, out)
          .ok());
  // Token 0: rows 5, 0, 3 = 6 + 1 + 4; token 1: rows 1, 4, 2 = 2 + 5 + 3.
  EXPECT_EQ(out(0, 0), 11.0f);
  EXPECT_EQ(out(1, 4), 10.0f);
}

}  // namespace
