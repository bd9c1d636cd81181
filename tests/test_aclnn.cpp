// The two-phase API end to end, as the vendor sample uses it: create tensors, ask the workspace
// size, allocate, run, destroy. Results must equal the typed reference path bit for bit.
#include "test_util.hpp"

#include <tuple>

namespace {

using mpg::Mode;
using mpg::aclnn::DataType;
using mpg::aclnn::Executor;
using mpg::aclnn::Tensor;
using mpg_test::GuardedMatrix;

using mpg::aclnn::data_type_of;

struct TensorSpec {
  TensorSpec(std::vector<int64_t> dims_, std::vector<int64_t> strides_ = {}, int64_t offset_ = 0)
      : dims(std::move(dims_)), strides(std::move(strides_)), offset(offset_) {}
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;  // empty: contiguous
  int64_t offset;
};

// Phase one, allocation, phase two; the tensor descriptors are destroyed between the phases
// (allowed: only their data must stay alive).
int32_t run_two_phase(const TensorSpec& grad, DataType dtype, void* grad_base,
                      const TensorSpec& index, DataType index_dtype, void* index_base, int64_t topk,
                      bool padded, const TensorSpec& out, void* out_base,
                      uint64_t* asked = nullptr) {
  using namespace mpg::aclnn;
  const auto make = [](const TensorSpec& s, DataType d, void* base) {
    return CreateTensor(s.dims.data(), s.dims.size(), d,
                        s.strides.empty() ? nullptr : s.strides.data(), s.offset, base);
  };
  Tensor* g = make(grad, dtype, grad_base);
  Tensor* s = make(index, index_dtype, index_base);
  Tensor* o = make(out, dtype, out_base);
  uint64_t workspace_size = 0;
  Executor* executor = nullptr;
  const int32_t first =
      MoeTokenPermuteGradGetWorkspaceSize(g, s, topk, padded, o, &workspace_size, &executor);
  DestroyTensor(g);
  DestroyTensor(s);
  DestroyTensor(o);
  if (first != kSuccess) return first;
  EXPECT_NE(executor, nullptr);
  EXPECT_STREQ(GetLastErrorMessage(), "");
  if (asked != nullptr) *asked = workspace_size;
  std::vector<uint8_t> workspace(workspace_size);
  return MoeTokenPermuteGrad(workspace_size ? workspace.data() : nullptr, workspace_size, executor);
}

template <class T, class I>
void expect_matches_reference(const GuardedMatrix<T>& grad, const std::vector<I>& indices,
                              int64_t topk, Mode mode, const GuardedMatrix<T>& got) {
  GuardedMatrix<T> want(got.rows(), got.cols(), got.row_stride());
  const mpg::Options reference = mpg_test::path_options(mpg_test::kReferencePath);
  ASSERT_TRUE(mpg_test::run_permute_grad(grad, indices, topk, mode, want, reference).ok());
  EXPECT_TRUE(got.same_bytes(want)) << mpg_test::first_difference(got, want);
  EXPECT_TRUE(got.guards_intact());
  EXPECT_TRUE(got.row_gaps_untouched());
}

using Param = std::tuple<mpg::DType, mpg::IndexType, Mode>;
class TwoPhase : public ::testing::TestWithParam<Param> {};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [dtype, index_type, mode] = info.param;
  return mpg_test::short_name(dtype) + "_" + mpg_test::short_name(index_type) + "_" +
         mpg_test::short_name(mode);
}

// The realistic call: contiguous [R, H] (dropless) or [E, C, H] (padded) gradients.
TEST_P(TwoPhase, ContiguousEndToEnd) {
  const auto [dtype, index_type, mode] = GetParam();
  mpg::detail::dispatch(dtype, index_type, mode, [&, mode = mode](auto t, auto i, auto) {
    using T = typename decltype(t)::type;
    using I = typename decltype(i)::type;
    std::mt19937_64 rng(42);
    constexpr int64_t kTokens = 96, kTopK = 4, kExperts = 8, kHidden = 136;
    auto routing = mpg_test::make_routing<I>(rng, mode, kTokens, kTopK, kExperts);
    GuardedMatrix<T> grad(routing.grad_rows, kHidden);
    mpg_test::fill_random(grad, rng);
    GuardedMatrix<T> out(kTokens, kHidden);
    const TensorSpec grad_spec{mode == Mode::kPadded
                                   ? std::vector<int64_t>{kExperts, routing.capacity, kHidden}
                                   : std::vector<int64_t>{routing.grad_rows, kHidden}};
    uint64_t asked = 0;
    ASSERT_EQ(run_two_phase(grad_spec, data_type_of<T>(), grad.data(), {{kTokens * kTopK}},
                            data_type_of<I>(), routing.sorted_indices.data(), kTopK,
                            mode == Mode::kPadded, {{kTokens, kHidden}}, out.data(), &asked),
              mpg::aclnn::kSuccess)
        << mpg::aclnn::GetLastErrorMessage();
    EXPECT_STREQ(mpg::aclnn::GetLastErrorMessage(), "");
    // One bit per admissible index value: N*K (dropless) or E*C (padded), rounded up to bytes.
    const int64_t bits = mode == Mode::kDropless ? kTokens * kTopK : routing.grad_rows;
    EXPECT_EQ(asked, static_cast<uint64_t>((bits + 7) / 8));
    expect_matches_reference(grad, routing.sorted_indices, kTopK, mode, out);
  });
}

// Rows further apart than H, and data starting `offset` elements into the buffers.
TEST_P(TwoPhase, StridedRowsAndOffsets) {
  const auto [dtype, index_type, mode] = GetParam();
  mpg::detail::dispatch(dtype, index_type, mode, [&, mode = mode](auto t, auto i, auto) {
    using T = typename decltype(t)::type;
    using I = typename decltype(i)::type;
    std::mt19937_64 rng(43);
    constexpr int64_t kTokens = 33, kTopK = 3, kExperts = 6, kHidden = 40;
    constexpr int64_t kGradStride = kHidden + 24, kOutStride = kHidden + 3;
    constexpr int64_t kGradOffset = 5, kOutOffset = 1;
    auto routing = mpg_test::make_routing<I>(rng, mode, kTokens, kTopK, kExperts);
    // The typed view of the same memory the tensors describe.
    GuardedMatrix<T> grad_storage(routing.grad_rows + 1, kGradStride);
    GuardedMatrix<T> out_storage(kTokens + 1, kOutStride);
    GuardedMatrix<T> grad(routing.grad_rows, kHidden, kGradStride);
    mpg_test::fill_random(grad, rng);
    for (int64_t r = 0; r < routing.grad_rows; ++r) {
      std::copy(&grad.at(r, 0), &grad.at(r, 0) + kHidden,
                grad_storage.data() + kGradOffset + r * kGradStride);
    }
    const TensorSpec grad_spec =
        mode == Mode::kPadded
            ? TensorSpec{{kExperts, routing.capacity, kHidden},
                         {routing.capacity * kGradStride, kGradStride, 1},
                         kGradOffset}
            : TensorSpec{{routing.grad_rows, kHidden}, {kGradStride, 1}, kGradOffset};
    ASSERT_EQ(run_two_phase(grad_spec, data_type_of<T>(), grad_storage.data(), {{kTokens * kTopK}},
                            data_type_of<I>(), routing.sorted_indices.data(), kTopK,
                            mode == Mode::kPadded,
                            {{kTokens, kHidden}, {kOutStride, 1}, kOutOffset}, out_storage.data()),
              mpg::aclnn::kSuccess)
        << mpg::aclnn::GetLastErrorMessage();
    GuardedMatrix<T> want(kTokens, kHidden);
    const mpg::Options reference = mpg_test::path_options(mpg_test::kReferencePath);
    ASSERT_TRUE(
        mpg_test::run_permute_grad(grad, routing.sorted_indices, kTopK, mode, want, reference)
            .ok());
    // Every element outside the out rows must still hold the sentinel.
    const auto* base = out_storage.data();
    const int64_t total = kTokens * kOutStride + kOutStride;
    for (int64_t e = 0; e < total; ++e) {
      const int64_t rel = e - kOutOffset;
      const bool inside = rel >= 0 && rel / kOutStride < kTokens && rel % kOutStride < kHidden;
      if (inside) {
        ASSERT_EQ(mpg_test::bits_of(base[e]),
                  mpg_test::bits_of(want.at(rel / kOutStride, rel % kOutStride)))
            << "out[" << rel / kOutStride << "][" << rel % kOutStride << "]";
      } else {
        const auto* bytes = reinterpret_cast<const uint8_t*>(base + e);
        for (size_t b = 0; b < sizeof(T); ++b) {
          ASSERT_EQ(bytes[b], mpg_test::kSentinelByte) << "element " << e << " outside out";
        }
      }
    }
    EXPECT_TRUE(out_storage.guards_intact());
  });
}

INSTANTIATE_TEST_SUITE_P(Aclnn, TwoPhase,
                         ::testing::Combine(::testing::ValuesIn(mpg_test::kElementDTypes),
                                            ::testing::ValuesIn(mpg_test::kIndexTypes),
                                            ::testing::Values(Mode::kDropless, Mode::kPadded)),
                         param_name);

TEST(TwoPhaseApi, MessageIsClearedBySuccess) {
  std::vector<float> grad = {1, 2, 3, 4};
  std::vector<int32_t> indices = {1, 0, 3, 2};
  std::vector<float> out(2, -1.0f);
  // A failure first (K = 0), then the same call done right.
  EXPECT_EQ(run_two_phase({{4, 1}}, DataType::kFloat, grad.data(), {{4}}, DataType::kInt32,
                          indices.data(), 0, false, {{2, 1}}, out.data()),
            mpg::aclnn::kErrParamInvalid);
  EXPECT_STRNE(mpg::aclnn::GetLastErrorMessage(), "");
  EXPECT_EQ(run_two_phase({{4, 1}}, DataType::kFloat, grad.data(), {{4}}, DataType::kInt32,
                          indices.data(), 2, false, {{2, 1}}, out.data()),
            mpg::aclnn::kSuccess);
  EXPECT_STREQ(mpg::aclnn::GetLastErrorMessage(), "");
  EXPECT_EQ(out, (std::vector<float>{2 + 1, 4 + 3}));  // G[1] + G[0], G[3] + G[2]
}

TEST(TwoPhaseApi, EmptyTensorsNeedNoWorkspace) {
  float grad_cell = 0;
  int32_t index_cell = 0;
  GuardedMatrix<float> out(0, 16);
  uint64_t asked = 99;
  // N = 0: nothing to check, nothing to write; a null workspace is fine.
  EXPECT_EQ(run_two_phase({{0, 16}}, DataType::kFloat, &grad_cell, {{0}}, DataType::kInt32,
                          &index_cell, 2, false, {{0, 16}}, out.data(), &asked),
            mpg::aclnn::kSuccess)
      << mpg::aclnn::GetLastErrorMessage();
  EXPECT_EQ(asked, 0u);
  EXPECT_TRUE(out.guards_intact());
}

// A tensor whose data is not on a multiple of its element size is refused, naming it, before
// anything is written (C++ needs aligned elements; the streaming stores would fault).
TEST(TwoPhaseApi, ElementMisalignedDataIsRefused) {
  alignas(16) uint8_t grad_bytes[4 * sizeof(float) + 1] = {};
  alignas(16) uint8_t index_bytes[4 * sizeof(int32_t) + 2] = {};
  std::vector<float> grad = {1, 2, 3, 4};
  std::vector<int32_t> indices = {1, 0, 3, 2};
  std::memcpy(grad_bytes + 1, grad.data(), sizeof(float) * grad.size());
  std::memcpy(index_bytes + 2, indices.data(), sizeof(int32_t) * indices.size());
  GuardedMatrix<float> out(2, 1);
  struct Case {
    void* grad;
    void* index;
    void* out;
    const char* named;
  };
  const Case cases[] = {
      {grad_bytes + 1, indices.data(), out.data(), "permuted_output_grad data address"},
      {grad.data(), index_bytes + 2, out.data(), "sorted_indices data address"},
      {grad.data(), indices.data(), reinterpret_cast<uint8_t*>(out.data()) + 2, "out data address"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(run_two_phase({{4, 1}}, DataType::kFloat, c.grad, {{4}}, DataType::kInt32, c.index, 2,
                            false, {{2, 1}}, c.out),
              mpg::aclnn::kErrParamInvalid)
        << c.named;
    const std::string message = mpg::aclnn::GetLastErrorMessage();
    EXPECT_NE(message.find(c.named), std::string::npos) << message;
    EXPECT_NE(message.find("is not a multiple of its element size"), std::string::npos) << message;
    EXPECT_TRUE(out.payload_untouched());
  }
  // The same bytes at aligned addresses are fine.
  EXPECT_EQ(run_two_phase({{4, 1}}, DataType::kFloat, grad.data(), {{4}}, DataType::kInt32,
                          indices.data(), 2, false, {{2, 1}}, out.data()),
            mpg::aclnn::kSuccess)
      << mpg::aclnn::GetLastErrorMessage();
}

// A failing phase two still consumes (frees) the executor: a retry is refused.
TEST(TwoPhaseApi, ExecutorFreedOnFailure) {
  using namespace mpg::aclnn;
  std::vector<float> grad = {1, 2, 3, 4};
  std::vector<int32_t> indices = {1, 0, 3, 3};  // duplicate: found in phase two
  GuardedMatrix<float> out(2, 1);
  const int64_t grad_dims[] = {4, 1}, index_dims[] = {4}, out_dims[] = {2, 1};
  Tensor* g = CreateTensor(grad_dims, 2, DataType::kFloat, nullptr, 0, grad.data());
  Tensor* s = CreateTensor(index_dims, 1, DataType::kInt32, nullptr, 0, indices.data());
  Tensor* o = CreateTensor(out_dims, 2, DataType::kFloat, nullptr, 0, out.data());
  uint64_t size = 0;
  Executor* executor = nullptr;
  ASSERT_EQ(MoeTokenPermuteGradGetWorkspaceSize(g, s, 2, false, o, &size, &executor), kSuccess);
  std::vector<uint8_t> workspace(size);
  EXPECT_EQ(MoeTokenPermuteGrad(workspace.data(), size, executor), kErrParamInvalid);
  EXPECT_NE(std::string(GetLastErrorMessage()).find("sorted_indices[3] = 3 duplicates"),
            std::string::npos)
      << GetLastErrorMessage();
  indices[3] = 2;  // fixed, but the executor is gone
  EXPECT_EQ(MoeTokenPermuteGrad(workspace.data(), size, executor), kErrParamInvalid);
  EXPECT_TRUE(out.payload_untouched());
  DestroyTensor(g);
  DestroyTensor(s);
  DestroyTensor(o);
}

}  // namespace
