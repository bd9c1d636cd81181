// MoeTokenPermute through the typed API (token_permute.hpp): hand-worked cases, the reference
// against the definition of the rank, the fast path against the reference byte for byte,
// every error with both outputs untouched, agreement with routing.hpp, and the round trip
// through permute_grad.
#include <climits>

#include "test_util.hpp"

namespace {

using mpg::ErrorCode;
using mpg_test::GuardedBuffer;
using mpg_test::GuardedMatrix;

// The paths compared here: the oracle, and the fast path on every kernel set this CPU runs (the
// ISA picks the streaming-store row copy of large outputs).
std::vector<mpg_test::PathCase> permute_paths() {
  std::vector<mpg_test::PathCase> paths;
  for (const auto& p : mpg_test::kAllPaths) {
    if (mpg_test::path_supported(p)) paths.push_back(p);
  }
  return paths;
}
const std::vector<mpg_test::PathCase> kPermutePaths = permute_paths();

template <class T, class E>
mpg::Status run_token_permute(const GuardedMatrix<T>& tokens, const std::vector<E>& expert_ids,
                              int64_t topk, int64_t num_out_tokens, GuardedMatrix<T>& permuted,
                              GuardedBuffer<int32_t>& sorted, const mpg::Options& options = {}) {
  return mpg::token_permute(tokens.const_view(), expert_ids, topk, num_out_tokens, permuted.view(),
                            {sorted.data(), static_cast<int64_t>(sorted.size())}, options);
}

std::vector<int32_t> contents(const GuardedBuffer<int32_t>& b) {
  return std::vector<int32_t>(b.data(), b.data() + b.size());
}

template <class T>
std::vector<float> row_of(const GuardedMatrix<T>& m, int64_t r) {
  std::vector<float> v;
  for (int64_t c = 0; c < m.cols(); ++c) v.push_back(static_cast<float>(m.at(r, c)));
  return v;
}

// The rank of copy i from its definition: ids below, plus equal ids at lower positions.
template <class E>
std::vector<int32_t> ranks_by_definition(const std::vector<E>& ids) {
  std::vector<int32_t> ranks(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t rank = 0;
    for (size_t j = 0; j < ids.size(); ++j) {
      rank += ids[j] < ids[i] || (ids[j] == ids[i] && j < i);
    }
    ranks[i] = rank;
  }
  return ranks;
}

// Token: experts. 0: (1, 0), 1: (0, 2), 2: (2, 1). Stable by expert, then by copy i = t*K + k:
// e0: copies 1, 2; e1: copies 0, 5; e2: copies 3, 4. So ranks (sorted_indices) are
// {2, 0, 1, 4, 5, 3} and the rows, in rank order, are those of tokens 0, 1, 0, 2, 1, 2.
const std::vector<int32_t> kExperts = {1, 0, 0, 2, 2, 1};
const std::vector<int32_t> kRanks = {2, 0, 1, 4, 5, 3};
const int kTokenOfRank[] = {0, 1, 0, 2, 1, 2};

GuardedMatrix<float> three_tokens() {
  GuardedMatrix<float> tokens(3, 2);
  for (int t = 0; t < 3; ++t) {
    tokens.at(t, 0) = static_cast<float>(2 * t + 1);
    tokens.at(t, 1) = static_cast<float>(2 * t + 2);
  }
  return tokens;
}

TEST(TokenPermute, HandWorkedStableOrder) {
  const GuardedMatrix<float> tokens = three_tokens();
  for (const auto& path : kPermutePaths) {
    for (int threads : {1, 3}) {
      SCOPED_TRACE(mpg_test::path_name(path) + " threads " + std::to_string(threads));
      GuardedMatrix<float> permuted(6, 2);
      GuardedBuffer<int32_t> sorted(6);
      const mpg::Status s = run_token_permute(tokens, kExperts, 2, 0, permuted, sorted,
                                              mpg_test::path_options(path, threads));
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(contents(sorted), kRanks);
      for (int r = 0; r < 6; ++r) {
        const int t = kTokenOfRank[r];
        EXPECT_EQ(row_of(permuted, r), (std::vector<float>{2.f * t + 1, 2.f * t + 2})) << r;
      }
      EXPECT_TRUE(permuted.guards_intact());
      EXPECT_TRUE(sorted.guards_intact());
    }
  }
}

TEST(TokenPermute, TiesKeepCopyOrder) {
  // All copies to one expert: ranks are the copy numbers. A token sent twice to expert 4:
  // copies 0 (e4), 1 (e4), 2 (e0), 3 (e4) rank 1, 2, 0, 3.
  const std::vector<int64_t> same(6, 7);
  const std::vector<int64_t> twice = {4, 4, 0, 4};
  for (const auto& path : kPermutePaths) {
    SCOPED_TRACE(mpg_test::path_name(path));
    GuardedMatrix<float> tokens(2, 1);
    tokens.at(0, 0) = 10;
    tokens.at(1, 0) = 20;
    GuardedMatrix<float> permuted(6, 1);
    GuardedBuffer<int32_t> sorted(6);
    ASSERT_TRUE(run_token_permute(tokens, same, 3, 0, permuted, sorted, path_options(path)).ok());
    EXPECT_EQ(contents(sorted), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
    for (int r = 0; r < 6; ++r) EXPECT_EQ(permuted.at(r, 0), r < 3 ? 10.f : 20.f);

    GuardedMatrix<float> permuted2(4, 1);
    GuardedBuffer<int32_t> sorted2(4);
    ASSERT_TRUE(
        run_token_permute(tokens, twice, 2, 0, permuted2, sorted2, path_options(path)).ok());
    EXPECT_EQ(contents(sorted2), (std::vector<int32_t>{1, 2, 0, 3}));
    EXPECT_EQ(row_of(permuted2, 0), (std::vector<float>{20}));  // copy 2: token 1
    EXPECT_EQ(row_of(permuted2, 1), (std::vector<float>{10}));
    EXPECT_EQ(row_of(permuted2, 2), (std::vector<float>{10}));
    EXPECT_EQ(row_of(permuted2, 3), (std::vector<float>{20}));
  }
}

TEST(TokenPermute, NumOutTokensCountsFromTheEndAndClamps) {
  struct Case {
    int64_t num_out_tokens;
    int64_t rows;
  };
  const Case cases[] = {{0, 6}, {-2, 4}, {-6, 0}, {-7, 0},        {-100, 0}, {4, 4},
                        {6, 6}, {7, 6},  {1, 1},  {LLONG_MAX, 6}, {-1, 5},   {LLONG_MIN, 0}};
  const GuardedMatrix<float> tokens = three_tokens();
  for (const Case& c : cases) {
    SCOPED_TRACE("num_out_tokens " + std::to_string(c.num_out_tokens));
    EXPECT_EQ(mpg::token_permute_rows(c.num_out_tokens, 6), c.rows);
    for (const auto& path : kPermutePaths) {
      GuardedMatrix<float> permuted(c.rows, 2);
      GuardedBuffer<int32_t> sorted(6);
      const mpg::Status s = run_token_permute(tokens, kExperts, 2, c.num_out_tokens, permuted,
                                              sorted, path_options(path));
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(contents(sorted), kRanks);  // ranks of every copy, kept or not
      for (int64_t r = 0; r < c.rows; ++r) {
        const int t = kTokenOfRank[r];
        EXPECT_EQ(row_of(permuted, r), (std::vector<float>{2.f * t + 1, 2.f * t + 2}));
      }
      EXPECT_TRUE(permuted.guards_intact());
    }
  }
  EXPECT_EQ(mpg::token_permute_rows(0, 0), 0);
  EXPECT_EQ(mpg::token_permute_rows(-3, 0), 0);
  EXPECT_EQ(mpg::token_permute_rows(5, 0), 0);
}

TEST(TokenPermute, Int8RowsOfOddLength) {
  GuardedMatrix<int8_t> tokens(3, 5);
  for (int t = 0; t < 3; ++t) {
    for (int h = 0; h < 5; ++h)
      tokens.at(t, h) = static_cast<int8_t>(t == 1 ? -128 + h : 127 - h * t);
  }
  for (const auto& path : kPermutePaths) {
    SCOPED_TRACE(mpg_test::path_name(path));
    GuardedMatrix<int8_t> permuted(5, 5, 7);  // -1: drop the last copy; strided rows
    GuardedBuffer<int32_t> sorted(6);
    ASSERT_TRUE(
        run_token_permute(tokens, kExperts, 2, -1, permuted, sorted, path_options(path)).ok());
    EXPECT_EQ(contents(sorted), kRanks);
    for (int r = 0; r < 5; ++r) {
      for (int h = 0; h < 5; ++h) EXPECT_EQ(permuted.at(r, h), tokens.at(kTokenOfRank[r], h));
    }
    EXPECT_TRUE(permuted.row_gaps_untouched());
    EXPECT_TRUE(permuted.guards_intact());
  }
}

template <class T>
class TokenPermuteTyped : public ::testing::Test {};
using TokenTypes = ::testing::Types<float, mpg::half, mpg::bfloat16, int8_t>;
class TokenTypeNames {
 public:
  template <class T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, int8_t>) {
      return "I8";
    } else {
      return mpg_test::short_name(mpg::dtype_of<T>());
    }
  }
};
TYPED_TEST_SUITE(TokenPermuteTyped, TokenTypes, TokenTypeNames);

TEST(TokenPermute, NanPayloadsAndSignalingNansPassThrough) {
  const uint32_t f32[] = {0x7f800001u, 0xffc12345u, 0x7fbfffffu, 0x80000001u};
  const uint16_t b16[] = {0x7f81u, 0xffc3u, 0x0001u, 0x8000u};
  const uint16_t f16[] = {0x7c01u, 0xfe05u, 0x0001u, 0x8000u};
  for (const auto& path : kPermutePaths) {
    SCOPED_TRACE(mpg_test::path_name(path));
    GuardedMatrix<float> tf(3, 4);
    GuardedMatrix<mpg::bfloat16> tb(3, 4);
    GuardedMatrix<mpg::half> th(3, 4);
    for (int t = 0; t < 3; ++t) {
      for (int h = 0; h < 4; ++h) {
        tf.at(t, h) = mpg_test::from_bits<float>(f32[(h + t) % 4]);
        tb.at(t, h) = mpg_test::from_bits<mpg::bfloat16>(b16[(h + t) % 4]);
        th.at(t, h) = mpg_test::from_bits<mpg::half>(f16[(h + t) % 4]);
      }
    }
    GuardedMatrix<float> pf(6, 4);
    GuardedMatrix<mpg::bfloat16> pb(6, 4);
    GuardedMatrix<mpg::half> ph(6, 4);
    GuardedBuffer<int32_t> sorted(6);
    ASSERT_TRUE(run_token_permute(tf, kExperts, 2, 0, pf, sorted, path_options(path)).ok());
    ASSERT_TRUE(run_token_permute(tb, kExperts, 2, 0, pb, sorted, path_options(path)).ok());
    ASSERT_TRUE(run_token_permute(th, kExperts, 2, 0, ph, sorted, path_options(path)).ok());
    for (int r = 0; r < 6; ++r) {
      for (int h = 0; h < 4; ++h) {
        const int t = kTokenOfRank[r];
        EXPECT_EQ(mpg_test::bits_of(pf.at(r, h)), f32[(h + t) % 4]);
        EXPECT_EQ(mpg_test::bits_of(pb.at(r, h)), b16[(h + t) % 4]);
        EXPECT_EQ(mpg_test::bits_of(ph.at(r, h)), f16[(h + t) % 4]);
      }
    }
  }
}

// The reference against the definition of the rank, on random ids with many ties.
TEST(TokenPermute, ReferenceRanksMatchTheDefinition) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 50; ++round) {
    const int64_t n = std::uniform_int_distribution<int64_t>(0, 12)(rng);
    const int64_t k = std::uniform_int_distribution<int64_t>(1, 5)(rng);
    const int64_t experts = std::uniform_int_distribution<int64_t>(1, 9)(rng);
    std::vector<int64_t> ids(static_cast<size_t>(n * k));
    for (auto& e : ids) e = std::uniform_int_distribution<int64_t>(0, experts - 1)(rng);
    GuardedMatrix<float> tokens(n, 3);
    mpg_test::fill_random(tokens, rng);
    const int64_t num_out = std::uniform_int_distribution<int64_t>(-n * k - 1, n * k + 1)(rng);
    const int64_t rows = mpg::token_permute_rows(num_out, n * k);
    GuardedMatrix<float> permuted(rows, 3);
    GuardedBuffer<int32_t> sorted(static_cast<size_t>(n * k));
    ASSERT_TRUE(run_token_permute(tokens, ids, k, num_out, permuted, sorted,
                                  path_options(mpg_test::kReferencePath))
                    .ok());
    const std::vector<int32_t> ranks = ranks_by_definition(ids);
    EXPECT_EQ(contents(sorted), ranks);
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] >= rows) continue;
      for (int64_t h = 0; h < 3; ++h) {
        EXPECT_EQ(mpg_test::bits_of(permuted.at(ranks[i], h)),
                  mpg_test::bits_of(tokens.at(static_cast<int64_t>(i) / k, h)));
      }
    }
  }
}

// Expert ids over three ranges: few experts (one histogram), ids far above N*K (the two
// 12-bit radix passes) and ids at the top of the admissible range.
enum class IdRange { kFew, kSparse, kTop };

template <class E>
std::vector<E> random_ids(std::mt19937_64& rng, int64_t count, IdRange range) {
  constexpr int64_t kLimit = (int64_t{1} << 24) - 1;
  std::vector<E> ids(static_cast<size_t>(count));
  for (auto& e : ids) {
    switch (range) {
      case IdRange::kFew: e = static_cast<E>(std::uniform_int_distribution<int>(0, 7)(rng)); break;
      case IdRange::kSparse:  // a few distinct values spread over 24 bits: ties across passes
        e = static_cast<E>((std::uniform_int_distribution<int64_t>(0, 40)(rng) * 409613) % kLimit);
        break;
      case IdRange::kTop:
        e = static_cast<E>(kLimit - 1 - std::uniform_int_distribution<int64_t>(0, 5000)(rng));
        break;
    }
  }
  return ids;
}

// Fast (every thread count, with and without streaming-store support) against the reference,
// byte for byte: dtypes x id types x H around vector widths x K x strided/misaligned rows.
TYPED_TEST(TokenPermuteTyped, FastMatchesReferenceSweep) {
  using T = TypeParam;
  std::mt19937_64 rng(29);
  const int64_t hiddens[] = {0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000};
  const int64_t topks[] = {1, 2, 3, 8};
  int cases = 0;
  for (int64_t hidden : hiddens) {
    for (int64_t topk : topks) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool use_int64 = variant == 1;
        const auto range = static_cast<IdRange>(std::uniform_int_distribution<int>(0, 2)(rng));
        const int64_t n = std::uniform_int_distribution<int64_t>(0, 37)(rng);
        const bool strided = variant != 0;
        const bool misaligned = variant == 2;
        const int64_t num_out =
            variant == 0 ? 0 : std::uniform_int_distribution<int64_t>(-n * topk, n * topk + 2)(rng);
        const int64_t rows = mpg::token_permute_rows(num_out, n * topk);
        GuardedMatrix<T> tokens(n, hidden, strided ? hidden + 3 : -1, misaligned);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t h = 0; h < hidden; ++h) {
            const auto bits = static_cast<uint32_t>(rng());
            std::memcpy(static_cast<void*>(&tokens.at(t, h)), &bits,
                        sizeof(T));  // any bit pattern, NaNs included
          }
        }
        GuardedMatrix<T> want(rows, hidden, strided ? hidden + 5 : -1, misaligned);
        GuardedBuffer<int32_t> want_sorted(static_cast<size_t>(n * topk));
        const auto run = [&](auto ids) {
          ASSERT_TRUE(run_token_permute(tokens, ids, topk, num_out, want, want_sorted,
                                        path_options(mpg_test::kReferencePath))
                          .ok());
          for (const auto& path : kPermutePaths) {
            if (path.path == mpg::Path::kReference) continue;
            for (int threads : {1, 2, 3}) {
              SCOPED_TRACE(mpg_test::path_name(path) + " H " + std::to_string(hidden) + " K " +
                           std::to_string(topk) + " N " + std::to_string(n) + " variant " +
                           std::to_string(variant) + " threads " + std::to_string(threads));
              GuardedMatrix<T> got(rows, hidden, strided ? hidden + 5 : -1, misaligned);
              GuardedBuffer<int32_t> got_sorted(static_cast<size_t>(n * topk));
              const mpg::Status s = run_token_permute(tokens, ids, topk, num_out, got, got_sorted,
                                                      path_options(path, threads));
              ASSERT_TRUE(s.ok()) << s.message();
              EXPECT_TRUE(got.same_bytes(want));  // row gaps included: both keep the sentinel
              EXPECT_TRUE(got.row_gaps_untouched());
              EXPECT_TRUE(got.guards_intact());
              EXPECT_EQ(contents(got_sorted), contents(want_sorted));
              EXPECT_TRUE(got_sorted.guards_intact());
              ++cases;
            }
          }
        };
        if (use_int64) {
          run(random_ids<int64_t>(rng, n * topk, range));
        } else {
          run(random_ids<int32_t>(rng, n * topk, range));
        }
      }
    }
  }
  EXPECT_GT(cases, 0);
}

// Outputs of at least 8 MiB take the streaming-store copy; ids far above N*K take the radix sort.
TEST(TokenPermute, LargeOutputStreamsAndMatchesReference) {
  std::mt19937_64 rng(5);
  const int64_t n = 700;
  const int64_t topk = 4;
  const int64_t hidden = 771;  // odd row length in bytes for int8, misaligned row starts
  GuardedMatrix<float> tokens(n, hidden, hidden + 1, true);
  mpg_test::fill_random(tokens, rng, mpg_test::Values::kWithSpecials);
  for (IdRange range : {IdRange::kFew, IdRange::kSparse}) {
    const std::vector<int32_t> ids = random_ids<int32_t>(rng, n * topk, range);
    GuardedMatrix<float> want(n * topk - 3, hidden, hidden + 2, true);
    GuardedBuffer<int32_t> want_sorted(static_cast<size_t>(n * topk));
    ASSERT_TRUE(run_token_permute(tokens, ids, topk, -3, want, want_sorted,
                                  path_options(mpg_test::kReferencePath))
                    .ok());
    for (const auto& path : kPermutePaths) {
      if (path.path == mpg::Path::kReference) continue;
      for (int threads : {1, 2}) {
        SCOPED_TRACE(mpg_test::path_name(path) + " threads " + std::to_string(threads));
        GuardedMatrix<float> got(n * topk - 3, hidden, hidden + 2, true);
        GuardedBuffer<int32_t> got_sorted(static_cast<size_t>(n * topk));
        ASSERT_TRUE(run_token_permute(tokens, ids, topk, -3, got, got_sorted,
                                      mpg_test::path_options(path, threads))
                        .ok());
        EXPECT_TRUE(got.same_bytes(want));
        EXPECT_TRUE(got.guards_intact());
        EXPECT_EQ(contents(got_sorted), contents(want_sorted));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Errors: the status, the message, and both outputs untouched.

struct ErrorCase {
  std::string name;
  ErrorCode code;
  std::string message_part;
};

void expect_error(const mpg::Status& s, const ErrorCase& c) {
  EXPECT_EQ(s.code(), c.code) << c.name << ": " << s.message();
  EXPECT_NE(s.message().find(c.message_part), std::string::npos)
      << c.name << ": \"" << s.message() << "\" lacks \"" << c.message_part << "\"";
}

TEST(TokenPermuteErrors, ExpertIdsOutOfRange) {
  const GuardedMatrix<float> tokens = three_tokens();
  struct IdCase {
    std::vector<int64_t> ids;
    std::string message;
  };
  const IdCase cases[] = {
      {{1, 0, 0, -1, 2, 1}, "indices[1][1] (element 3) = -1 is out of range [0, 16777215)"},
      {{1, 0, 0, 2, 16777215, 1}, "indices[2][0] (element 4) = 16777215 is out of range"},
      {{1, 0, 0, 2, 2, int64_t{1} << 40}, "indices[2][1] (element 5) = 1099511627776 is out"},
      {{LLONG_MIN, 0, 0, 2, 2, 1}, "indices[0][0] (element 0) = -9223372036854775808"},
  };
  for (const auto& path : kPermutePaths) {
    for (const IdCase& c : cases) {
      GuardedMatrix<float> permuted(6, 2);
      GuardedBuffer<int32_t> sorted(6);
      const mpg::Status s =
          run_token_permute(tokens, c.ids, 2, 0, permuted, sorted, path_options(path));
      expect_error(s, {mpg_test::path_name(path), ErrorCode::kIndexOutOfRange, c.message});
      EXPECT_TRUE(permuted.payload_untouched() && permuted.guards_intact());
      EXPECT_TRUE(sorted.payload_untouched() && sorted.guards_intact());
    }
    // int32 ids: the first offender is named; the largest admissible id is accepted.
    GuardedMatrix<float> permuted(6, 2);
    GuardedBuffer<int32_t> sorted(6);
    const std::vector<int32_t> bad = {1, 0, 0, 2, -5, INT_MAX};
    expect_error(run_token_permute(tokens, bad, 2, 0, permuted, sorted, path_options(path)),
                 {"int32", ErrorCode::kIndexOutOfRange, "indices[2][0] (element 4) = -5"});
    EXPECT_TRUE(permuted.payload_untouched() && sorted.payload_untouched());
    const std::vector<int32_t> top = {16777214, 0, 0, 16777214, 2, 1};
    ASSERT_TRUE(run_token_permute(tokens, top, 2, 0, permuted, sorted, path_options(path)).ok());
    EXPECT_EQ(contents(sorted), (std::vector<int32_t>{4, 0, 1, 5, 3, 2}));
  }
}

TEST(TokenPermuteErrors, ShapesPointersOverlapsAndOptions) {
  GuardedMatrix<float> tokens = three_tokens();
  std::vector<int32_t> ids = kExperts;
  GuardedMatrix<float> permuted(6, 2);
  GuardedBuffer<int32_t> sorted(6);
  const mpg::MutableIndexView<int32_t> sorted_view(sorted.data(), 6);
  const auto call = [&](mpg::ConstMatrixView<float> t, mpg::IndexView<int32_t> e, int64_t k,
                        int64_t num_out, mpg::MatrixView<float> p, mpg::MutableIndexView<int32_t> s,
                        const mpg::Options& o = {}) {
    return mpg::token_permute(t, e, k, num_out, p, s, o);
  };
  const mpg::IndexView<int32_t> e(ids);
  const auto t = tokens.const_view();
  const auto p = permuted.view();
  // Arenas that outputs are carved out of, for the overlap cases.
  std::vector<float> shared(64, 0.f);
  std::vector<int32_t> id_arena(64, 0);
  std::copy(ids.begin(), ids.end(), id_arena.begin());
  const mpg::IndexView<int32_t> e_arena(id_arena.data(), 6);
  auto* id_floats = reinterpret_cast<float*>(id_arena.data());
  mpg::Options negative_threads;
  negative_threads.num_threads = -1;
  const std::pair<ErrorCase, mpg::Status> cases[] = {
      {{"topk 0", ErrorCode::kInvalidArgument, "num_topk = 0 must be >= 1"},
       call(t, e, 0, 0, p, sorted_view)},
      {{"len % K", ErrorCode::kShapeMismatch, "indices has 6 elements, which is not a"},
       call(t, e, 4, 0, p, sorted_view)},
      {{"tokens rows", ErrorCode::kShapeMismatch, "tokens has 3 rows but indices has N = 2"},
       call(t, e, 3, 0, {permuted.data(), 6, 2}, sorted_view)},
      {{"out rows", ErrorCode::kShapeMismatch,
        "permute_tokens_out has 6 rows but must have n = 5 (num_out_tokens = -1"},
       call(t, e, 2, -1, p, sorted_view)},
      {{"out cols", ErrorCode::kShapeMismatch, "permute_tokens_out has hidden size 1"},
       call(t, e, 2, 0, {permuted.data(), 6, 1}, sorted_view)},
      {{"sorted size", ErrorCode::kShapeMismatch,
        "sorted_indices_out has 5 elements but must have N*K = 6"},
       call(t, e, 2, 0, p, {sorted.data(), 5})},
      {{"null tokens", ErrorCode::kNullPointer, "tokens data is null"},
       call({nullptr, 3, 2}, e, 2, 0, p, sorted_view)},
      {{"null ids", ErrorCode::kNullPointer, "indices data is null"},
       call(t, {nullptr, 6}, 2, 0, p, sorted_view)},
      {{"null out", ErrorCode::kNullPointer, "permute_tokens_out data is null"},
       call(t, e, 2, 0, {nullptr, 6, 2}, sorted_view)},
      {{"null sorted", ErrorCode::kNullPointer, "sorted_indices_out data is null"},
       call(t, e, 2, 0, p, {nullptr, 6})},
      {{"out stride", ErrorCode::kInvalidArgument, "permute_tokens_out row stride 1 is smaller"},
       call(t, e, 2, 0, {permuted.data(), 6, 2, 1}, sorted_view)},
      {{"out on tokens", ErrorCode::kOverlap, "permute_tokens_out overlaps tokens"},
       call({shared.data(), 3, 2}, e, 2, 0, {shared.data() + 5, 6, 2}, sorted_view)},
      {{"out on ids", ErrorCode::kOverlap, "permute_tokens_out overlaps indices"},
       call(t, e_arena, 2, 0, {id_floats + 5, 6, 2}, sorted_view)},
      {{"out on sorted", ErrorCode::kOverlap, "permute_tokens_out overlaps sorted_indices_out"},
       call(t, e, 2, 0, {id_floats + 20, 6, 2}, {id_arena.data() + 30, 6})},
      {{"sorted on tokens", ErrorCode::kOverlap, "sorted_indices_out overlaps tokens"},
       call({shared.data(), 3, 2}, e, 2, 0, p, {reinterpret_cast<int32_t*>(shared.data()) + 3, 6})},
      {{"sorted on ids", ErrorCode::kOverlap, "sorted_indices_out overlaps indices"},
       call(t, e_arena, 2, 0, p, {id_arena.data() + 1, 6})},
      {{"threads", ErrorCode::kInvalidArgument, "options.num_threads = -1"},
       call(t, e, 2, 0, p, sorted_view, negative_threads)},
  };
  for (const auto& [c, s] : cases) expect_error(s, c);
  EXPECT_TRUE(permuted.payload_untouched() && permuted.guards_intact());
  EXPECT_TRUE(sorted.payload_untouched() && sorted.guards_intact());
  EXPECT_EQ(ids, kExperts);
  EXPECT_TRUE(std::equal(kExperts.begin(), kExperts.end(), id_arena.begin()));
  EXPECT_TRUE(std::all_of(id_arena.begin() + 6, id_arena.end(), [](int32_t x) { return x == 0; }));
  EXPECT_TRUE(std::all_of(shared.begin(), shared.end(), [](float x) { return x == 0.f; }));
}

TEST(TokenPermute, EmptyShapes) {
  for (const auto& path : kPermutePaths) {
    GuardedMatrix<float> tokens(0, 4);
    GuardedMatrix<float> permuted(0, 4);
    GuardedBuffer<int32_t> sorted(0);
    const std::vector<int32_t> none;
    EXPECT_TRUE(run_token_permute(tokens, none, 3, 0, permuted, sorted, path_options(path)).ok());
    // H = 0: ranks are still written.
    GuardedMatrix<float> flat(3, 0);
    GuardedMatrix<float> flat_out(6, 0);
    GuardedBuffer<int32_t> flat_sorted(6);
    ASSERT_TRUE(
        run_token_permute(flat, kExperts, 2, 0, flat_out, flat_sorted, path_options(path)).ok());
    EXPECT_EQ(contents(flat_sorted), kRanks);
  }
}

// ---------------------------------------------------------------------------------------------
// The Eigen form.

TEST(TokenPermute, EigenForm) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Ids = Eigen::Matrix<int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  RowMajor tokens(3, 2);
  tokens << 1, 2, 3, 4, 5, 6;
  Ids ids(3, 2);
  ids << 1, 0, 0, 2, 2, 1;
  RowMajor permuted(4, 2);
  Eigen::VectorXi sorted(6);
  const mpg::Status s = mpg::token_permute(tokens, ids, 4, permuted, sorted);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(std::vector<int32_t>(sorted.data(), sorted.data() + 6), kRanks);
  RowMajor want(4, 2);
  want << 1, 2, 3, 4, 1, 2, 5, 6;
  EXPECT_EQ(permuted, want);
}

// ---------------------------------------------------------------------------------------------
// Agreement with routing.hpp, and the round trip through permute_grad.

// route_dropless gives the same sorted_indices; its R equals n for num_out_tokens in [1, N*K]
// and beyond (both clamp); permute with those gives the same rows. Where they differ (0 and
// negative num_out_tokens) is stated in routing.hpp and checked here.
TYPED_TEST(TokenPermuteTyped, AgreesWithRouteDroplessAndPermute) {
  using T = TypeParam;
  if constexpr (!mpg::kIsElement<T>) {
    GTEST_SKIP() << "routing.hpp's permute takes the arithmetic dtypes only";
  } else {
    std::mt19937_64 rng(41);
    for (int round = 0; round < 20; ++round) {
      const int64_t n = std::uniform_int_distribution<int64_t>(1, 30)(rng);
      const int64_t topk = std::uniform_int_distribution<int64_t>(1, 6)(rng);
      const int64_t experts = std::uniform_int_distribution<int64_t>(1, 12)(rng);
      const int64_t hidden = std::uniform_int_distribution<int64_t>(1, 40)(rng);
      std::vector<int32_t> ids(static_cast<size_t>(n * topk));
      for (auto& e : ids) e = std::uniform_int_distribution<int32_t>(0, experts - 1)(rng);
      GuardedMatrix<T> tokens(n, hidden);
      mpg_test::fill_random(tokens, rng, mpg_test::Values::kWithSpecials);
      const int64_t num_out = std::uniform_int_distribution<int64_t>(1, n * topk + 3)(rng);
      const int64_t rows = mpg::token_permute_rows(num_out, n * topk);

      std::vector<int32_t> route_sorted;
      int64_t route_rows = -1;
      ASSERT_TRUE(mpg::route_dropless(mpg::IndexView<int32_t>(ids), topk, experts, num_out,
                                      &route_sorted, &route_rows)
                      .ok());
      GuardedMatrix<T> permuted(rows, hidden);
      GuardedBuffer<int32_t> sorted(static_cast<size_t>(n * topk));
      ASSERT_TRUE(run_token_permute(tokens, ids, topk, num_out, permuted, sorted).ok());
      EXPECT_EQ(contents(sorted), route_sorted);
      EXPECT_EQ(route_rows, rows);
      GuardedMatrix<T> routed(route_rows, hidden);
      const mpg::Status permuted_by_route = mpg::permute(tokens.const_view(), route_sorted, topk,
                                                         mpg::Mode::kDropless, routed.view());
      ASSERT_TRUE(permuted_by_route.ok()) << permuted_by_route.message();
      EXPECT_TRUE(routed.same_bytes(permuted));

      // The documented differences: route_dropless reads 0 as "keep none" and refuses < 0.
      ASSERT_TRUE(mpg::route_dropless(mpg::IndexView<int32_t>(ids), topk, experts, int64_t{0},
                                      &route_sorted, &route_rows)
                      .ok());
      EXPECT_EQ(route_rows, 0);
      EXPECT_EQ(mpg::token_permute_rows(0, n * topk), n * topk);
      EXPECT_FALSE(mpg::route_dropless(mpg::IndexView<int32_t>(ids), topk, experts, int64_t{-1},
                                       &route_sorted, &route_rows)
                       .ok());
    }
  }
}

// token_permute's outputs fed to permute_grad with R = n: token t's row comes back once per
// kept copy. With small integers every sum is exact, so the expectation (count of kept copies,
// from the definition of the rank, times the token row, in fp64) is exact too.
TYPED_TEST(TokenPermuteTyped, RoundTripThroughPermuteGrad) {
  using T = TypeParam;
  if constexpr (!mpg::kIsElement<T>) {
    GTEST_SKIP() << "permute_grad takes the arithmetic dtypes only";
  } else {
    std::mt19937_64 rng(43);
    for (int round = 0; round < 30; ++round) {
      const int64_t n = std::uniform_int_distribution<int64_t>(0, 25)(rng);
      const int64_t topk = std::uniform_int_distribution<int64_t>(1, 8)(rng);
      const int64_t hidden = std::uniform_int_distribution<int64_t>(1, 70)(rng);
      std::vector<int64_t> ids(static_cast<size_t>(n * topk));
      for (auto& e : ids) e = std::uniform_int_distribution<int64_t>(0, 9)(rng);
      const int64_t num_out = std::uniform_int_distribution<int64_t>(-n * topk, n * topk)(rng);
      const int64_t rows = mpg::token_permute_rows(num_out, n * topk);
      GuardedMatrix<T> tokens(n, hidden);
      mpg_test::fill_random(tokens, rng, mpg_test::Values::kSmallIntegers);
      GuardedMatrix<T> permuted(rows, hidden);
      GuardedBuffer<int32_t> sorted(static_cast<size_t>(n * topk));
      ASSERT_TRUE(run_token_permute(tokens, ids, topk, num_out, permuted, sorted).ok());

      GuardedMatrix<T> back(n, hidden);
      const std::vector<int32_t> s = contents(sorted);
      const mpg::Status st =
          mpg::permute_grad(permuted.const_view(), s, topk, mpg::Mode::kDropless, back.view());
      ASSERT_TRUE(st.ok()) << st.message();
      const std::vector<int32_t> ranks = ranks_by_definition(ids);
      for (int64_t t = 0; t < n; ++t) {
        int kept = 0;
        for (int64_t k = 0; k < topk; ++k) kept += ranks[static_cast<size_t>(t * topk + k)] < rows;
        for (int64_t h = 0; h < hidden; ++h) {
          const double want = kept * static_cast<double>(static_cast<float>(tokens.at(t, h)));
          EXPECT_EQ(static_cast<double>(static_cast<float>(back.at(t, h))), want)
              << "token " << t << " column " << h;
        }
      }
    }
  }
}

}  // namespace
