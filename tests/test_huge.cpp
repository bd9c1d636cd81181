// Tensors beyond 2^31 elements, where 32-bit offset arithmetic would wrap. Padded mode reads
// only the rows its indices name, so permuted_output_grad (and a strided out) live in address
// space reserved with MAP_NORESERVE and only the touched rows cost memory. The dropless case
// reads every row of a 4.3 GB grad: opt-in with MPG_LONG_TESTS=1.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mpg/mpg.hpp"
#include "test_util.hpp"

namespace {

constexpr int64_t k2To31 = int64_t{1} << 31;

// Anonymous memory that is reserved, not committed: untouched pages read as zero and cost
// nothing. Tests skip when the system refuses the reservation.
class NoReserveMapping {
 public:
  explicit NoReserveMapping(int64_t bytes) : bytes_(static_cast<size_t>(bytes)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : p;
  }
  ~NoReserveMapping() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  NoReserveMapping(const NoReserveMapping&) = delete;
  NoReserveMapping& operator=(const NoReserveMapping&) = delete;

  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  bool ok() const { return data_ != nullptr; }

 private:
  size_t bytes_;
  void* data_ = nullptr;
};

#define MPG_SKIP_UNLESS_MAPPED(mapping) \
  if (!(mapping).ok()) GTEST_SKIP() << "mmap(MAP_NORESERVE) refused " #mapping

template <class T>
uint32_t bits_of(T x) {
  uint32_t b = 0;
  std::memcpy(&b, &x, sizeof(T));
  return b;
}

// Small values with few significant bits: every sum of a few of them is exact in fp32, so
// the expected out is exact too, whatever the order.
float value_at(int64_t row, int64_t col) {
  return static_cast<float>((row * 7 + col * 3) % 17 - 8) * 0.5f;
}

std::vector<mpg::Options> all_paths() {
  const mpg::Options reference = mpg_test::path_options(mpg_test::kReferencePath);
  mpg::Options two_threads;
  two_threads.num_threads = 2;
  return {reference, mpg::Options{}, two_threads};
}

template <class T>
class HugePadded : public ::testing::Test {};
TYPED_TEST_SUITE(HugePadded, mpg_test::ElementTypes, mpg_test::ElementTypeNames);

// grad [E*C, H] with E*C*H > 2^31 elements, rows beyond element 2^31 indexed with int32; out
// strided so that its rows also sit beyond 2^31 elements. Only the named rows are touched.
TYPED_TEST(HugePadded, FarRowsAndFarOutRows) {
  using T = TypeParam;
  constexpr int64_t kHidden = 4096;
  constexpr int64_t kRows = (int64_t{1} << 20) + 5;  // * kHidden = 2^32 + 20480 elements
  constexpr int64_t kTopk = 3;
  constexpr int64_t kTokens = 3;
  constexpr int64_t kOutStride = k2To31 + kHidden;  // row 1 starts past element 2^31
  static_assert(kRows * kHidden > 2 * k2To31, "grad must exceed 2^32 elements");
  NoReserveMapping grad(kRows * kHidden * static_cast<int64_t>(sizeof(T)));
  NoReserveMapping out((kTokens - 1) * kOutStride * static_cast<int64_t>(sizeof(T)) +
                       (kHidden + 64) * static_cast<int64_t>(sizeof(T)));
  MPG_SKIP_UNLESS_MAPPED(grad);
  MPG_SKIP_UNLESS_MAPPED(out);

  const std::vector<int32_t> indices = {
      static_cast<int32_t>(kRows - 1),
      -1,
      (1 << 19) + 3,  // token 0: far row, dropped, middle
      -1,
      -1,
      -1,  // token 1: all dropped -> +0
      7,
      static_cast<int32_t>(kRows - 2),
      0,  // token 2
  };
  for (int32_t r : indices) {
    if (r < 0) continue;
    T* row = grad.as<T>() + int64_t{r} * kHidden;
    for (int64_t h = 0; h < kHidden; ++h) row[h] = T(value_at(r, h));
  }
  const T sentinel = T(-1234.0f);
  for (const mpg::Options& options : all_paths()) {
    // Each out row, and the element after it (in the stride gap), starts as the sentinel.
    for (int64_t t = 0; t < kTokens; ++t) {
      T* row = out.as<T>() + t * kOutStride;
      for (int64_t h = 0; h <= kHidden; ++h) row[h] = sentinel;
    }
    const mpg::Status s = mpg::permute_grad(
        mpg::MatrixView(grad.as<T>(), kRows, kHidden), indices, kTopk, mpg::Mode::kPadded,
        mpg::MatrixView(out.as<T>(), kTokens, kHidden, kOutStride), options);
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t t = 0; t < kTokens; ++t) {
      const T* row = out.as<T>() + t * kOutStride;
      for (int64_t h = 0; h < kHidden; ++h) {
        float sum = 0.0f;
        for (int64_t k = 0; k < kTopk; ++k) {
          const int32_t r = indices[t * kTopk + k];
          if (r >= 0) sum += value_at(r, h);
        }
        ASSERT_EQ(bits_of(row[h]), bits_of(T(sum))) << "token " << t << " column " << h;
      }
      ASSERT_EQ(bits_of(row[kHidden]), bits_of(sentinel)) << "gap after out row " << t;
    }
  }
}

// int64 indices naming rows beyond 2^31 (H = 2: the row numbers themselves need 64 bits), and
// int32's largest row, whose element offset is past 2^32.
TEST(HugeIndices, Int64RowsBeyond2To31) {
  constexpr int64_t kHidden = 2;
  constexpr int64_t kRows = k2To31 + 4096;
  NoReserveMapping grad(kRows * kHidden * static_cast<int64_t>(sizeof(mpg::half)));
  MPG_SKIP_UNLESS_MAPPED(grad);
  const std::vector<int64_t> indices = {kRows - 1, -1, k2To31 + 17, k2To31 - 1, 3, k2To31};
  for (int64_t r : indices) {
    if (r < 0) continue;
    for (int64_t h = 0; h < kHidden; ++h) {
      grad.as<mpg::half>()[r * kHidden + h] = mpg::half(value_at(r, h));
    }
  }
  for (const mpg::Options& options : all_paths()) {
    mpg::half out[3 * kHidden];
    const mpg::Status s =
        mpg::permute_grad(mpg::MatrixView(grad.as<mpg::half>(), kRows, kHidden), indices, 2,
                          mpg::Mode::kPadded, mpg::MatrixView(out, 3, kHidden), options);
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t t = 0; t < 3; ++t) {
      for (int64_t h = 0; h < kHidden; ++h) {
        float sum = 0.0f;
        for (int64_t k = 0; k < 2; ++k) {
          if (indices[t * 2 + k] >= 0) sum += value_at(indices[t * 2 + k], h);
        }
        EXPECT_EQ(bits_of(out[t * kHidden + h]), bits_of(mpg::half(sum)))
            << "token " << t << " column " << h;
      }
    }
  }
  // And the row just past the end is rejected with its 64-bit value in the message.
  const std::vector<int64_t> bad = {kRows, 0};
  mpg::half out[kHidden];
  const mpg::Status s =
      mpg::permute_grad(mpg::MatrixView(grad.as<mpg::half>(), kRows, kHidden), bad, 2,
                        mpg::Mode::kPadded, mpg::MatrixView(out, 1, kHidden));
  EXPECT_EQ(s.code(), mpg::ErrorCode::kIndexOutOfRange);
  EXPECT_NE(s.message().find(std::to_string(kRows)), std::string::npos) << s.message();
}

// int32 indices up to INT32_MAX with a row stride that puts the last row past 2^32 elements.
TEST(HugeIndices, Int32LargestRowWithWideStride) {
  constexpr int64_t kHidden = 2;
  constexpr int64_t kRows = k2To31;  // int32 reaches row 2^31 - 1
  NoReserveMapping grad(kRows * kHidden * static_cast<int64_t>(sizeof(float)));
  MPG_SKIP_UNLESS_MAPPED(grad);
  const std::vector<int32_t> indices = {INT32_MAX, 1, INT32_MAX - 1, -1};
  for (int32_t r : indices) {
    if (r < 0) continue;
    for (int64_t h = 0; h < kHidden; ++h) {
      grad.as<float>()[int64_t{r} * kHidden + h] = value_at(r, h);
    }
  }
  for (const mpg::Options& options : all_paths()) {
    float out[2 * kHidden];
    const mpg::Status s =
        mpg::permute_grad(mpg::MatrixView(grad.as<float>(), kRows, kHidden), indices, 2,
                          mpg::Mode::kPadded, mpg::MatrixView(out, 2, kHidden), options);
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t h = 0; h < kHidden; ++h) {
      EXPECT_EQ(out[h], value_at(INT32_MAX, h) + value_at(1, h));
      EXPECT_EQ(out[kHidden + h], value_at(INT32_MAX - 1, h));
    }
  }
}

bool long_tests_enabled() {
  const char* env = std::getenv("MPG_LONG_TESTS");
  return env != nullptr && std::string(env) == "1";
}

// Dropless: every row of grad is read. grad [R, 8192] bf16 with R * H > 2^31 is 4.3 GB of
// address space of which the test writes only a few rows; reading the rest may still commit it
// (transparent huge pages: 4.7 GB peak RSS measured), plus a 0.5 GB out. About 40 CPU-seconds.
TEST(HugeDropless, RowsTimesHiddenBeyond2To31) {
  if (!long_tests_enabled()) GTEST_SKIP() << "set MPG_LONG_TESTS=1 to run";
  using T = mpg::bfloat16;
  constexpr int64_t kHidden = 8192;
  constexpr int64_t kTopk = 8;
  constexpr int64_t kTokens = 32800;
  constexpr int64_t kDropped = 100;
  constexpr int64_t kRows = kTokens * kTopk - kDropped;
  static_assert(kRows * kHidden > k2To31, "grad must exceed 2^31 elements");
  NoReserveMapping grad(kRows * kHidden * static_cast<int64_t>(sizeof(T)));
  MPG_SKIP_UNLESS_MAPPED(grad);
  // Expert-major layout: copy (t, k) is row k*N + t, so the last kDropped copies of expert 7
  // (tokens N-100 .. N-1) fall beyond R and are dropped.
  std::vector<int32_t> indices(static_cast<size_t>(kTokens * kTopk));
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t k = 0; k < kTopk; ++k)
      indices[t * kTopk + k] = static_cast<int32_t>(k * kTokens + t);
  }
  // Written rows: all copies of token 0, of token N-101 (whose k = 7 copy is row R-1, the last),
  // and of token N-1 (whose k = 7 copy was dropped).
  const int64_t written_tokens[] = {0, kTokens - 1 - kDropped, kTokens - 1};
  for (int64_t t : written_tokens) {
    for (int64_t k = 0; k < kTopk; ++k) {
      const int64_t r = k * kTokens + t;
      if (r >= kRows) continue;
      for (int64_t h = 0; h < kHidden; ++h) grad.as<T>()[r * kHidden + h] = T(value_at(r, h));
    }
  }
  for (const mpg::Options& options : {mpg::Options{}, all_paths()[0]}) {
    std::vector<T> out(static_cast<size_t>(kTokens * kHidden), T(-1.0f));
    const mpg::Status s = mpg::permute_grad(mpg::MatrixView(grad.as<T>(), kRows, kHidden), indices,
                                            kTopk, mpg::Mode::kDropless,
                                            mpg::MatrixView(out.data(), kTokens, kHidden), options);
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<T> expected(static_cast<size_t>(kHidden));
    for (int64_t t = 0; t < kTokens; ++t) {
      const bool written =
          t == written_tokens[0] || t == written_tokens[1] || t == written_tokens[2];
      for (int64_t h = 0; h < kHidden; ++h) {
        float sum = 0.0f;
        for (int64_t k = 0; written && k < kTopk; ++k) {
          const int64_t r = k * kTokens + t;
          if (r < kRows) sum += value_at(r, h);
        }
        // Tokens whose rows are all untouched sum zero pages: +0.
        ASSERT_EQ(bits_of(out[t * kHidden + h]), bits_of(T(sum))) << "token " << t << " col " << h;
      }
    }
  }
}

// MoeTokenPermute with token rows and output rows 2^31 + 64 bytes apart (int8): the copies'
// byte offsets exceed 2^31 on both sides. Token 1 goes to rank 0, token 0 to rank 1.
TEST(HugeTokenPermute, RowOffsetsBeyond2To31Bytes) {
  constexpr int64_t kHidden = 64;
  constexpr int64_t kStride = k2To31 + kHidden;
  NoReserveMapping tokens(kStride + kHidden);
  NoReserveMapping permuted(kStride + kHidden);
  MPG_SKIP_UNLESS_MAPPED(tokens);
  MPG_SKIP_UNLESS_MAPPED(permuted);
  for (int64_t h = 0; h < kHidden; ++h) {
    tokens.as<int8_t>()[h] = static_cast<int8_t>(h);
    tokens.as<int8_t>()[kStride + h] = static_cast<int8_t>(-1 - h);
  }
  const std::vector<int64_t> expert_ids = {5, 2};
  for (const mpg::Options& options : all_paths()) {
    std::vector<int32_t> sorted(2, -1);
    const mpg::Status s = mpg::token_permute(
        mpg::ConstMatrixView<int8_t>(tokens.as<int8_t>(), 2, kHidden, kStride), expert_ids, 1, 0,
        mpg::MatrixView<int8_t>(permuted.as<int8_t>(), 2, kHidden, kStride), sorted, options);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(sorted, (std::vector<int32_t>{1, 0}));
    for (int64_t h = 0; h < kHidden; ++h) {
      ASSERT_EQ(permuted.as<int8_t>()[h], static_cast<int8_t>(-1 - h));
      ASSERT_EQ(permuted.as<int8_t>()[kStride + h], static_cast<int8_t>(h));
    }
  }
}

}  // namespace
