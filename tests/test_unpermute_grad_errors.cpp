// mpg::unpermute_grad on bad input: the status, a message naming the argument, and both
// outputs untouched (payload and guards still hold the sentinel).
#include "test_util.hpp"

#include <functional>

namespace {

using mpg::ErrorCode;
using mpg_test::GuardedMatrix;

// A valid call (N = 4, K = 2, H = 16, R = 6) whose arguments a case may break before running.
struct Args {
  GuardedMatrix<float> x{6, 16}, g{4, 16}, dx{8, 16};
  GuardedMatrix<mpg::half> probs{4, 2}, dp{4, 2};
  std::vector<int32_t> s = {0, 7, 1, 2, 3, 6, 5, 4};
  mpg::ConstMatrixView<float> xv = x.const_view(), gv = g.const_view();
  mpg::MatrixView<float> dxv = dx.view();
  mpg::ConstMatrixView<mpg::half> pv = probs.const_view();
  mpg::MatrixView<mpg::half> dpv = dp.view();
  mpg::IndexView<int32_t> sv{s};
  mpg::Options options;
  bool with_probs = true;

  Args() {
    std::mt19937_64 rng(1);
    mpg_test::fill_random(x, rng);
    mpg_test::fill_random(g, rng);
    mpg_test::fill_random(probs, rng);
  }
  mpg::Status run() {
    return with_probs ? mpg::unpermute_grad(xv, gv, sv, pv, dxv, dpv, options)
                      : mpg::unpermute_grad(xv, gv, sv, dxv, options);
  }
};

struct ErrorCase {
  const char* name;
  std::function<void(Args&)> breaks;
  ErrorCode code;
  const char* message_part;
};

const ErrorCase kCases[] = {
    {"null_tokens", [](Args& a) { a.xv.data = nullptr; }, ErrorCode::kNullPointer,
     "permuted_tokens data is null"},
    {"null_grad", [](Args& a) { a.gv.data = nullptr; }, ErrorCode::kNullPointer,
     "unpermuted_tokens_grad data is null"},
    {"null_indices", [](Args& a) { a.sv.data = nullptr; }, ErrorCode::kNullPointer,
     "sorted_indices data is null"},
    {"null_probs", [](Args& a) { a.pv.data = nullptr; }, ErrorCode::kNullPointer,
     "probs data is null"},
    {"null_dx", [](Args& a) { a.dxv.data = nullptr; }, ErrorCode::kNullPointer,
     "permuted_tokens_grad_out data is null"},
    {"null_dp", [](Args& a) { a.dpv.data = nullptr; }, ErrorCode::kNullPointer,
     "probs_grad_out data is null"},
    {"topk_zero", [](Args& a) { a.pv.cols = 0; }, ErrorCode::kInvalidArgument, "must be >= 1"},
    {"probs_not_n_by_k", [](Args& a) { a.pv.rows = 3; }, ErrorCode::kShapeMismatch, "needs N * K"},
    {"grad_rows", [](Args& a) { a.gv.rows = 3; }, ErrorCode::kShapeMismatch,
     "unpermuted_tokens_grad has 3 rows but must have N = 4"},
    {"tokens_hidden", [](Args& a) { a.xv.cols = 15; }, ErrorCode::kShapeMismatch,
     "permuted_tokens has hidden size 15"},
    {"tokens_rows_over_n_k", [](Args& a) { a.xv.rows = 9; }, ErrorCode::kShapeMismatch,
     "more than len(sorted_indices) = 8"},
    {"dx_rows", [](Args& a) { a.dxv.rows = 7; }, ErrorCode::kShapeMismatch,
     "permuted_tokens_grad_out has shape [7, 16] but must be [8, 16]"},
    {"dx_hidden", [](Args& a) { a.dxv.cols = 8; }, ErrorCode::kShapeMismatch,
     "permuted_tokens_grad_out has shape [8, 8]"},
    {"dp_shape", [](Args& a) { a.dpv.cols = 1; }, ErrorCode::kShapeMismatch,
     "probs_grad_out has shape [4, 1]"},
    {"no_probs_grad_rows", [](Args& a) { a.with_probs = false; }, ErrorCode::kShapeMismatch,
     "must have N = 8 (len(sorted_indices), K = 1 without probs)"},
    {"stride_below_cols", [](Args& a) { a.gv.row_stride = 8; }, ErrorCode::kInvalidArgument,
     "unpermuted_tokens_grad row stride 8 is smaller than its row length 16"},
    {"negative_rows", [](Args& a) { a.xv.rows = -1; }, ErrorCode::kShapeMismatch,
     "permuted_tokens has shape [-1, 16]"},
    {"index_out_of_range", [](Args& a) { a.s[5] = 8; }, ErrorCode::kIndexOutOfRange,
     "sorted_indices[5] = 8 is out of range [0, 8)"},
    {"index_negative", [](Args& a) { a.s[2] = -1; }, ErrorCode::kIndexOutOfRange,
     "sorted_indices[2] = -1"},
    {"index_duplicate", [](Args& a) { a.s[3] = 0; }, ErrorCode::kDuplicateIndex,
     "sorted_indices[3] = 0 duplicates sorted_indices[0]"},
    {"dx_over_tokens", [](Args& a) { a.dxv.data = const_cast<float*>(a.xv.data); },
     ErrorCode::kOverlap, "permuted_tokens_grad_out overlaps permuted_tokens"},
    // g laid inside dx's buffer: dx itself would reach past g into whatever the heap put there.
    {"dx_over_grad", [](Args& a) { a.gv.data = a.dx.data() + 60; }, ErrorCode::kOverlap,
     "permuted_tokens_grad_out overlaps unpermuted_tokens_grad"},
    // S laid inside dx's buffer (never read: the overlap is found first).
    {"dx_over_indices",
     [](Args& a) { a.sv.data = reinterpret_cast<const int32_t*>(a.dx.data()) + 5; },
     ErrorCode::kOverlap, "permuted_tokens_grad_out overlaps sorted_indices"},
    {"dp_over_probs", [](Args& a) { a.dpv.data = const_cast<mpg::half*>(a.pv.data) + 1; },
     ErrorCode::kOverlap, "probs_grad_out overlaps probs"},
    {"dp_over_tokens",
     [](Args& a) { a.dpv.data = reinterpret_cast<mpg::half*>(const_cast<float*>(a.xv.data)); },
     ErrorCode::kOverlap, "probs_grad_out overlaps permuted_tokens"},
    {"dp_over_dx", [](Args& a) { a.dpv.data = reinterpret_cast<mpg::half*>(a.dxv.data) + 7; },
     ErrorCode::kOverlap, "permuted_tokens_grad_out overlaps probs_grad_out"},
    {"bad_threads", [](Args& a) { a.options.num_threads = -2; }, ErrorCode::kInvalidArgument,
     "options.num_threads = -2"},
};

class UnpermuteGradErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(UnpermuteGradErrors, StatusMessageAndUntouchedOutputs) {
  const ErrorCase& c = GetParam();
  Args a;
  c.breaks(a);
  const mpg::Status s = a.run();
  EXPECT_EQ(s.code(), c.code) << s.message();
  EXPECT_NE(s.message().find(c.message_part), std::string::npos) << s.message();
  EXPECT_TRUE(a.dx.payload_untouched() && a.dx.guards_intact());
  EXPECT_TRUE(a.dp.payload_untouched() && a.dp.guards_intact());
  // Inputs that an output was laid over are untouched too.
  Args fresh;
  EXPECT_TRUE(a.x.same_bytes(fresh.x) && a.g.same_bytes(fresh.g) &&
              a.probs.same_bytes(fresh.probs));
}

INSTANTIATE_TEST_SUITE_P(Cases, UnpermuteGradErrors, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(UnpermuteGradErrors, ValidArgsSucceed) {
  Args a;
  const mpg::Status s = a.run();
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(a.dx.payload_untouched());
}

}  // namespace
