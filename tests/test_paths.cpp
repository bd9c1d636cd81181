// Every fast path (each forced ISA, each thread count, the parallel_for hook, the Eigen
// overloads) gives the reference path's bits exactly: same order of adds, so no tolerance.
#include "test_util.hpp"

#include <atomic>
#include <thread>
#include <tuple>

namespace {

using mpg::DType;
using mpg::IndexType;
using mpg::Mode;
using mpg_test::GuardedMatrix;
using mpg_test::PathCase;

constexpr int64_t kHiddenSizes[] = {1,  7,  8,  15,  16,  17,  31,   32,  33,
                                    63, 64, 65, 127, 128, 129, 1000, 4097};
constexpr int64_t kTopKs[] = {1, 2, 3, 8, 64, 512};
constexpr int kThreadCounts[] = {1, 2, 3, 8};
// Elements of G per case: keeps the 36 sweeps to a fraction of a second each.
constexpr int64_t kGradBudget = int64_t{1} << 13;

// Rows laid out three ways, so that each (H, K) is seen with some layout and the sweep as a
// whole covers aligned, misaligned (one element off) and strided (rows > H apart) memory.
enum class Layout { kContiguous, kMisaligned, kStrided };

const char* name_of(Layout l) {
  return l == Layout::kContiguous   ? "contiguous"
         : l == Layout::kMisaligned ? "misaligned"
                                    : "strided";
}

template <class T>
GuardedMatrix<T> make_matrix(int64_t rows, int64_t cols, Layout layout, int64_t stride_pad) {
  return GuardedMatrix<T>(rows, cols, layout == Layout::kStrided ? cols + stride_pad : cols,
                          layout == Layout::kMisaligned);
}

using Param = std::tuple<PathCase, DType, IndexType, Mode>;

class PathsMatchReference : public ::testing::TestWithParam<Param> {};

template <class T, class I>
void sweep(PathCase path, Mode mode) {
  std::mt19937_64 rng(20260101);
  int case_number = 0;
  for (const int64_t hidden : kHiddenSizes) {
    for (const int64_t topk : kTopKs) {
      const Layout layout = static_cast<Layout>(case_number++ % 3);
      // At least 9 tokens, more than the largest thread count, so every thread gets work.
      const int64_t tokens = std::clamp<int64_t>(kGradBudget / (topk * hidden), 9, 32);
      const auto routing = mpg_test::make_routing<I>(rng, mode, tokens, topk, topk + 4,
                                                     std::max<int64_t>(1, kGradBudget / hidden));
      auto grad = make_matrix<T>(routing.grad_rows, hidden, layout, 3);
      mpg_test::fill_random(grad, rng);
      auto want = make_matrix<T>(tokens, hidden, layout, 5);
      const mpg::Options reference = mpg_test::path_options(mpg_test::kReferencePath);
      ASSERT_TRUE(
          mpg_test::run_permute_grad(grad, routing.sorted_indices, topk, mode, want, reference)
              .ok());
      for (const int threads : kThreadCounts) {
        SCOPED_TRACE(testing::Message() << "H = " << hidden << ", K = " << topk
                                        << ", N = " << tokens << ", R = " << routing.grad_rows
                                        << ", threads = " << threads << ", " << name_of(layout));
        auto got = make_matrix<T>(tokens, hidden, layout, 5);
        const mpg::Status s = mpg_test::run_permute_grad(
            grad, routing.sorted_indices, topk, mode, got, mpg_test::path_options(path, threads));
        ASSERT_TRUE(s.ok()) << s.message();
        EXPECT_TRUE(got.same_bytes(want)) << mpg_test::first_difference(got, want);
        EXPECT_TRUE(got.guards_intact());
        EXPECT_TRUE(got.row_gaps_untouched());
        if (testing::Test::HasFailure()) return;  // one reproducible failure, not hundreds
      }
    }
  }
}

TEST_P(PathsMatchReference, AllSizesTopKsAndThreadCounts) {
  const auto [path, dtype, index_type, mode] = GetParam();
  MPG_SKIP_IF_UNSUPPORTED(path);
  mpg::detail::dispatch(dtype, index_type, mode, [path = path, mode = mode](auto t, auto i, auto) {
    sweep<typename decltype(t)::type, typename decltype(i)::type>(path, mode);
  });
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [path, dtype, index_type, mode] = info.param;
  return mpg_test::path_name(path) + "_" + mpg_test::short_name(dtype) + "_" +
         mpg_test::short_name(index_type) + "_" + mpg_test::short_name(mode);
}

INSTANTIATE_TEST_SUITE_P(Sweep, PathsMatchReference,
                         ::testing::Combine(::testing::ValuesIn(mpg_test::kFastPaths),
                                            ::testing::ValuesIn(mpg_test::kElementDTypes),
                                            ::testing::ValuesIn(mpg_test::kIndexTypes),
                                            ::testing::Values(Mode::kDropless, Mode::kPadded)),
                         param_name);

// ---------------------------------------------------------------------------------------------
// The parallel_for hook: whatever order and threads the caller's pool uses, the bits agree.

struct HookCase {
  const char* name;
  mpg::ParallelFor hook;
};

std::vector<HookCase> hook_cases() {
  return {
      {"Reverse",
       [](int64_t n, const std::function<void(int64_t)>& task) {
         for (int64_t i = n; i-- > 0;) task(i);
       }},
      {"StdThreads",  // one std::thread per task, all running at once
       [](int64_t n, const std::function<void(int64_t)>& task) {
         std::vector<std::thread> threads;
         for (int64_t i = 0; i < n; ++i) threads.emplace_back(task, i);
         for (auto& t : threads) t.join();
       }},
      {"TwoWorkersStealing",  // tasks claimed from a shared counter, so the order varies by run
       [](int64_t n, const std::function<void(int64_t)>& task) {
         std::atomic<int64_t> next{0};
         const auto worker = [&] {
           for (int64_t i; (i = next.fetch_add(1)) < n;) task(i);
         };
         std::thread other(worker);
         worker();
         other.join();
       }},
  };
}

class ParallelForHook : public ::testing::TestWithParam<std::tuple<size_t, DType>> {};

TEST_P(ParallelForHook, SameBitsAsReference) {
  const auto [hook_index, dtype] = GetParam();
  const HookCase hook = hook_cases()[hook_index];
  mpg_test::with_element_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::mt19937_64 rng(7);
    const auto routing = mpg_test::make_routing<int32_t>(rng, Mode::kPadded, 300, 4, 16);
    GuardedMatrix<T> grad(routing.grad_rows, 129);
    mpg_test::fill_random(grad, rng, mpg_test::Values::kWithSpecials);
    GuardedMatrix<T> want(300, 129);
    GuardedMatrix<T> got(300, 129);
    const mpg::Options reference = mpg_test::path_options(mpg_test::kReferencePath);
    ASSERT_TRUE(
        mpg_test::run_permute_grad(grad, routing.sorted_indices, 4, Mode::kPadded, want, reference)
            .ok());
    mpg::Options options;
    int64_t calls = 0;
    options.parallel_for = [&](int64_t n, const std::function<void(int64_t)>& task) {
      ++calls;
      hook.hook(n, task);
    };
    options.num_threads = 4;
    const mpg::Status s =
        mpg_test::run_permute_grad(grad, routing.sorted_indices, 4, Mode::kPadded, got, options);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(got.same_bytes(want)) << mpg_test::first_difference(got, want);
    EXPECT_TRUE(got.guards_intact());
  });
}

INSTANTIATE_TEST_SUITE_P(Hooks, ParallelForHook,
                         ::testing::Combine(::testing::Values(size_t{0}, size_t{1}, size_t{2}),
                                            ::testing::ValuesIn(mpg_test::kElementDTypes)),
                         [](const auto& info) {
                           return std::string(hook_cases()[std::get<0>(info.param)].name) + "_" +
                                  mpg_test::short_name(std::get<1>(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// Eigen overloads: row-major matrices, Maps with an outer stride, and row/column blocks.

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
class EigenOverloads : public ::testing::Test {};
TYPED_TEST_SUITE(EigenOverloads, mpg_test::ElementTypes, mpg_test::ElementTypeNames);

TYPED_TEST(EigenOverloads, MatrixMapAndBlockGiveTheViewResult) {
  using T = TypeParam;
  std::mt19937_64 rng(11);
  constexpr int64_t kTokens = 20, kTopK = 3, kHidden = 40;
  const auto routing = mpg_test::make_routing<int64_t>(rng, Mode::kDropless, kTokens, kTopK, 8);
  GuardedMatrix<T> grad(routing.grad_rows, kHidden);
  mpg_test::fill_random(grad, rng);
  GuardedMatrix<T> want(kTokens, kHidden);
  ASSERT_TRUE(
      mpg_test::run_permute_grad(grad, routing.sorted_indices, kTopK, Mode::kDropless, want).ok());
  const auto expect_want = [&](const auto& out) {
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t h = 0; h < kHidden; ++h) {
        ASSERT_EQ(mpg_test::bits_of(T(out(t, h))), mpg_test::bits_of(want.at(t, h)))
            << "at [" << t << ", " << h << "]";
      }
    }
  };

  // A plain row-major Matrix in and out.
  RowMajor<T> grad_matrix(routing.grad_rows, kHidden);
  for (int64_t r = 0; r < routing.grad_rows; ++r) {
    for (int64_t h = 0; h < kHidden; ++h) grad_matrix(r, h) = grad.at(r, h);
  }
  RowMajor<T> out_matrix(kTokens, kHidden);
  ASSERT_TRUE(mpg::permute_grad(grad_matrix, mpg::IndexView<int64_t>(routing.sorted_indices), kTopK,
                                Mode::kDropless, out_matrix)
                  .ok());
  expect_want(out_matrix);

  // A Map of the guarded grad, and a Map with an outer stride over a guarded output.
  using Stride = Eigen::OuterStride<>;
  const Eigen::Map<const RowMajor<T>> grad_map(grad.data(), routing.grad_rows, kHidden);
  GuardedMatrix<T> strided_out(kTokens, kHidden, kHidden + 9);
  Eigen::Map<RowMajor<T>, 0, Stride> out_map(strided_out.data(), kTokens, kHidden,
                                             Stride(kHidden + 9));
  ASSERT_TRUE(mpg::permute_grad(grad_map, mpg::IndexView<int64_t>(routing.sorted_indices), kTopK,
                                Mode::kDropless, out_map)
                  .ok());
  expect_want(out_map);
  EXPECT_TRUE(strided_out.guards_intact());
  EXPECT_TRUE(strided_out.row_gaps_untouched());

  // Blocks: grad is the middle columns of a wider matrix, out a block of a larger one whose
  // other elements must keep their values.
  RowMajor<T> wide(routing.grad_rows, kHidden + 6);
  wide.setConstant(T(99.0f));
  wide.block(0, 2, routing.grad_rows, kHidden) = grad_matrix;
  RowMajor<T> big(kTokens + 4, kHidden + 4);
  big.setConstant(T(-7.0f));
  auto out_block = big.block(2, 1, kTokens, kHidden);
  ASSERT_TRUE(mpg::permute_grad(wide.block(0, 2, routing.grad_rows, kHidden),
                                mpg::IndexView<int64_t>(routing.sorted_indices), kTopK,
                                Mode::kDropless, out_block)
                  .ok());
  expect_want(out_block);
  for (int64_t r = 0; r < big.rows(); ++r) {
    for (int64_t c = 0; c < big.cols(); ++c) {
      const bool inside = r >= 2 && r < 2 + kTokens && c >= 1 && c < 1 + kHidden;
      if (!inside) {
        ASSERT_EQ(static_cast<float>(big(r, c)), -7.0f) << r << ", " << c;
      }
    }
  }
}

}  // namespace
