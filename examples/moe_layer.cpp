// A small mixture-of-experts layer trained on the CPU with mpg: the tour of the whole family.
//
//   forward:  router logits = x Wr, softmax, top-K       (Eigen)
//             permuted = MoeTokenPermute(x, top-K ids)  (mpg::token_permute)
//             h = permuted_block(e) * W_e per expert    (Eigen, one matmul per expert)
//             out[t] = sum_k p[t][k] h[S[t*K+k]]        (the combine: mpg::unpermute)
//             loss = 0.5 / N * |out - y|^2
//   backward: dh, dp = MoeTokenUnpermuteGrad(h, dout, S, p)   (mpg::unpermute_grad)
//             dW_e = permuted_block^T dh_block, dpermuted = dh W_e^T   (Eigen)
//             dx = MoeTokenPermuteGrad(dpermuted, S)                   (mpg::permute_grad)
//             dlogits from dp through the softmax, dWr = x^T dlogits   (Eigen)
//   SGD on a toy regression (y = a fixed random MoE of x), printing the loss as it falls, and a
//   central-difference check of one entry of dW_e and one of dWr (through dprobs, with the
//   routing unchanged by the step). Exits non-zero if the loss does not fall or a check fails
//   (the ctest example.moe_layer runs it). Every mpg call deduces its types from Eigen objects.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include <Eigen/Core>

#include "mpg/mpg.hpp"

namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Ids = Eigen::Matrix<int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr int64_t kTokens = 256, kHidden = 32, kExperts = 8, kTopK = 2;

struct Params {
  Matrix router;                // Wr [H, E]
  std::vector<Matrix> experts;  // W_e [H, H]
};

struct Grads {
  Matrix router;
  std::vector<Matrix> experts;
  Matrix x;  // dL/dx (not trained here; shows permute_grad's place)
};

bool check(const mpg::Status& s, const char* what) {
  if (!s.ok()) std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
  return s.ok();
}

// Forward (and, with grads, backward). Returns the loss; false in *ok on an mpg error. The
// top-K expert ids go to *routing when it is given.
double step(const Params& w, const Matrix& x, const Matrix& y, Grads* grads, bool* ok,
            Matrix* out_copy = nullptr, Ids* routing = nullptr) {
  // Router: softmax over experts, top-K with their (unrenormalized) probabilities.
  Matrix logits = x * w.router;
  Matrix soft(kTokens, kExperts);
  for (int64_t t = 0; t < kTokens; ++t) {
    const float top = logits.row(t).maxCoeff();
    soft.row(t) = (logits.row(t).array() - top).exp();
    soft.row(t) /= soft.row(t).sum();
  }
  Ids ids(kTokens, kTopK);
  Matrix probs(kTokens, kTopK);
  for (int64_t t = 0; t < kTokens; ++t) {
    std::vector<int32_t> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + kTopK, order.end(),
                      [&](int32_t a, int32_t b) { return soft(t, a) > soft(t, b); });
    for (int64_t k = 0; k < kTopK; ++k) {
      ids(t, k) = order[static_cast<size_t>(k)];
      probs(t, k) = soft(t, order[static_cast<size_t>(k)]);
    }
  }
  // MoeTokenPermute: copies sorted by expert; expert e's rows are one contiguous block.
  if (routing != nullptr) *routing = ids;
  Matrix permuted(kTokens * kTopK, kHidden);
  Eigen::VectorXi sorted(kTokens * kTopK);
  *ok = check(mpg::token_permute(x, ids, kTokens * kTopK, permuted, sorted), "token_permute");
  if (!*ok) return 0.0;
  const mpg::IndexView<int32_t> sorted_view(sorted.data(), sorted.size());
  std::vector<int64_t> begin(kExperts + 1, 0);
  for (int64_t i = 0; i < ids.size(); ++i) ++begin[static_cast<size_t>(ids.data()[i]) + 1];
  std::partial_sum(begin.begin(), begin.end(), begin.begin());
  const auto rows_of = [&](const Matrix& m, int64_t e) {
    return m.middleRows(begin[e], begin[e + 1] - begin[e]);
  };
  Matrix h(kTokens * kTopK, kHidden);
  for (int64_t e = 0; e < kExperts; ++e) {
    h.middleRows(begin[e], begin[e + 1] - begin[e]) = rows_of(permuted, e) * w.experts[e];
  }
  // MoeTokenUnpermute: out[t] = sum over k of probs(t, k) * h[S[t*K+k]], in fp32, ascending k.
  Matrix out(kTokens, kHidden);
  *ok = check(mpg::unpermute(h, sorted_view, probs, mpg::Mode::kDropless, out), "unpermute");
  if (!*ok) return 0.0;
  if (out_copy != nullptr) *out_copy = out;
  const Matrix diff = out - y;
  const double loss = 0.5 * diff.cast<double>().squaredNorm() / kTokens;
  if (grads == nullptr) return loss;

  // MoeTokenUnpermuteGrad: dh (the weighted scatter) and dprobs (the tree-reduced dots).
  const Matrix dout = diff / static_cast<float>(kTokens);
  Matrix dh(kTokens * kTopK, kHidden);
  Matrix dprobs(kTokens, kTopK);
  *ok = check(mpg::unpermute_grad(h, dout, sorted_view, probs, dh, dprobs), "unpermute_grad");
  if (!*ok) return loss;
  // Experts: dW_e = permuted_e^T dh_e; dpermuted_e = dh_e W_e^T.
  Matrix dpermuted(kTokens * kTopK, kHidden);
  grads->experts.resize(kExperts);
  for (int64_t e = 0; e < kExperts; ++e) {
    grads->experts[e] = rows_of(permuted, e).transpose() * rows_of(dh, e);
    dpermuted.middleRows(begin[e], begin[e + 1] - begin[e]) =
        rows_of(dh, e) * w.experts[e].transpose();
  }
  // MoeTokenPermuteGrad: each token's copies summed back into one row.
  grads->x.resize(kTokens, kHidden);
  *ok = check(mpg::permute_grad(dpermuted, sorted_view, kTopK, mpg::Mode::kDropless, grads->x),
              "permute_grad");
  if (!*ok) return loss;
  // Router: p_j = softmax_j(z), so dz_i = sum over selected j of dp_j p_j (delta_ij - p_i).
  Matrix dlogits = Matrix::Zero(kTokens, kExperts);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t k = 0; k < kTopK; ++k) {
      const int32_t j = ids(t, k);
      const float g = dprobs(t, k) * soft(t, j);
      dlogits.row(t) -= g * soft.row(t);
      dlogits(t, j) += g;
    }
  }
  grads->router = x.transpose() * dlogits;
  grads->x += dlogits * w.router.transpose();
  return loss;
}

Params random_params(std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  const auto random = [&](int64_t r, int64_t c) {
    return Matrix(Matrix::NullaryExpr(r, c, [&]() { return normal(rng); }));
  };
  Params p;
  p.router = random(kHidden, kExperts);
  for (int64_t e = 0; e < kExperts; ++e) p.experts.push_back(random(kHidden, kHidden));
  return p;
}

// Central difference of the loss in one parameter entry against the analytic gradient: 1 if
// they agree, 0 if not, -1 if the step changed some token's top-K choice (not differentiable
// there: no check, try another entry).
int finite_difference(Params w, float& (*entry_of)(Params&), float analytic, const Matrix& x,
                      const Matrix& y, const char* name) {
  bool ok = true;
  const float eps = 1e-3f;
  float& v = entry_of(w);
  const float saved = v;
  Ids routing_up, routing_down, routing;
  v = saved + eps;
  const double up = step(w, x, y, nullptr, &ok, nullptr, &routing_up);
  v = saved - eps;
  const double down = step(w, x, y, nullptr, &ok, nullptr, &routing_down);
  v = saved;
  step(w, x, y, nullptr, &ok, nullptr, &routing);
  if (ok && (routing_up != routing || routing_down != routing)) return -1;
  const double numeric = (up - down) / (2.0 * eps);
  const double error = std::fabs(numeric - analytic);
  const bool pass = ok && error <= 1e-3 + 5e-2 * std::fabs(numeric);
  std::printf("finite difference %-10s analytic %+.6f numeric %+.6f %s\n", name, analytic, numeric,
              pass ? "ok" : "MISMATCH");
  return pass ? 1 : 0;
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Matrix x = Matrix::NullaryExpr(kTokens, kHidden, [&]() { return normal(rng); });
  Params teacher = random_params(rng, 0.18f);
  Params w = random_params(rng, 0.05f);
  w.router = teacher.router;  // the student learns the experts and refines the router
  bool ok = true;
  Matrix y;  // the toy regression's targets: a teacher MoE of the same shape
  step(teacher, x, Matrix::Zero(kTokens, kHidden), nullptr, &ok, &y);

  const float lr = 2.0f;
  const int kSteps = 40;
  double first = 0.0, last = 0.0;
  Grads grads;
  for (int i = 0; i < kSteps && ok; ++i) {
    const double loss = step(w, x, y, &grads, &ok);
    if (i == 0) {
      first = loss;
      // Check the backward once, at the starting point: an expert weight, then the first
      // router weight (through dprobs) whose step leaves the routing as it is.
      ok = finite_difference(
               w, [](Params& p) -> float& { return p.experts[3](5, 7); }, grads.experts[3](5, 7), x,
               y, "dW_3[5,7]") == 1 &&
           ok;
      int router_check = -1;
      for (int64_t r = 2; r < kHidden && router_check == -1; ++r) {
        static int64_t row;
        row = r;
        router_check = finite_difference(
            w, [](Params& p) -> float& { return p.router(row, 4); }, grads.router(r, 4), x, y,
            "dWr[r,4]");
      }
      ok = router_check == 1 && ok;
    }
    last = loss;
    if (i % 5 == 0 || i == kSteps - 1) std::printf("step %2d  loss %.6f\n", i, loss);
    w.router -= lr * grads.router;
    for (int64_t e = 0; e < kExperts; ++e) w.experts[e] -= lr * grads.experts[e];
  }
  if (!ok) return 1;
  if (!(last < 0.5 * first)) {
    std::fprintf(stderr, "the loss did not fall: %.6f -> %.6f\n", first, last);
    return 1;
  }
  std::printf("loss %.6f -> %.6f: ok\n", first, last);
  return 0;
}
