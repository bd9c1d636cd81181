// quickstart: one realistic MoE layer's permute backward, end to end.
//
//   random top-K routing -> mpg::route_dropless -> forward mpg::permute -> random upstream grad
//   -> backward through mpg::permute_grad (typed API) and the two-phase API
//   -> both checked bit for bit against the reference path -> time and GB/s of the typed call.
//
// Defaults are a typical layer: 4096 tokens, 64 experts, top-8, hidden 4096, bfloat16.
// Override with e.g. `quickstart --tokens 1024 --hidden 512 --threads 2 --runs 9`.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "mpg/mpg.hpp"

namespace {

using T = mpg::bfloat16;
using Index = int32_t;

struct Config {
  int64_t tokens = 4096;
  int64_t experts = 64;
  int64_t topk = 8;
  int64_t hidden = 4096;
  int64_t runs = 5;
  int threads = 0;  // 0 = mpg's default ($MPG_NUM_THREADS, else the CPUs this process may use)
  uint64_t seed = 42;
};

void print_usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--tokens N] [--experts E] [--topk K] [--hidden H] [--runs R]\n"
               "          [--threads T] [--seed S]\n",
               argv0);
}

// Returns nullopt (after printing why) for anything it does not understand.
std::optional<Config> parse_args(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h" || i + 1 >= argc) return std::nullopt;
    char* end = nullptr;
    const long long value = std::strtoll(argv[i + 1], &end, 10);
    if (end == argv[i + 1] || *end != '\0' || value < 0) {
      std::fprintf(stderr, "%s: '%s' is not a non-negative integer\n", flag.c_str(), argv[i + 1]);
      return std::nullopt;
    }
    if (flag == "--tokens") {
      c.tokens = value;
    } else if (flag == "--experts") {
      c.experts = value;
    } else if (flag == "--topk") {
      c.topk = value;
    } else if (flag == "--hidden") {
      c.hidden = value;
    } else if (flag == "--runs") {
      c.runs = value;
    } else if (flag == "--threads") {
      c.threads = static_cast<int>(value);
    } else if (flag == "--seed") {
      c.seed = static_cast<uint64_t>(value);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return std::nullopt;
    }
  }
  if (c.topk < 1 || c.topk > c.experts || c.runs < 1) {
    std::fprintf(stderr, "need 1 <= topk <= experts and runs >= 1\n");
    return std::nullopt;
  }
  return c;
}

// Top-K routing picks K distinct experts per token: a partial Fisher-Yates shuffle per token.
std::vector<Index> random_routing(const Config& c, std::mt19937_64& rng) {
  std::vector<Index> experts(static_cast<size_t>(c.experts));
  std::vector<Index> ids(static_cast<size_t>(c.tokens * c.topk));
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    for (int64_t k = 0; k < c.topk; ++k) {
      std::uniform_int_distribution<int64_t> pick(k, c.experts - 1);
      std::swap(experts[static_cast<size_t>(k)], experts[static_cast<size_t>(pick(rng))]);
      ids[static_cast<size_t>(t * c.topk + k)] = experts[static_cast<size_t>(k)];
    }
  }
  return ids;
}

// Uniform values in [-1, 1). A splitmix64 stream: the gradient has ~10^8 elements, and this
// keeps filling it to a fraction of a second.
void fill_random(std::vector<T>* v, uint64_t seed) {
  uint64_t state = seed;
  for (T& x : *v) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x = T(static_cast<float>(z >> 40) * 0x1p-23f - 1.0f);
  }
}

bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

bool report(const char* what, const mpg::Status& s) {
  if (!s.ok()) std::fprintf(stderr, "%s failed: %s\n", what, s.message().c_str());
  return s.ok();
}

// The backward through the vendor-style two-phase API, on the same buffers.
bool run_two_phase(std::vector<T>& grad, int64_t rows, std::vector<Index>& indices, const Config& c,
                   std::vector<T>* out) {
  namespace acl = mpg::aclnn;
  const int64_t grad_dims[] = {rows, c.hidden};
  const int64_t index_dims[] = {static_cast<int64_t>(indices.size())};
  const int64_t out_dims[] = {c.tokens, c.hidden};
  acl::Tensor* g =
      acl::CreateTensor(grad_dims, 2, acl::DataType::kBFloat16, nullptr, 0, grad.data());
  acl::Tensor* s =
      acl::CreateTensor(index_dims, 1, acl::DataType::kInt32, nullptr, 0, indices.data());
  acl::Tensor* o =
      acl::CreateTensor(out_dims, 2, acl::DataType::kBFloat16, nullptr, 0, out->data());
  uint64_t workspace_size = 0;
  acl::Executor* executor = nullptr;
  acl::aclnnStatus status =
      acl::MoeTokenPermuteGradGetWorkspaceSize(g, s, c.topk, false, o, &workspace_size, &executor);
  acl::DestroyTensor(g);  // descriptors are not needed after phase one
  acl::DestroyTensor(s);
  acl::DestroyTensor(o);
  if (status == acl::kSuccess) {
    std::vector<uint8_t> workspace(workspace_size);
    status = acl::MoeTokenPermuteGrad(workspace.data(), workspace_size, executor);
  }
  if (status != acl::kSuccess) {
    std::fprintf(stderr, "two-phase API failed with %d: %s\n", status, acl::GetLastErrorMessage());
  }
  return status == acl::kSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Config> parsed = parse_args(argc, argv);
  if (!parsed) {
    print_usage(argv[0]);
    return 2;
  }
  const Config& c = *parsed;
  std::printf("mpg %s quickstart: tokens %lld, experts %lld, top-%lld, hidden %lld, bfloat16\n",
              mpg::kVersion, static_cast<long long>(c.tokens), static_cast<long long>(c.experts),
              static_cast<long long>(c.topk), static_cast<long long>(c.hidden));

  // Routing and the forward permute give a realistic sorted_indices and gradient shape.
  std::mt19937_64 rng(c.seed);
  const std::vector<Index> expert_ids = random_routing(c, rng);
  std::vector<Index> sorted_indices;
  int64_t rows = 0;
  if (!report("route_dropless", mpg::route_dropless(expert_ids, c.topk, c.experts, std::nullopt,
                                                    &sorted_indices, &rows))) {
    return 1;
  }
  const size_t hidden = static_cast<size_t>(c.hidden);
  std::vector<T> tokens(static_cast<size_t>(c.tokens) * hidden);
  std::vector<T> permuted(static_cast<size_t>(rows) * hidden);
  fill_random(&tokens, c.seed + 1);
  if (!report("permute", mpg::permute(mpg::MatrixView(tokens.data(), c.tokens, c.hidden),
                                      sorted_indices, c.topk, mpg::Mode::kDropless,
                                      mpg::MatrixView(permuted.data(), rows, c.hidden)))) {
    return 1;
  }
  std::vector<T> grad(permuted.size());  // upstream gradient of the permuted rows
  fill_random(&grad, c.seed + 2);

  // All outputs are allocated and touched here, so no run below pays for first-touch faults.
  std::vector<T> out(tokens.size(), T(0.0f));
  std::vector<T> out_reference(tokens.size(), T(0.0f));
  std::vector<T> out_two_phase(tokens.size(), T(0.0f));
  const mpg::ConstMatrixView<T> grad_view(grad.data(), rows, c.hidden);
  mpg::Options options;
  options.num_threads = c.threads;
  mpg::Options reference_options;
  reference_options.path = mpg::Path::kReference;

  if (!report("permute_grad (reference)",
              mpg::permute_grad(grad_view, sorted_indices, c.topk, mpg::Mode::kDropless,
                                mpg::MatrixView(out_reference.data(), c.tokens, c.hidden),
                                reference_options)) ||
      !run_two_phase(grad, rows, sorted_indices, c, &out_two_phase)) {
    return 1;
  }
  std::vector<double> seconds;
  for (int64_t run = 0; run <= c.runs; ++run) {  // run 0 is the warm-up
    const auto start = std::chrono::steady_clock::now();
    const mpg::Status s =
        mpg::permute_grad(grad_view, sorted_indices, c.topk, mpg::Mode::kDropless,
                          mpg::MatrixView(out.data(), c.tokens, c.hidden), options);
    const auto stop = std::chrono::steady_clock::now();
    if (!report("permute_grad", s)) return 1;
    if (run > 0) seconds.push_back(std::chrono::duration<double>(stop - start).count());
  }

  const bool typed_ok = same_bits(out, out_reference);
  const bool two_phase_ok = same_bits(out_two_phase, out_reference);
  std::printf("typed API     == reference path: %s\n", typed_ok ? "yes, bit for bit" : "NO");
  std::printf("two-phase API == reference path: %s\n", two_phase_ok ? "yes, bit for bit" : "NO");

  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  // Every copy is kept here (no num_out_tokens), so rows == kept copies.
  const double row_bytes = static_cast<double>(c.hidden) * sizeof(T);
  const double bytes = static_cast<double>(rows) * row_bytes +
                       static_cast<double>(c.tokens) * row_bytes +
                       static_cast<double>(sorted_indices.size()) * sizeof(Index);
  std::printf("permute_grad: median %.3f ms of %lld runs (after 1 warm-up), %.1f GB/s\n",
              median * 1e3, static_cast<long long>(c.runs), bytes / median * 1e-9);
  std::printf(
      "  byte model: kept grad rows read (%lld x %lld x 2 B) + out written (%lld x %lld x 2 B)"
      " + indices read (%zu x 4 B) = %.1f MB\n",
      static_cast<long long>(rows), static_cast<long long>(c.hidden),
      static_cast<long long>(c.tokens), static_cast<long long>(c.hidden), sorted_indices.size(),
      bytes * 1e-6);
  return typed_ok && two_phase_ok ? 0 : 1;
}
