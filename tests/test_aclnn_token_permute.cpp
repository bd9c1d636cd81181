// MoeTokenPermute through the two-phase API (mpg/aclnn.hpp): results equal the typed reference
// path byte for byte; every error returns its status and message with both outputs untouched;
// the outputs round-trip through MoeTokenPermuteGrad.
#include <climits>
#include <functional>

#include "test_util.hpp"

namespace {

using mpg::aclnn::aclnnStatus;
using mpg::aclnn::data_type_of;
using mpg::aclnn::DataType;
using mpg::aclnn::Executor;
using mpg::aclnn::Tensor;
using mpg_test::GuardedBuffer;
using mpg_test::GuardedMatrix;

// A tensor as the test describes it; data null means "no data pointer".
struct Spec {
  Spec() = default;
  Spec(std::vector<int64_t> dims_, DataType dtype_, void* data_, std::vector<int64_t> strides_ = {})
      : dims(std::move(dims_)), dtype(dtype_), data(data_), strides(std::move(strides_)) {}
  std::vector<int64_t> dims;
  DataType dtype = DataType::kFloat;
  void* data = nullptr;
  std::vector<int64_t> strides;  // empty: contiguous
};

Tensor* make(const Spec& s) {
  return mpg::aclnn::CreateTensor(s.dims.data(), s.dims.size(), s.dtype,
                                  s.strides.empty() ? nullptr : s.strides.data(), 0, s.data);
}

// Phase one with these specs (null_tensor: which of the four is passed as nullptr, -1 none),
// then a workspace of the asked size (or `workspace` if given), then phase two.
struct Call {
  Spec tokens, indices, out, sorted;
  int64_t num_out_tokens = 0;
  bool padded = false;
  int null_tensor = -1;
  uint64_t asked = 0;
  aclnnStatus phase1 = -1;
  aclnnStatus phase2 = -1;
  std::string message;

  aclnnStatus run(void* workspace = nullptr, int64_t workspace_bytes = -1) {
    using namespace mpg::aclnn;
    Tensor* t[4] = {make(tokens), make(indices), make(out), make(sorted)};
    Tensor* passed[4] = {t[0], t[1], t[2], t[3]};
    if (null_tensor >= 0) passed[null_tensor] = nullptr;
    Executor* executor = nullptr;
    phase1 = MoeTokenPermuteGetWorkspaceSize(passed[0], passed[1], num_out_tokens, padded,
                                             passed[2], passed[3], &asked, &executor);
    for (Tensor* x : t) DestroyTensor(x);
    message = GetLastErrorMessage();
    if (phase1 != kSuccess) {
      EXPECT_EQ(executor, nullptr);
      return phase1;
    }
    std::vector<uint8_t> own(asked);
    phase2 = MoeTokenPermute(workspace ? workspace : (asked ? own.data() : nullptr),
                             workspace_bytes >= 0 ? static_cast<uint64_t>(workspace_bytes) : asked,
                             executor);
    message = GetLastErrorMessage();
    return phase2;
  }
};

using TokenTypes = ::testing::Types<float, mpg::half, mpg::bfloat16, int8_t>;
template <class T>
class TwoPhaseTokenPermute : public ::testing::Test {};
TYPED_TEST_SUITE(TwoPhaseTokenPermute, TokenTypes);

// Strided tokens and output rows, both id types, [N, K] and [N] ids; against the typed
// reference path, byte for byte.
TYPED_TEST(TwoPhaseTokenPermute, MatchesTypedReference) {
  using T = TypeParam;
  std::mt19937_64 rng(17);
  for (int round = 0; round < 24; ++round) {
    const bool int64_ids = round % 2 == 1;
    const int64_t n = std::uniform_int_distribution<int64_t>(0, 20)(rng);
    const int64_t topk = round % 6 == 0 ? 1 : std::uniform_int_distribution<int64_t>(1, 5)(rng);
    const bool flat_ids = topk == 1 && round % 3 == 0;
    const int64_t hidden = std::uniform_int_distribution<int64_t>(0, 70)(rng);
    const int64_t num_out =
        std::uniform_int_distribution<int64_t>(-n * topk - 1, n * topk + 1)(rng);
    const int64_t rows = mpg::token_permute_rows(num_out, n * topk);
    GuardedMatrix<T> tokens(n, hidden, hidden + 3);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < hidden; ++h) {
        const auto bits = static_cast<uint32_t>(rng());
        std::memcpy(static_cast<void*>(&tokens.at(t, h)), &bits, sizeof(T));
      }
    }
    std::vector<int64_t> ids64(static_cast<size_t>(n * topk));
    for (auto& e : ids64)
      e = std::uniform_int_distribution<int64_t>(0, 9)(rng) * 1000003 % 16777215;
    std::vector<int32_t> ids32(ids64.begin(), ids64.end());
    void* ids_data =
        int64_ids ? static_cast<void*>(ids64.data()) : static_cast<void*>(ids32.data());

    GuardedMatrix<T> got(rows, hidden, hidden + 1);
    GuardedBuffer<int32_t> got_sorted(static_cast<size_t>(n * topk));
    Call c;
    c.tokens = {{n, hidden}, data_type_of<T>(), tokens.data(), {hidden + 3, 1}};
    c.indices = {flat_ids ? std::vector<int64_t>{n} : std::vector<int64_t>{n, topk},
                 int64_ids ? DataType::kInt64 : DataType::kInt32, ids_data};
    c.out = {{rows, hidden}, data_type_of<T>(), got.data(), {hidden + 1, 1}};
    c.sorted = {{n * topk}, DataType::kInt32, got_sorted.data()};
    c.num_out_tokens = num_out;
    ASSERT_EQ(c.run(), mpg::aclnn::kSuccess) << c.message;
    EXPECT_EQ(c.message, "");
    EXPECT_EQ(c.asked, n * topk == 0 ? 0u : static_cast<uint64_t>(n * topk + 4096) * 4 + 3);

    GuardedMatrix<T> want(rows, hidden, hidden + 1);
    GuardedBuffer<int32_t> want_sorted(static_cast<size_t>(n * topk));
    const mpg::Options reference = mpg_test::path_options(mpg_test::kReferencePath);
    const mpg::MutableIndexView<int32_t> want_view(want_sorted.data(), n * topk);
    const mpg::Status s = int64_ids ? mpg::token_permute(tokens.const_view(), ids64, topk, num_out,
                                                         want.view(), want_view, reference)
                                    : mpg::token_permute(tokens.const_view(), ids32, topk, num_out,
                                                         want.view(), want_view, reference);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(got.same_bytes(want));
    EXPECT_TRUE(got.guards_intact());
    EXPECT_TRUE(std::equal(got_sorted.data(), got_sorted.data() + n * topk, want_sorted.data()));
    EXPECT_TRUE(got_sorted.guards_intact());
  }
}

// A valid call on 3 tokens x K = 2, H = 2, all experts in range; tests break one thing.
struct Fixture {
  GuardedMatrix<float> tokens{3, 2};
  std::vector<int32_t> ids = {1, 0, 0, 2, 2, 1};
  GuardedMatrix<float> out{6, 2};
  GuardedBuffer<int32_t> sorted{6};
  Call call() {
    for (int t = 0; t < 3; ++t) {
      tokens.at(t, 0) = static_cast<float>(t);
      tokens.at(t, 1) = static_cast<float>(-t);
    }
    Call c;
    c.tokens = {{3, 2}, DataType::kFloat, tokens.data()};
    c.indices = {{3, 2}, DataType::kInt32, ids.data()};
    c.out = {{6, 2}, DataType::kFloat, out.data()};
    c.sorted = {{6}, DataType::kInt32, sorted.data()};
    return c;
  }
  bool untouched() const {
    return out.payload_untouched() && out.guards_intact() && sorted.payload_untouched() &&
           sorted.guards_intact();
  }
};

TEST(TwoPhaseTokenPermuteErrors, EveryRuleOutputsUntouched) {
  struct Case {
    std::string name;
    std::function<void(Fixture&, Call&)> breaks;
    aclnnStatus status;
    std::string message;
  };
  const Case cases[] = {
      {"null tokens", [](Fixture&, Call& c) { c.null_tensor = 0; }, 161001, "tokens is null"},
      {"null indices", [](Fixture&, Call& c) { c.null_tensor = 1; }, 161001, "indices is null"},
      {"null out", [](Fixture&, Call& c) { c.null_tensor = 2; }, 161001,
       "permute_tokens_out is null"},
      {"null sorted", [](Fixture&, Call& c) { c.null_tensor = 3; }, 161001,
       "sorted_indices_out is null"},
      {"null tokens data", [](Fixture&, Call& c) { c.tokens.data = nullptr; }, 161001,
       "tokens data is null"},
      {"null ids data", [](Fixture&, Call& c) { c.indices.data = nullptr; }, 161001,
       "indices data is null"},
      {"null sorted data", [](Fixture&, Call& c) { c.sorted.data = nullptr; }, 161001,
       "sorted_indices_out data is null"},
      {"padded", [](Fixture&, Call& c) { c.padded = true; }, 161002,
       "padded_mode = true is not supported"},
      {"tokens int32", [](Fixture&, Call& c) { c.tokens.dtype = c.out.dtype = DataType::kInt32; },
       161002, "tokens dtype 3 is not supported"},
      {"out dtype", [](Fixture&, Call& c) { c.out.dtype = DataType::kFloat16; }, 161002,
       "permute_tokens_out dtype 1 differs from tokens dtype 0"},
      {"ids float", [](Fixture&, Call& c) { c.indices.dtype = DataType::kFloat; }, 161002,
       "indices dtype 0 is not supported: must be int32 (3) or int64 (9)"},
      {"sorted int64", [](Fixture&, Call& c) { c.sorted.dtype = DataType::kInt64; }, 161002,
       "sorted_indices_out dtype 9 is not supported: must be int32 (3)"},
      {"ids rank 3",
       [](Fixture&, Call& c) {
         c.indices.dims = {3, 2, 1};
       },
       161002, "indices has rank 3"},
      {"ids strided",
       [](Fixture&, Call& c) {
         c.indices.strides = {3, 1};
       },
       161002, "indices strides [3, 1] for shape [3, 2]: must be contiguous row-major"},
      {"ids rows",
       [](Fixture&, Call& c) {
         c.indices.dims = {2, 3};
       },
       161002, "tokens has 3 rows but indices has N = 2"},
      {"ids K = 0",
       [](Fixture&, Call& c) {
         c.indices.dims = {3, 0};
       },
       161002, "indices has shape [3, 0]: K (dim 1) must be >= 1"},
      {"tokens rank 1", [](Fixture&, Call& c) { c.tokens.dims = {6}; }, 161002,
       "tokens has rank 1"},
      {"out rows", [](Fixture&, Call& c) { c.num_out_tokens = -1; }, 161002,
       "permute_tokens_out has 6 rows but must have n = 5"},
      {"out cols",
       [](Fixture&, Call& c) {
         c.out.dims = {6, 1};
       },
       161002, "permute_tokens_out has hidden size 1 but tokens has hidden size 2"},
      {"sorted size", [](Fixture&, Call& c) { c.sorted.dims = {5}; }, 161002,
       "sorted_indices_out has 5 elements but must have N*K = 6"},
      {"out on tokens", [](Fixture& f, Call& c) { c.out.data = f.tokens.data(); }, 161002,
       "permute_tokens_out overlaps tokens in memory"},
      {"out on ids",
       [](Fixture& f, Call& c) {
         c.out.data = f.ids.data();
         c.out.dims = {1, 2};
         c.num_out_tokens = 1;
       },
       161002, "permute_tokens_out overlaps indices in memory"},
      {"sorted on out", [](Fixture& f, Call& c) { c.sorted.data = f.out.data() + 11; }, 161002,
       "overlaps"},
      {"sorted on tokens", [](Fixture& f, Call& c) { c.sorted.data = f.tokens.data() + 5; }, 161002,
       "sorted_indices_out overlaps tokens in memory"},
      {"sorted on ids", [](Fixture& f, Call& c) { c.sorted.data = f.ids.data() + 1; }, 161002,
       "sorted_indices_out overlaps indices in memory"},
      {"id out of range", [](Fixture& f, Call&) { f.ids[3] = 16777215; }, 161002,
       "indices[1][1] (element 3) = 16777215 is out of range [0, 16777215)"},
      {"negative id", [](Fixture& f, Call&) { f.ids[5] = -1; }, 161002,
       "indices[2][1] (element 5) = -1 is out of range"},
  };
  for (const Case& k : cases) {
    Fixture f;
    Call c = f.call();
    k.breaks(f, c);
    EXPECT_EQ(c.run(), k.status) << k.name << ": " << c.message;
    EXPECT_NE(c.message.find(k.message), std::string::npos)
        << k.name << ": \"" << c.message << "\" lacks \"" << k.message << "\"";
    EXPECT_TRUE(f.untouched()) << k.name;
  }
}

TEST(TwoPhaseTokenPermuteErrors, WorkspaceAndExecutorRules) {
  using namespace mpg::aclnn;
  {  // too small, null, overlapping out or tokens: 161002, outputs untouched
    Fixture f;
    Call c = f.call();
    std::vector<uint8_t> small(16);
    EXPECT_EQ(c.run(small.data(), 16), kErrParamInvalid);
    EXPECT_NE(c.message.find("workspace of 16 bytes is smaller than"), std::string::npos)
        << c.message;
    EXPECT_TRUE(f.untouched());
    Call null_ws = f.call();
    EXPECT_EQ(null_ws.run(nullptr, 0), kErrParamInvalid);
    EXPECT_TRUE(f.untouched());
  }
  {
    Fixture f;
    GuardedBuffer<uint8_t> arena(1 << 16);
    // out inside a big buffer that also serves as the workspace
    Call c = f.call();
    c.out.data = arena.data();
    const aclnnStatus s = c.run(arena.data() + 8, (1 << 16) - 8);
    EXPECT_EQ(s, kErrParamInvalid);
    EXPECT_NE(c.message.find("workspace overlaps permute_tokens_out"), std::string::npos)
        << c.message;
    EXPECT_TRUE(arena.payload_untouched());
  }
  {  // an executor runs once; the other op's executor is refused (and consumed)
    Fixture f;
    Call c = f.call();
    Tensor* t[4] = {make(c.tokens), make(c.indices), make(c.out), make(c.sorted)};
    uint64_t asked = 0;
    Executor* e = nullptr;
    ASSERT_EQ(MoeTokenPermuteGetWorkspaceSize(t[0], t[1], 0, false, t[2], t[3], &asked, &e),
              kSuccess);
    std::vector<uint8_t> ws(asked);
    EXPECT_EQ(MoeTokenPermute(ws.data(), asked, e), kSuccess);
    EXPECT_EQ(MoeTokenPermute(ws.data(), asked, e), kErrParamInvalid);
    EXPECT_EQ(MoeTokenPermute(ws.data(), asked, nullptr), kErrParamNullptr);
    EXPECT_EQ(MoeTokenPermuteGetWorkspaceSize(t[0], t[1], 0, false, t[2], t[3], nullptr, &e),
              kErrParamNullptr);
    EXPECT_EQ(MoeTokenPermuteGetWorkspaceSize(t[0], t[1], 0, false, t[2], t[3], &asked, nullptr),
              kErrParamNullptr);
    // MoeTokenPermuteGrad's executor (grad = the permuted rows, S = sorted) at MoeTokenPermute
    GuardedMatrix<float> back(3, 2);
    const int64_t gd[] = {6, 2}, sd[] = {6}, od[] = {3, 2};
    Tensor* g = CreateTensor(gd, 2, DataType::kFloat, nullptr, 0, f.out.data());
    Tensor* s = CreateTensor(sd, 1, DataType::kInt32, nullptr, 0, f.sorted.data());
    Tensor* o = CreateTensor(od, 2, DataType::kFloat, nullptr, 0, back.data());
    Executor* grad_executor = nullptr;
    ASSERT_EQ(MoeTokenPermuteGradGetWorkspaceSize(g, s, 2, false, o, &asked, &grad_executor),
              kSuccess);
    std::vector<uint8_t> ws2(asked + 1);
    EXPECT_EQ(MoeTokenPermute(ws2.data(), asked, grad_executor), kErrParamInvalid);
    EXPECT_TRUE(back.payload_untouched());
    for (Tensor* x : {t[0], t[1], t[2], t[3], g, s, o}) DestroyTensor(x);
  }
}

// MoeTokenPermute, then MoeTokenPermuteGrad on its outputs with R = n: each token comes back
// once per kept copy (small integers: the sums, and the fp64 expectation, are exact).
TEST(TwoPhaseTokenPermute, RoundTripThroughPermuteGrad) {
  using namespace mpg::aclnn;
  std::mt19937_64 rng(23);
  for (int round = 0; round < 10; ++round) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 30)(rng);
    const int64_t topk = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    const int64_t hidden = std::uniform_int_distribution<int64_t>(1, 50)(rng);
    const int64_t num_out = std::uniform_int_distribution<int64_t>(-n * topk, n * topk)(rng);
    const int64_t rows = mpg::token_permute_rows(num_out, n * topk);
    GuardedMatrix<mpg::bfloat16> tokens(n, hidden);
    mpg_test::fill_random(tokens, rng, mpg_test::Values::kSmallIntegers);
    std::vector<int64_t> ids(static_cast<size_t>(n * topk));
    for (auto& e : ids) e = std::uniform_int_distribution<int64_t>(0, 6)(rng);
    GuardedMatrix<mpg::bfloat16> permuted(rows, hidden);
    std::vector<int32_t> sorted(static_cast<size_t>(n * topk));
    Call c;
    c.tokens = {{n, hidden}, DataType::kBFloat16, tokens.data()};
    c.indices = {{n, topk}, DataType::kInt64, ids.data()};
    c.out = {{rows, hidden}, DataType::kBFloat16, permuted.data()};
    c.sorted = {{n * topk}, DataType::kInt32, sorted.data()};
    c.num_out_tokens = num_out;
    ASSERT_EQ(c.run(), kSuccess) << c.message;

    GuardedMatrix<mpg::bfloat16> back(n, hidden);
    const int64_t gd[] = {rows, hidden}, sd[] = {n * topk}, od[] = {n, hidden};
    Tensor* g = CreateTensor(gd, 2, DataType::kBFloat16, nullptr, 0, permuted.data());
    Tensor* s = CreateTensor(sd, 1, DataType::kInt32, nullptr, 0, sorted.data());
    Tensor* o = CreateTensor(od, 2, DataType::kBFloat16, nullptr, 0, back.data());
    uint64_t asked = 0;
    Executor* e = nullptr;
    ASSERT_EQ(MoeTokenPermuteGradGetWorkspaceSize(g, s, topk, false, o, &asked, &e), kSuccess)
        << GetLastErrorMessage();
    for (Tensor* x : {g, s, o}) DestroyTensor(x);
    std::vector<uint8_t> ws(asked + 1);
    ASSERT_EQ(MoeTokenPermuteGrad(ws.data(), asked, e), kSuccess) << GetLastErrorMessage();
    // Kept copies of token t from the rank's definition: ids below, or equal at a lower copy.
    for (int64_t t = 0; t < n; ++t) {
      int kept = 0;
      for (int64_t k = 0; k < topk; ++k) {
        const size_t i = static_cast<size_t>(t * topk + k);
        int64_t rank = 0;
        for (size_t j = 0; j < ids.size(); ++j)
          rank += ids[j] < ids[i] || (ids[j] == ids[i] && j < i);
        kept += rank < rows;
      }
      for (int64_t h = 0; h < hidden; ++h) {
        EXPECT_EQ(static_cast<double>(static_cast<float>(back.at(t, h))),
                  kept * static_cast<double>(static_cast<float>(tokens.at(t, h))));
      }
    }
  }
}

}  // namespace
