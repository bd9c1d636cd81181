// Misuse: out sharing memory with permuted_output_grad, sorted_indices or the workspace.
// The exact strided check (detail/overlap.hpp) against a brute-force byte set on many random
// small layouts, then the same rules through the typed and two-phase APIs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "mpg/mpg.hpp"

namespace {

using mpg::detail::ByteRows;

std::set<uintptr_t> byte_set(const ByteRows& v) {
  std::set<uintptr_t> bytes;
  if (v.empty()) return bytes;
  for (int64_t r = 0; r < v.rows; ++r) {
    for (int64_t b = 0; b < v.row_bytes; ++b) {
      bytes.insert(v.begin + static_cast<uintptr_t>(r * v.stride_bytes + b));
    }
  }
  return bytes;
}

bool brute_force_overlaps(const ByteRows& a, const ByteRows& b) {
  const std::set<uintptr_t> sa = byte_set(a);
  for (uintptr_t x : byte_set(b)) {
    if (sa.count(x) != 0) return true;
  }
  return false;
}

std::string describe(const ByteRows& v) {
  return "{begin " + std::to_string(v.begin) + ", rows " + std::to_string(v.rows) + ", row_bytes " +
         std::to_string(v.row_bytes) + ", stride " + std::to_string(v.stride_bytes) + "}";
}

// Addresses far from 0 so that views starting before another are representable.
constexpr uintptr_t kBase = uintptr_t{1} << 20;

TEST(OverlapCheck, InterleavedRowsDoNotOverlap) {
  // Rows of 16 bytes every 32: a second view shifted by 16 fills exactly the gaps.
  const ByteRows a{kBase, 8, 16, 32};
  const ByteRows b{kBase + 16, 8, 16, 32};
  EXPECT_FALSE(mpg::detail::overlaps(a, b));
  EXPECT_FALSE(mpg::detail::overlaps(b, a));
}

TEST(OverlapCheck, OneSharedByteOverlaps) {
  const ByteRows a{kBase, 8, 16, 32};
  // Shifted by 15: each row of b starts on the last byte of a row of a.
  EXPECT_TRUE(mpg::detail::overlaps(a, {kBase + 15, 8, 16, 32}));
  // Shifted by 16 but one byte longer: the last byte of each b row is the first of the next a row.
  EXPECT_TRUE(mpg::detail::overlaps(a, {kBase + 16, 8, 17, 32}));
  // A single byte right after the last row of a does not; the last byte of it does.
  EXPECT_FALSE(mpg::detail::overlaps(a, {kBase + 7 * 32 + 16, 1, 1, 0}));
  EXPECT_TRUE(mpg::detail::overlaps(a, {kBase + 7 * 32 + 15, 1, 1, 0}));
  // A single byte in a gap between rows does not.
  EXPECT_FALSE(mpg::detail::overlaps(a, {kBase + 3 * 32 + 20, 1, 1, 0}));
}

TEST(OverlapCheck, PartialRowOverlap) {
  const ByteRows wide{kBase, 4, 64, 128};
  // A narrow view whose single row straddles the end of row 2 of `wide`.
  EXPECT_TRUE(mpg::detail::overlaps(wide, {kBase + 2 * 128 + 60, 1, 8, 0}));
  // Rows that fit in the gaps of `wide` but whose last row reaches into row 3.
  EXPECT_FALSE(mpg::detail::overlaps(wide, {kBase + 64, 3, 64, 128}));
  EXPECT_TRUE(mpg::detail::overlaps(wide, {kBase + 64, 3, 65, 128}));
}

TEST(OverlapCheck, EmptyViewsNeverOverlap) {
  const ByteRows a{kBase, 4, 16, 16};
  EXPECT_FALSE(mpg::detail::overlaps(a, {kBase, 0, 16, 16}));
  EXPECT_FALSE(mpg::detail::overlaps(a, {kBase, 4, 0, 16}));
  EXPECT_FALSE(mpg::detail::overlaps({kBase, 0, 0, 0}, {kBase, 0, 0, 0}));
}

TEST(OverlapCheck, MatchesBruteForceOnRandomLayouts) {
  std::mt19937_64 rng(20261202);
  const auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int overlapping = 0;
  constexpr int kCases = 20000;
  for (int i = 0; i < kCases; ++i) {
    ByteRows v[2];
    for (ByteRows& x : v) {
      x.begin = kBase + static_cast<uintptr_t>(pick(0, 96));
      x.rows = pick(0, 6);
      x.row_bytes = pick(0, 12);
      // Mostly strides of at least a row (what validation lets through), some shorter ones.
      x.stride_bytes = pick(0, 3) == 0 ? pick(0, x.row_bytes) : x.row_bytes + pick(0, 20);
    }
    const bool expected = brute_force_overlaps(v[0], v[1]);
    overlapping += expected ? 1 : 0;
    ASSERT_EQ(mpg::detail::overlaps(v[0], v[1]), expected)
        << describe(v[0]) << " vs " << describe(v[1]);
    ASSERT_EQ(mpg::detail::overlaps(v[1], v[0]), expected)
        << describe(v[1]) << " vs " << describe(v[0]);
  }
  // Both outcomes are well represented, so the comparison means something.
  EXPECT_GT(overlapping, kCases / 10);
  EXPECT_LT(overlapping, kCases * 9 / 10);
}

// The typed API on float views inside one shared buffer. grad rows use every other `gap`;
// out lands at an element offset with its own stride.
struct SharedBufferCase {
  int64_t grad_stride;
  int64_t out_offset;  // elements from the start of the buffer (grad starts at 0)
  int64_t out_stride;
};

TEST(OverlapApi, StridedViewsInOneBufferMatchBruteForce) {
  constexpr int64_t kHidden = 3;
  constexpr int64_t kTopk = 2;
  constexpr int64_t kTokens = 2;
  const std::vector<int32_t> indices = {3, 0, 1, 2};  // dropless, R = 4
  int accepted = 0;
  int rejected = 0;
  for (int64_t grad_stride = kHidden; grad_stride <= 2 * kHidden + 1; ++grad_stride) {
    for (int64_t out_stride = kHidden; out_stride <= 2 * kHidden + 1; ++out_stride) {
      for (int64_t out_offset = 0; out_offset < 4 * grad_stride + 2; ++out_offset) {
        std::vector<float> buffer(static_cast<size_t>(4 * grad_stride + 4 * out_stride + 8));
        for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i + 1);
        const std::vector<float> before = buffer;
        const ByteRows grad_bytes{reinterpret_cast<uintptr_t>(buffer.data()), 4, kHidden * 4,
                                  grad_stride * 4};
        const ByteRows out_bytes{reinterpret_cast<uintptr_t>(buffer.data() + out_offset), kTokens,
                                 kHidden * 4, out_stride * 4};
        const bool shared = brute_force_overlaps(grad_bytes, out_bytes);
        const mpg::Status s = mpg::permute_grad(
            mpg::MatrixView(buffer.data(), 4, kHidden, grad_stride), indices, kTopk,
            mpg::Mode::kDropless,
            mpg::MatrixView(buffer.data() + out_offset, kTokens, kHidden, out_stride));
        const std::string where = "grad stride " + std::to_string(grad_stride) + ", out at " +
                                  std::to_string(out_offset) + " stride " +
                                  std::to_string(out_stride);
        if (shared) {
          ++rejected;
          ASSERT_EQ(s.code(), mpg::ErrorCode::kOverlap) << where << ": " << s.message();
          ASSERT_EQ(buffer, before) << where;
          continue;
        }
        ++accepted;
        ASSERT_TRUE(s.ok()) << where << ": " << s.message();
        // Token t sums grad rows indices[2t], indices[2t+1] (values from `before`).
        for (int64_t t = 0; t < kTokens; ++t) {
          for (int64_t h = 0; h < kHidden; ++h) {
            const float expected = before[indices[2 * t] * grad_stride + h] +
                                   before[indices[2 * t + 1] * grad_stride + h];
            ASSERT_EQ(buffer[out_offset + t * out_stride + h], expected) << where;
          }
        }
      }
    }
  }
  EXPECT_GT(accepted, 10);
  EXPECT_GT(rejected, 10);
}

TEST(OverlapApi, OutInsideIndicesIsRejected) {
  const std::vector<float> grad = {1, 2, 3, 4};
  std::vector<int32_t> storage = {3, 0, 1, 2, 0, 0};  // indices, then 2 spare elements
  const std::vector<int32_t> before = storage;
  // out [2, 1] float over indices[2..3]: same bytes as two of the index values.
  auto* out = reinterpret_cast<float*>(storage.data() + 2);
  const mpg::Status s =
      mpg::permute_grad(mpg::MatrixView(grad.data(), 4, 1), mpg::IndexView(storage.data(), 4), 2,
                        mpg::Mode::kDropless, mpg::MatrixView(out, 2, 1));
  EXPECT_EQ(s.code(), mpg::ErrorCode::kOverlap) << s.message();
  EXPECT_EQ(s.message(), "out overlaps sorted_indices in memory");
  EXPECT_EQ(storage, before);
  // Right after the indices it is fine.
  auto* after = reinterpret_cast<float*>(storage.data() + 4);
  const mpg::Status ok =
      mpg::permute_grad(mpg::MatrixView(grad.data(), 4, 1), mpg::IndexView(storage.data(), 4), 2,
                        mpg::Mode::kDropless, mpg::MatrixView(after, 2, 1));
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(after[0], 4.0f + 1.0f);
  EXPECT_EQ(after[1], 2.0f + 3.0f);
}

TEST(OverlapApi, ZeroSizeOutMayShareAnAddress) {
  std::vector<float> grad = {1, 2, 3, 4};
  // H = 0: out and grad hold no bytes, so the same pointer is not an overlap.
  const std::vector<int32_t> indices = {0, 1, 2, 3};
  const mpg::Status s = mpg::permute_grad(mpg::MatrixView(grad.data(), 4, 0), indices, 2,
                                          mpg::Mode::kDropless, mpg::MatrixView(grad.data(), 2, 0));
  EXPECT_TRUE(s.ok()) << s.message();
  // N = 0: no out rows at all.
  const mpg::Status empty =
      mpg::permute_grad(mpg::MatrixView(grad.data(), 0, 4), mpg::IndexView(indices.data(), 0), 2,
                        mpg::Mode::kDropless, mpg::MatrixView(grad.data(), 0, 4));
  EXPECT_TRUE(empty.ok()) << empty.message();
  EXPECT_EQ(grad, (std::vector<float>{1, 2, 3, 4}));
}

// The two-phase API: the same check in phase one, status 161002.
TEST(OverlapApi, TwoPhaseReportsInvalidParameter) {
  namespace acl = mpg::aclnn;
  std::vector<float> grad(8, 1.0f);  // [4, 2]
  const std::vector<int32_t> indices = {3, 0, 1, 2};
  const int64_t grad_dims[] = {4, 2};
  const int64_t index_dims[] = {4};
  const int64_t out_dims[] = {2, 2};
  acl::Tensor* g = acl::CreateTensor(grad_dims, 2, acl::DataType::kFloat, nullptr, 0, grad.data());
  acl::Tensor* s = acl::CreateTensor(index_dims, 1, acl::DataType::kInt32, nullptr, 0,
                                     const_cast<int32_t*>(indices.data()));
  // out = grad rows 2..3 (offset 4 elements).
  acl::Tensor* o = acl::CreateTensor(out_dims, 2, acl::DataType::kFloat, nullptr, 4, grad.data());
  uint64_t workspace_size = 0;
  acl::Executor* executor = nullptr;
  EXPECT_EQ(acl::MoeTokenPermuteGradGetWorkspaceSize(g, s, 2, false, o, &workspace_size, &executor),
            acl::kErrParamInvalid);
  EXPECT_EQ(executor, nullptr);
  EXPECT_STREQ(acl::GetLastErrorMessage(), "out overlaps permuted_output_grad in memory");
  acl::DestroyTensor(g);
  acl::DestroyTensor(s);
  acl::DestroyTensor(o);
  EXPECT_EQ(grad, std::vector<float>(8, 1.0f));
}

// Phase two zeroes its workspace before checking the indices: a workspace laid over out, grad
// or the indices would write out before any check, or corrupt the inputs. It is refused.
TEST(OverlapApi, WorkspaceOverInputsOrOutIsRejected) {
  namespace acl = mpg::aclnn;
  std::vector<float> grad = {1, 2, 3, 4, 5, 6, 7, 8};  // [4, 2]
  std::vector<int32_t> indices = {3, 0, 1, 2};
  std::vector<float> out(4, -1.0f);
  const int64_t grad_dims[] = {4, 2};
  const int64_t index_dims[] = {4};
  const int64_t out_dims[] = {2, 2};
  const auto plan = [&](uint64_t* size) {
    acl::Tensor* g =
        acl::CreateTensor(grad_dims, 2, acl::DataType::kFloat, nullptr, 0, grad.data());
    acl::Tensor* s =
        acl::CreateTensor(index_dims, 1, acl::DataType::kInt32, nullptr, 0, indices.data());
    acl::Tensor* o = acl::CreateTensor(out_dims, 2, acl::DataType::kFloat, nullptr, 0, out.data());
    acl::Executor* executor = nullptr;
    EXPECT_EQ(acl::MoeTokenPermuteGradGetWorkspaceSize(g, s, 2, false, o, size, &executor),
              acl::kSuccess);
    acl::DestroyTensor(g);
    acl::DestroyTensor(s);
    acl::DestroyTensor(o);
    return executor;
  };
  uint64_t size = 0;
  for (void* workspace : {static_cast<void*>(out.data() + 1), static_cast<void*>(grad.data() + 7),
                          static_cast<void*>(indices.data())}) {
    acl::Executor* executor = plan(&size);
    ASSERT_GT(size, 0u);
    EXPECT_EQ(acl::MoeTokenPermuteGrad(workspace, size, executor), acl::kErrParamInvalid);
    EXPECT_NE(std::string(acl::GetLastErrorMessage()).find("workspace overlaps"), std::string::npos)
        << acl::GetLastErrorMessage();
  }
  EXPECT_EQ(out, std::vector<float>(4, -1.0f));
  EXPECT_EQ(indices, (std::vector<int32_t>{3, 0, 1, 2}));
  EXPECT_EQ(grad, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  // A workspace of its own works.
  std::vector<uint8_t> workspace(size);
  EXPECT_EQ(acl::MoeTokenPermuteGrad(workspace.data(), size, plan(&size)), acl::kSuccess);
  EXPECT_EQ(out, (std::vector<float>{7 + 1, 8 + 2, 3 + 5, 4 + 6}));
}

}  // namespace
