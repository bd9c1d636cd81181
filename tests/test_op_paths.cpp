// MoeInitRoutingV2Grad and MoeTokenUnpermute: every fast path (each forced ISA, each thread
// count) gives the reference path's bits exactly, over the sweep test_paths.cpp runs for
// PermuteGrad (dtypes x index types x modes x H around the vector widths x K x threads, strided
// and misaligned rows, guard bytes), with every probs dtype and zero weights for Unpermute.
#include "test_util.hpp"

#include <tuple>

namespace {

using mpg::DType;
using mpg::IndexType;
using mpg::Mode;
using mpg_test::GuardedMatrix;
using mpg_test::PathCase;

enum class Op { kInitRoutingV2Grad, kUnpermute, kUnpermuteWithoutProbs };

std::string name_of(Op op) {
  return op == Op::kInitRoutingV2Grad ? "V2Grad"
         : op == Op::kUnpermute       ? "Unpermute"
                                      : "UnpermuteNoProbs";
}

constexpr int64_t kHiddenSizes[] = {1, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129, 1000};
// Binary bins: B = 1, 1, 2, 2, 4, 32, 64 (the cap) for these K.
constexpr int64_t kTopKs[] = {1, 3, 5, 6, 8, 64, 130};
constexpr int kThreadCounts[] = {1, 2, 3, 8};
constexpr int64_t kGradBudget = int64_t{1} << 13;

enum class Layout { kContiguous, kMisaligned, kStrided };

template <class T>
GuardedMatrix<T> make_matrix(int64_t rows, int64_t cols, Layout layout, int64_t stride_pad) {
  return GuardedMatrix<T>(rows, cols, layout == Layout::kStrided ? cols + stride_pad : cols,
                          layout == Layout::kMisaligned);
}

// Probs of dtype P with about one weight in eight +0 or -0 (dropping its copy).
template <class P>
GuardedMatrix<P> make_probs(std::mt19937_64& rng, int64_t tokens, int64_t topk, Layout layout) {
  auto probs = make_matrix<P>(tokens, topk, layout, 2);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < topk; ++k) {
      const int pick = std::uniform_int_distribution<int>(0, 15)(rng);
      probs.at(t, k) = pick == 0   ? P(0.0f)
                       : pick == 1 ? P(-0.0f)
                                   : mpg_test::random_value<P>(rng, mpg_test::Values::kNormal);
    }
  }
  return probs;
}

template <class T, class I>
void sweep(PathCase path, Mode mode, Op op) {
  std::mt19937_64 rng(20261202);
  int case_number = 0;
  for (const int64_t hidden : kHiddenSizes) {
    for (const int64_t requested_topk : kTopKs) {
      const int64_t topk = op == Op::kUnpermuteWithoutProbs ? 1 : requested_topk;
      const Layout layout = static_cast<Layout>(case_number % 3);
      const auto probs_dtype = static_cast<DType>(case_number++ % 3);
      const int64_t tokens = std::clamp<int64_t>(kGradBudget / (topk * hidden), 9, 32);
      const auto routing = mpg_test::make_routing<I>(rng, mode, tokens, topk, topk + 4,
                                                     std::max<int64_t>(1, kGradBudget / hidden));
      auto grad = make_matrix<T>(routing.grad_rows, hidden, layout, 3);
      mpg_test::fill_random(grad, rng);
      mpg_test::with_element_type(probs_dtype, [&](auto probs_tag) {
        using P = typename decltype(probs_tag)::type;
        const auto probs = make_probs<P>(rng, tokens, topk, layout);
        const auto run = [&](GuardedMatrix<T>& out, const mpg::Options& options) {
          switch (op) {
            case Op::kInitRoutingV2Grad:
              return mpg::init_routing_v2_grad(grad.const_view(), routing.sorted_indices, topk,
                                               mode, out.view(), options);
            case Op::kUnpermute:
              return mpg::unpermute(grad.const_view(), routing.sorted_indices, probs.const_view(),
                                    mode, out.view(), options);
            case Op::kUnpermuteWithoutProbs: break;
          }
          return mpg::unpermute(grad.const_view(), routing.sorted_indices, mode, out.view(),
                                options);
        };
        auto want = make_matrix<T>(tokens, hidden, layout, 5);
        const mpg::Status ref = run(want, mpg_test::path_options(mpg_test::kReferencePath));
        ASSERT_TRUE(ref.ok()) << ref.message();
        for (const int threads : kThreadCounts) {
          SCOPED_TRACE(testing::Message()
                       << "H = " << hidden << ", K = " << topk << ", N = " << tokens
                       << ", R = " << routing.grad_rows << ", threads = " << threads << ", layout "
                       << static_cast<int>(layout) << ", probs " << mpg::name_of(probs_dtype));
          auto got = make_matrix<T>(tokens, hidden, layout, 5);
          const mpg::Status s = run(got, mpg_test::path_options(path, threads));
          ASSERT_TRUE(s.ok()) << s.message();
          EXPECT_TRUE(got.same_bytes(want)) << mpg_test::first_difference(got, want);
          EXPECT_TRUE(got.guards_intact());
          EXPECT_TRUE(got.row_gaps_untouched());
          if (testing::Test::HasFailure()) return;
        }
      });
      if (testing::Test::HasFailure()) return;
    }
  }
}

using Param = std::tuple<PathCase, DType, IndexType, Mode, Op>;

class OpPathsMatchReference : public ::testing::TestWithParam<Param> {};

TEST_P(OpPathsMatchReference, AllSizesTopKsAndThreadCounts) {
  const auto [path, dtype, index_type, mode, op] = GetParam();
  MPG_SKIP_IF_UNSUPPORTED(path);
  mpg::detail::dispatch(
      dtype, index_type, mode, [path = path, mode = mode, op = op](auto t, auto i, auto) {
        sweep<typename decltype(t)::type, typename decltype(i)::type>(path, mode, op);
      });
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [path, dtype, index_type, mode, op] = info.param;
  return name_of(op) + "_" + mpg_test::path_name(path) + "_" + mpg_test::short_name(dtype) + "_" +
         mpg_test::short_name(index_type) + "_" + mpg_test::short_name(mode);
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, OpPathsMatchReference,
    ::testing::Combine(::testing::ValuesIn(mpg_test::kFastPaths),
                       ::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(IndexType::kInt32, IndexType::kInt64),
                       ::testing::Values(Mode::kDropless, Mode::kPadded),
                       ::testing::Values(Op::kInitRoutingV2Grad, Op::kUnpermute,
                                         Op::kUnpermuteWithoutProbs)),
    param_name);

}  // namespace
