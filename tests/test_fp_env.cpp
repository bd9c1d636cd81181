// The no-flush-to-zero rule under a caller whose own thread flushes subnormals (a -ffast-math
// build, or a framework that sets the control register): every path still keeps subnormal
// inputs and outputs, bit for bit, and the caller's control register is the same afterwards.
// x86: MXCSR.FTZ and DAZ. AArch64: FPCR.FZ and FZ16.
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace {

using mpg::Mode;
using mpg_test::GuardedMatrix;

// ---------------------------------------------------------------------------------------------
// This thread's floating-point control register, and the bits that make it flush subnormals.

#if defined(__x86_64__) || defined(__i386__)
constexpr bool kHaveControlRegister = true;
constexpr uint64_t kFlushBits = 0x8040;  // MXCSR.FTZ (bit 15) and DAZ (bit 6)
uint64_t read_control() {
  return _mm_getcsr();
}
void write_control(uint64_t value) {
  _mm_setcsr(static_cast<unsigned>(value));
}
#elif defined(__aarch64__)
constexpr bool kHaveControlRegister = true;
constexpr uint64_t kFlushBits = (uint64_t{1} << 24) | (uint64_t{1} << 19);  // FPCR.FZ, FZ16
uint64_t read_control() {
  uint64_t value;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(value));
  return value;
}
void write_control(uint64_t value) {
  __asm__ __volatile__("msr fpcr, %0" : : "r"(value) : "memory");
}
#else
constexpr bool kHaveControlRegister = false;
constexpr uint64_t kFlushBits = 0;
uint64_t read_control() {
  return 0;
}
void write_control(uint64_t) {}
#endif

// Sets the flush bits on this thread for its lifetime, then restores the register.
class ScopedFlushToZero {
 public:
  ScopedFlushToZero() : saved_(read_control()) { write_control(saved_ | kFlushBits); }
  ~ScopedFlushToZero() { write_control(saved_); }
  ScopedFlushToZero(const ScopedFlushToZero&) = delete;
  ScopedFlushToZero& operator=(const ScopedFlushToZero&) = delete;

 private:
  uint64_t saved_;
};

// Proof that the test can fail: with the flush bits set, this thread really flushes. Under an
// emulator that ignored them the tests below would prove nothing.
TEST(FpEnv, FlushBitsFlushOnThisThread) {
  if (!kHaveControlRegister) GTEST_SKIP() << "no known FP control register on this target";
  volatile float smallest_normal = 1.17549435e-38f;  // 2^-126
  volatile float half_of_it = 0.5f;
  volatile float flushed;
  {
    const ScopedFlushToZero ftz;
    ASSERT_EQ(read_control() & kFlushBits, kFlushBits);
    flushed = smallest_normal * half_of_it;  // 2^-127 is subnormal: flushed to +0
  }
  EXPECT_EQ(mpg_test::bits_of(flushed), 0u);
  EXPECT_EQ(mpg_test::bits_of(smallest_normal * half_of_it), 0x00400000u);
}

TEST(FpEnv, ScopedIeeeFpEnvClearsFlushBitsAndRestoresThem) {
  if (!kHaveControlRegister) GTEST_SKIP() << "no known FP control register on this target";
  const ScopedFlushToZero ftz;
  const uint64_t caller = read_control();
  {
    const mpg::detail::ScopedIeeeFpEnv ieee;
    EXPECT_EQ(read_control() & kFlushBits, 0u);
  }
  EXPECT_EQ(read_control(), caller);
}

// ---------------------------------------------------------------------------------------------
// The op under a flushing caller.

template <class T>
class FpEnvOp : public ::testing::Test {};
TYPED_TEST_SUITE(FpEnvOp, mpg_test::ElementTypes, mpg_test::ElementTypeNames);

// Runs f(options) for every path, with 1 and 2 of mpg's threads and with a caller parallel_for
// that runs the tasks on this (flushing) thread and on a new thread started while it flushes.
void for_each_run(const std::function<void(const mpg::Options&)>& f) {
  for (const mpg_test::PathCase path : mpg_test::kAllPaths) {
    if (!mpg_test::path_supported(path)) continue;
    for (const int threads : {1, 2, -1}) {
      mpg::Options options = mpg_test::path_options(path, threads < 0 ? 0 : threads);
      if (threads < 0) {
        options.parallel_for = [](int64_t n, const std::function<void(int64_t)>& task) {
          std::thread other([&] {
            const ScopedFlushToZero ftz;
            for (int64_t i = 1; i < n; i += 2) task(i);
          });
          for (int64_t i = 0; i < n; i += 2) task(i);
          other.join();
        };
      }
      SCOPED_TRACE(mpg_test::path_name(path) + (threads < 0
                                                    ? ", caller's parallel_for"
                                                    : ", threads = " + std::to_string(threads)));
      f(options);
    }
  }
}

// Every token t sums two G rows. Column 0: two copies of the smallest subnormal of T, so a
// flushed input gives +0 instead of 2 * that. Column 1: 1.5 * 2^-126 + (-2^-126) = 2^-127, a
// subnormal fp32 sum of normal inputs, so a flushed output gives +0 (fp32 and bf16; fp16's is
// a normal number). Column 2: a normal sum, unchanged either way.
TYPED_TEST(FpEnvOp, FlushingCallerStillGetsSubnormals) {
  using T = TypeParam;
  using Bits = mpg_test::Bits<T>;
  constexpr bool kIsFloat = std::is_same_v<T, float>;
  constexpr int64_t kTokens = 64;  // enough tokens for several tasks on two threads
  constexpr int64_t kHidden = 40;  // SIMD blocks and a tail
  const T smallest_subnormal = mpg_test::from_bits<T>(Bits{1});
  const T twice_smallest = mpg_test::from_bits<T>(Bits{2});
  const float two_pow_126 = 1.17549435e-38f;
  GuardedMatrix<T> grad(2 * kTokens, kHidden);
  std::vector<int32_t> sorted_indices(2 * kTokens);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t k = 0; k < 2; ++k) {
      const int64_t row = 2 * t + k;
      sorted_indices[static_cast<size_t>(row)] = static_cast<int32_t>(row);
      for (int64_t h = 0; h < kHidden; ++h) grad.at(row, h) = T(0.25f);
      grad.at(row, 0) = smallest_subnormal;
      grad.at(row, 1) = T(k == 0 ? 1.5f * two_pow_126 : -two_pow_126);
    }
  }
  // 2^-127 in each format: fp32 0x00400000 and bf16 0x0040 (subnormal); fp16 0x0000 (it is far
  // below fp16's smallest subnormal 2^-24, and so are the inputs, which round to 0 in fp16).
  const Bits want_column1 = kIsFloat                           ? Bits(0x00400000u)
                            : std::is_same_v<T, mpg::bfloat16> ? Bits(0x0040)
                                                               : Bits(0);
  const ScopedFlushToZero ftz;
  const uint64_t caller = read_control();
  for_each_run([&](const mpg::Options& options) {
    GuardedMatrix<T> out(kTokens, kHidden);
    const mpg::Status s =
        mpg_test::run_permute_grad(grad, sorted_indices, 2, Mode::kDropless, out, options);
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t t = 0; t < kTokens; ++t) {
      ASSERT_EQ(mpg_test::bits_of(out.at(t, 0)), mpg_test::bits_of(twice_smallest)) << "t " << t;
      ASSERT_EQ(mpg_test::bits_of(out.at(t, 1)), want_column1) << "t " << t;
      ASSERT_EQ(static_cast<float>(out.at(t, 2)), 0.5f) << "t " << t;
    }
    EXPECT_EQ(read_control(), caller);
  });
}

}  // namespace
