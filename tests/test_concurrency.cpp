// Concurrent calls from several threads on different buffers: safe (TSan runs this file) and
// deterministic (every result equals the reference path's, computed up front). Also the
// executor's lifetime rules and the per-thread error message of the two-phase API.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mpg/mpg.hpp"

namespace {

namespace acl = mpg::aclnn;

// One call's inputs and the reference result, owned by one thread.
struct Job {
  int64_t tokens = 0;
  int64_t topk = 0;
  int64_t hidden = 0;
  int64_t grad_rows = 0;
  std::vector<mpg::bfloat16> grad;
  std::vector<int32_t> indices;
  std::vector<mpg::bfloat16> expected;
};

// Dropless, with a quarter of the copies dropped, random bf16 data; fixed seed per job.
Job make_job(uint32_t seed, int64_t tokens, int64_t topk, int64_t hidden) {
  Job job;
  job.tokens = tokens;
  job.topk = topk;
  job.hidden = hidden;
  job.grad_rows = tokens * topk * 3 / 4;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  job.grad.resize(static_cast<size_t>(job.grad_rows * hidden));
  for (auto& x : job.grad) x = mpg::bfloat16(normal(rng));
  job.indices.resize(static_cast<size_t>(tokens * topk));
  std::iota(job.indices.begin(), job.indices.end(), 0);
  std::shuffle(job.indices.begin(), job.indices.end(), rng);
  job.expected.assign(static_cast<size_t>(tokens * hidden), mpg::bfloat16(0.0f));
  mpg::Options reference;
  reference.path = mpg::Path::kReference;
  const mpg::Status s = mpg::permute_grad(
      mpg::MatrixView(job.grad.data(), job.grad_rows, hidden), job.indices, topk,
      mpg::Mode::kDropless, mpg::MatrixView(job.expected.data(), tokens, hidden), reference);
  EXPECT_TRUE(s.ok()) << s.message();
  return job;
}

bool same_bits(const std::vector<mpg::bfloat16>& a, const std::vector<mpg::bfloat16>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(mpg::bfloat16)) == 0;
}

// The call kinds a thread cycles through: default options (the shared pool, contended by the
// other threads), an explicit thread count, one thread, and the two-phase API.
enum class Kind { kDefault, kTwoThreads, kOneThread, kTwoPhase, kCount };

bool run_job(const Job& job, Kind kind, std::vector<mpg::bfloat16>* out) {
  out->assign(job.expected.size(), mpg::bfloat16(-1.0f));
  if (kind == Kind::kTwoPhase) {
    const int64_t grad_dims[] = {job.grad_rows, job.hidden};
    const int64_t index_dims[] = {static_cast<int64_t>(job.indices.size())};
    const int64_t out_dims[] = {job.tokens, job.hidden};
    acl::Tensor* g = acl::CreateTensor(grad_dims, 2, acl::DataType::kBFloat16, nullptr, 0,
                                       const_cast<mpg::bfloat16*>(job.grad.data()));
    acl::Tensor* s = acl::CreateTensor(index_dims, 1, acl::DataType::kInt32, nullptr, 0,
                                       const_cast<int32_t*>(job.indices.data()));
    acl::Tensor* o =
        acl::CreateTensor(out_dims, 2, acl::DataType::kBFloat16, nullptr, 0, out->data());
    uint64_t workspace_size = 0;
    acl::Executor* executor = nullptr;
    const acl::aclnnStatus planned = acl::MoeTokenPermuteGradGetWorkspaceSize(
        g, s, job.topk, false, o, &workspace_size, &executor);
    acl::DestroyTensor(g);
    acl::DestroyTensor(s);
    acl::DestroyTensor(o);
    if (planned != acl::kSuccess) return false;
    std::vector<uint8_t> workspace(workspace_size);
    return acl::MoeTokenPermuteGrad(workspace.data(), workspace_size, executor) == acl::kSuccess &&
           std::strlen(acl::GetLastErrorMessage()) == 0;
  }
  mpg::Options options;
  if (kind == Kind::kTwoThreads) options.num_threads = 2;
  if (kind == Kind::kOneThread) options.num_threads = 1;
  return mpg::permute_grad(mpg::MatrixView(job.grad.data(), job.grad_rows, job.hidden), job.indices,
                           job.topk, mpg::Mode::kDropless,
                           mpg::MatrixView(out->data(), job.tokens, job.hidden), options)
      .ok();
}

TEST(Concurrency, ThreadsOnDifferentBuffersMatchTheReference) {
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 24;
  // Big enough that a default call wants several threads (and so the pool); different shapes
  // per thread so a mixed-up buffer cannot go unnoticed.
  std::vector<Job> jobs;
  for (int i = 0; i < kThreads; ++i) {
    jobs.push_back(make_job(100 + i, 768 + 64 * i, 4 + i % 3, 768 + 8 * i));
    const Job& job = jobs.back();
    const auto bytes_moved =
        job.tokens * job.hidden * int64_t{sizeof(mpg::bfloat16)} * (job.topk + 1);
    ASSERT_GE(bytes_moved, 2 * mpg::detail::kMinBytesPerThread) << "too small for the pool";
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      std::vector<mpg::bfloat16> out;
      for (int call = 0; call < kCallsPerThread; ++call) {
        const auto kind = static_cast<Kind>((call + i) % static_cast<int>(Kind::kCount));
        if (!run_job(jobs[i], kind, &out) || !same_bits(out, jobs[i].expected)) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// A user's parallel_for that runs the tasks on threads of its own, called from two threads.
TEST(Concurrency, CallerParallelForFromTwoThreads) {
  const Job jobs[2] = {make_job(7, 256, 2, 128), make_job(8, 200, 3, 96)};
  mpg::Options options;
  options.num_threads = 3;
  options.parallel_for = [](int64_t num_tasks, const std::function<void(int64_t)>& task) {
    std::vector<std::thread> workers;
    for (int w = 0; w < 3; ++w) {
      workers.emplace_back([&, w] {
        for (int64_t i = w; i < num_tasks; i += 3) task(i);
      });
    }
    for (auto& t : workers) t.join();
  };
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 2; ++c) {
    callers.emplace_back([&, c] {
      const Job& job = jobs[c];
      for (int call = 0; call < 8; ++call) {
        std::vector<mpg::bfloat16> out(job.expected.size());
        const mpg::Status s = mpg::permute_grad(
            mpg::MatrixView(job.grad.data(), job.grad_rows, job.hidden), job.indices, job.topk,
            mpg::Mode::kDropless, mpg::MatrixView(out.data(), job.tokens, job.hidden), options);
        if (!s.ok() || !same_bits(out, job.expected)) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// GetLastErrorMessage() is per thread: a failing thread and a succeeding one do not see each
// other's message.
TEST(Concurrency, LastErrorMessageIsPerThread) {
  const Job job = make_job(3, 8, 2, 4);
  std::string failing_message;
  std::string succeeding_message = "not set";
  std::thread failing([&] {
    std::vector<mpg::bfloat16> out(job.expected.size());
    const int64_t dims[] = {job.tokens, job.hidden};
    acl::Tensor* o = acl::CreateTensor(dims, 2, acl::DataType::kBFloat16, nullptr, 0, out.data());
    uint64_t size = 0;
    acl::Executor* executor = nullptr;
    EXPECT_EQ(
        acl::MoeTokenPermuteGradGetWorkspaceSize(nullptr, nullptr, 2, false, o, &size, &executor),
        acl::kErrParamNullptr);
    failing_message = acl::GetLastErrorMessage();
    acl::DestroyTensor(o);
  });
  failing.join();
  std::thread succeeding([&] {
    std::vector<mpg::bfloat16> out;
    EXPECT_TRUE(run_job(job, Kind::kTwoPhase, &out));
    succeeding_message = acl::GetLastErrorMessage();
  });
  succeeding.join();
  EXPECT_EQ(failing_message, "permuted_output_grad is null");
  EXPECT_EQ(succeeding_message, "");
}

// Executor lifetime: each executor runs once; a consumed, foreign or null one is refused
// without being dereferenced (ASan would report a use after free otherwise).
class ExecutorLifetime : public ::testing::Test {
 protected:
  acl::Executor* plan(uint64_t* workspace_size) {
    const int64_t grad_dims[] = {4, 2};
    const int64_t index_dims[] = {4};
    const int64_t out_dims[] = {2, 2};
    acl::Tensor* g =
        acl::CreateTensor(grad_dims, 2, acl::DataType::kFloat, nullptr, 0, grad_.data());
    acl::Tensor* s =
        acl::CreateTensor(index_dims, 1, acl::DataType::kInt32, nullptr, 0, indices_.data());
    acl::Tensor* o = acl::CreateTensor(out_dims, 2, acl::DataType::kFloat, nullptr, 0, out_.data());
    acl::Executor* executor = nullptr;
    EXPECT_EQ(
        acl::MoeTokenPermuteGradGetWorkspaceSize(g, s, 2, false, o, workspace_size, &executor),
        acl::kSuccess);
    acl::DestroyTensor(g);
    acl::DestroyTensor(s);
    acl::DestroyTensor(o);
    return executor;
  }

  std::vector<float> grad_ = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> indices_ = {3, 0, 1, 2};
  std::vector<float> out_ = std::vector<float>(4, -1.0f);
  uint8_t workspace_[8] = {};
};

TEST_F(ExecutorLifetime, ConsumedExecutorIsRefused) {
  uint64_t size = 0;
  acl::Executor* executor = plan(&size);
  ASSERT_EQ(acl::MoeTokenPermuteGrad(workspace_, size, executor), acl::kSuccess);
  EXPECT_EQ(out_, (std::vector<float>{7 + 1, 8 + 2, 3 + 5, 4 + 6}));
  out_.assign(4, -1.0f);
  EXPECT_EQ(acl::MoeTokenPermuteGrad(workspace_, size, executor), acl::kErrParamInvalid);
  EXPECT_NE(std::string(acl::GetLastErrorMessage()).find("already used"), std::string::npos)
      << acl::GetLastErrorMessage();
  EXPECT_EQ(out_, std::vector<float>(4, -1.0f));
}

TEST_F(ExecutorLifetime, FailedPhaseTwoAlsoConsumesTheExecutor) {
  uint64_t size = 0;
  acl::Executor* executor = plan(&size);
  ASSERT_GT(size, 0u);
  EXPECT_EQ(acl::MoeTokenPermuteGrad(nullptr, 0, executor), acl::kErrParamInvalid);
  EXPECT_EQ(acl::MoeTokenPermuteGrad(workspace_, size, executor), acl::kErrParamInvalid);
  EXPECT_NE(std::string(acl::GetLastErrorMessage()).find("already used"), std::string::npos);
  EXPECT_EQ(out_, std::vector<float>(4, -1.0f));
}

TEST_F(ExecutorLifetime, ForeignAndNullExecutorsAreRefused) {
  alignas(acl::Executor) uint8_t not_an_executor[sizeof(acl::Executor)] = {};
  EXPECT_EQ(
      acl::MoeTokenPermuteGrad(workspace_, 8, reinterpret_cast<acl::Executor*>(not_an_executor)),
      acl::kErrParamInvalid);
  EXPECT_EQ(acl::MoeTokenPermuteGrad(workspace_, 8, nullptr), acl::kErrParamNullptr);
  EXPECT_STREQ(acl::GetLastErrorMessage(), "executor is null");
}

TEST_F(ExecutorLifetime, ExecutorMayRunOnAnotherThread) {
  uint64_t size = 0;
  acl::Executor* executor = plan(&size);
  acl::aclnnStatus status = -1;
  std::thread([&] { status = acl::MoeTokenPermuteGrad(workspace_, size, executor); }).join();
  EXPECT_EQ(status, acl::kSuccess);
  EXPECT_EQ(out_, (std::vector<float>{7 + 1, 8 + 2, 3 + 5, 4 + 6}));
}

// Executors planned on several threads and run on others, all at once.
TEST(Concurrency, ExecutorsPlannedAndRunAcrossThreads) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 50;
  const Job job = make_job(11, 16, 2, 8);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      std::vector<mpg::bfloat16> out;
      for (int r = 0; r < kRounds; ++r) {
        if (!run_job(job, Kind::kTwoPhase, &out) || !same_bits(out, job.expected)) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
