// libFuzzer target over the two-phase API (mpg/aclnn.hpp): MoeTokenPermuteGrad,
// MoeInitRoutingV2Grad (drop_pad_mode and active_num too) and MoeTokenUnpermute (with or without
// probs of any dtype, padded_mode, restore_shape). Bytes decode into tensor descriptors (shapes,
// dtypes incl. invalid ones, strides, offsets), placements inside one shared arena (so out may
// alias grad, the indices or probs), index values (mostly valid, sometimes corrupted) and data.
//
// Checked on every input: no crash or sanitizer report; a status in {0, 161001, 161002}; on an
// error, not one byte of the arena changed (guards at both ends included); on success, only the
// bytes of out's elements changed (row gaps and guards keep the sentinel), out equals the op's
// typed API with Path::kReference bit for bit, and out shared no byte with any input
// (brute-force byte sets); a consumed executor is rejected. Inputs starting with 'P' drive
// MoeTokenPermute and inputs starting with 'G' MoeTokenUnpermuteGrad (two outputs, either laid
// over any input or the other output) under the same invariants (run_token_permute,
// run_unpermute_grad).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mpg/aclnn.hpp"
#include "mpg/permute_grad.hpp"
#include "mpg/token_permute.hpp"

namespace {

namespace acl = mpg::aclnn;

constexpr uint8_t kSentinel = 0xA5;
constexpr int64_t kGuardBytes = 64;  // > 3 offset elements * 8 bytes: pointers stay in the arena

#define FUZZ_CHECK(cond)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\nlast error: %s\n", #cond, __FILE__, \
                   __LINE__, acl::GetLastErrorMessage());                                      \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

// One tensor as the fuzzer described it to CreateTensor, plus where it lives in the arena.
struct Desc {
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;  // what is passed (explicit) or the row-major default
  bool explicit_strides = false;
  acl::DataType dtype = acl::DataType::kFloat;
  int64_t offset = 0;      // elements, as passed to CreateTensor
  int64_t position = 0;    // byte offset of the data argument inside the arena
  bool null_data = false;  // pass data = nullptr
  bool null_tensor = false;
};

// What CreateTensor scales the offset by: the element size, or 1 for an unknown dtype.
int64_t element_size(acl::DataType d) {
  return acl::size_of(d) > 0 ? acl::size_of(d) : 1;
}

bool is_element_dtype(acl::DataType d) {
  mpg::DType dtype{};
  return acl::to_dtype(d, &dtype) && mpg::is_arithmetic(dtype);
}

// The codes of a list of dtypes, from mpg's dtype table.
template <class... T>
constexpr std::array<acl::DataType, sizeof...(T)> codes_of(mpg::TypeList<T...>) {
  return {acl::data_type_of<T>()...};
}
constexpr auto kElementCodes = codes_of(mpg::ElementTypeList{});
constexpr auto kIndexCodes = codes_of(mpg::AllIndexTypes{});

acl::DataType pick_dtype(FuzzedDataProvider& in, bool index) {
  const uint8_t choice = in.ConsumeIntegralInRange<uint8_t>(0, 15);
  if (choice < 12) {
    if (index) return kIndexCodes[choice % kIndexCodes.size()];
    return kElementCodes[choice % kElementCodes.size()];
  }
  static constexpr int32_t kOthers[] = {0, 1, 2, 3, 9, 27, -1, 1000};
  return static_cast<acl::DataType>(kOthers[in.ConsumeIntegralInRange<int>(0, 7)]);
}

// Row-major strides for dims, then (sometimes) fuzzed ones: wider rows, an odd hidden stride.
void pick_strides(FuzzedDataProvider& in, Desc* d) {
  const size_t rank = d->dims.size();
  d->strides.assign(rank, 1);
  for (size_t i = rank; i-- > 1;)
    d->strides[i - 1] = d->strides[i] * std::max<int64_t>(d->dims[i], 1);
  d->explicit_strides = in.ConsumeBool();
  if (!d->explicit_strides || rank == 0) return;
  const uint8_t how = in.ConsumeIntegralInRange<uint8_t>(0, 7);
  if (rank >= 2) {
    const int64_t gap = in.ConsumeIntegralInRange<int64_t>(0, 5);
    d->strides[rank - 2] += gap;
    if (rank == 3) d->strides[0] = d->strides[1] * std::max<int64_t>(d->dims[1], 1);
  }
  if (how == 1) d->strides[rank - 1] = in.ConsumeIntegralInRange<int64_t>(0, 3);
  if (how == 2) d->strides[0] = in.ConsumeIntegralInRange<int64_t>(-2, 12);
  if (how == 3 && rank == 3) d->strides[0] += in.ConsumeIntegralInRange<int64_t>(-3, 3);
}

// Byte offset (from the arena start) of element idx of d, or -1 for a negative address.
int64_t element_byte(const Desc& d, const std::vector<int64_t>& idx) {
  const int64_t es = element_size(d.dtype);
  int64_t e = d.offset;
  for (size_t i = 0; i < idx.size(); ++i) e += idx[i] * d.strides[i];
  return d.position + e * es;
}

int64_t num_elements(const Desc& d) {
  int64_t n = 1;
  for (int64_t x : d.dims) n *= x;
  return n;
}

// Calls f(byte offset) for every element of d (small tensors only).
template <class F>
void for_each_element(const Desc& d, F f) {
  if (d.dims.empty() || num_elements(d) <= 0) return;
  std::vector<int64_t> idx(d.dims.size(), 0);
  for (;;) {
    f(idx, element_byte(d, idx));
    size_t i = idx.size();
    while (i-- > 0) {
      if (++idx[i] < d.dims[i]) break;
      idx[i] = 0;
      if (i == 0) return;
    }
  }
}

// Largest byte (exclusive) any element of d reaches, assuming non-negative strides.
int64_t max_byte(const Desc& d) {
  int64_t hi = d.position + (d.offset + 1) * 8;
  for_each_element(d, [&](const std::vector<int64_t>&, int64_t b) {
    hi = std::max(hi, b + element_size(d.dtype));
  });
  return hi;
}

// Which two-phase entry an input drives.
enum class Op { kPermuteGrad, kInitRoutingV2Grad, kUnpermute };

// The op and its scalar arguments, as decoded.
struct Call {
  Op op = Op::kPermuteGrad;
  int64_t topk = 1;
  bool padded = false;        // padded_mode, or drop_pad_mode == 1
  int64_t drop_pad_mode = 0;  // InitRoutingV2Grad
  int64_t active_num = 0;     // InitRoutingV2Grad
  bool with_probs = false;    // Unpermute
  Desc probs;                 // Unpermute, when with_probs
};

struct Arena {
  std::vector<uint64_t> words;  // 8-byte aligned storage
  int64_t size = 0;
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(words.data()); }
};

template <class T>
bool same_bits_or_both_nan(T a, T b) {
  if (std::memcmp(&a, &b, sizeof(T)) == 0) return true;
  return std::isnan(static_cast<float>(a)) && std::isnan(static_cast<float>(b));
}

// The probs of an Unpermute call gathered into a contiguous [N, K] copy of P.
template <class P>
std::vector<P> gather_probs(const Desc& p, const uint8_t* before) {
  std::vector<P> probs(static_cast<size_t>(std::max<int64_t>(num_elements(p), 1)));
  for_each_element(p, [&](const std::vector<int64_t>& idx, int64_t b) {
    std::memcpy(&probs[idx[0] * p.dims[1] + idx[1]], before + b, sizeof(P));
  });
  return probs;
}

// The op's typed API on Path::kReference over contiguous copies of the inputs.
template <class T, class I>
mpg::Status reference(const Call& c, const std::vector<T>& grad, int64_t rows, int64_t hidden,
                      const std::vector<I>& indices, int64_t n, std::vector<T>* expected,
                      int64_t tokens, const uint8_t* before) {
  mpg::Options options;
  options.path = mpg::Path::kReference;
  const mpg::ConstMatrixView<T> g(grad.data(), rows, hidden);
  const mpg::IndexView<I> s(indices.data(), n);
  const mpg::MatrixView<T> out(expected->data(), tokens, hidden);
  // drop_pad_mode, not the layout the indices were made for, is what phase one was told.
  const bool padded = c.op == Op::kInitRoutingV2Grad ? c.drop_pad_mode == 1 : c.padded;
  const mpg::Mode mode = padded ? mpg::Mode::kPadded : mpg::Mode::kDropless;
  switch (c.op) {
    case Op::kPermuteGrad: return mpg::permute_grad(g, s, c.topk, mode, out, options);
    case Op::kInitRoutingV2Grad: return mpg::init_routing_v2_grad(g, s, c.topk, mode, out, options);
    case Op::kUnpermute: break;
  }
  if (!c.with_probs) return mpg::unpermute(g, s, mode, out, options);
  const auto weighted = [&](auto tag) {
    using P = typename decltype(tag)::type;
    const std::vector<P> probs = gather_probs<P>(c.probs, before);
    return mpg::unpermute(g, s, mpg::MatrixView(probs.data(), c.probs.dims[0], c.probs.dims[1]),
                          mode, out, options);
  };
  mpg::DType probs_dtype{};
  // Phase one accepted it, so it is an arithmetic dtype.
  FUZZ_CHECK(acl::to_dtype(c.probs.dtype, &probs_dtype) && mpg::is_arithmetic(probs_dtype));
  return mpg::detail::visit_dtype(mpg::ElementTypeList{}, probs_dtype, weighted);
}

// Reference result for out from a snapshot of the arena: rows of grad gathered with the
// fuzzer's own addressing into a contiguous copy, then the op's typed API on Path::kReference.
template <class T, class I>
void check_against_reference(const Call& c, const Desc& g, const Desc& s, const Desc& o,
                             const uint8_t* before, const uint8_t* after, acl::aclnnStatus phase2,
                             const std::string& phase2_message) {
  const int64_t hidden = g.dims.back();
  const int64_t rows = g.dims.size() == 3 ? g.dims[0] * g.dims[1] : g.dims[0];
  std::vector<T> grad(static_cast<size_t>(std::max<int64_t>(rows * hidden, 1)));
  for_each_element(g, [&](const std::vector<int64_t>& idx, int64_t b) {
    const int64_t r = idx.size() == 3 ? idx[0] * g.dims[1] + idx[1] : idx[0];
    std::memcpy(&grad[r * hidden + idx.back()], before + b, sizeof(T));
  });
  const int64_t n = s.dims[0];
  std::vector<I> indices(static_cast<size_t>(std::max<int64_t>(n, 1)));
  for_each_element(s, [&](const std::vector<int64_t>& idx, int64_t b) {
    std::memcpy(&indices[idx[0]], before + b, sizeof(I));
  });
  const int64_t tokens = o.dims[0];
  std::vector<T> expected(static_cast<size_t>(std::max<int64_t>(tokens * hidden, 1)));
  const mpg::Status ref =
      reference<T, I>(c, grad, rows, hidden, indices, n, &expected, tokens, before);
  // Phase two and the typed API check index values alike.
  FUZZ_CHECK(ref.ok() == (phase2 == acl::kSuccess));
  if (!ref.ok()) {
    FUZZ_CHECK(mpg::to_aclnn_status(ref.code()) == phase2);
    FUZZ_CHECK(ref.message() == phase2_message);
    return;
  }
  if (std::getenv("MPG_FUZZ_VERBOSE") != nullptr) {
    for (const Desc* d : {&g, &s, &o, &c.probs}) {
      std::fprintf(stderr, "dtype %d offset %lld position %lld dims/strides",
                   static_cast<int>(d->dtype), static_cast<long long>(d->offset),
                   static_cast<long long>(d->position));
      for (size_t i = 0; i < d->dims.size(); ++i) {
        std::fprintf(stderr, " %lld/%lld", static_cast<long long>(d->dims[i]),
                     static_cast<long long>(d->strides[i]));
      }
      std::fprintf(stderr, "\n");
    }
    std::fprintf(stderr, "op %d padded %d topk %lld probs %d indices", static_cast<int>(c.op),
                 c.padded, static_cast<long long>(c.topk), c.with_probs);
    for (I v : indices) std::fprintf(stderr, " %lld", static_cast<long long>(v));
    std::fprintf(stderr, "\n");
  }
  for_each_element(o, [&](const std::vector<int64_t>& idx, int64_t b) {
    T got;
    std::memcpy(&got, after + b, sizeof(T));
    if (std::getenv("MPG_FUZZ_VERBOSE") != nullptr) {
      std::fprintf(stderr, "out[%lld][%lld] got %g expected %g\n", static_cast<long long>(idx[0]),
                   static_cast<long long>(idx[1]), static_cast<double>(static_cast<float>(got)),
                   static_cast<double>(static_cast<float>(expected[idx[0] * hidden + idx[1]])));
    }
    FUZZ_CHECK(same_bits_or_both_nan(got, expected[idx[0] * hidden + idx[1]]));
  });
}

template <class T>
void dispatch_index(const Call& c, const Desc& g, const Desc& s, const Desc& o,
                    const uint8_t* before, const uint8_t* after, acl::aclnnStatus phase2,
                    const std::string& phase2_message) {
  if (s.dtype == acl::DataType::kInt32) {
    check_against_reference<T, int32_t>(c, g, s, o, before, after, phase2, phase2_message);
  } else {
    check_against_reference<T, int64_t>(c, g, s, o, before, after, phase2, phase2_message);
  }
}

// Index values: a valid permutation (dropless) or distinct rows and -1s (padded), shuffled by
// the input, then sometimes a few entries overwritten with arbitrary values.
std::vector<int64_t> pick_indices(FuzzedDataProvider& in, int64_t n, int64_t grad_rows,
                                  bool padded) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  if (!padded) {
    for (int64_t i = 0; i < n; ++i) v[i] = i;
  } else {
    for (int64_t i = 0; i < n; ++i)
      v[i] = i < grad_rows && in.ConsumeIntegralInRange(0, 3) ? i : -1;
  }
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[in.ConsumeIntegralInRange<int64_t>(0, i)]);
  const int corruptions = in.ConsumeIntegralInRange(0, 7) < 6 ? 0 : in.ConsumeIntegralInRange(1, 3);
  for (int c = 0; c < corruptions && n > 0; ++c) {
    static constexpr int64_t kSpecial[] = {
        -1, -2, 0, int64_t{1} << 31, -(int64_t{1} << 31) - 1, std::numeric_limits<int64_t>::min()};
    const int64_t pos = in.ConsumeIntegralInRange<int64_t>(0, n - 1);
    v[pos] = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-2, grad_rows + n + 1)
                              : kSpecial[in.ConsumeIntegralInRange(0, 5)];
  }
  return v;
}

void run(FuzzedDataProvider& in) {
  Call c;
  c.op = static_cast<Op>(in.ConsumeIntegralInRange<int>(0, 2));
  bool padded = in.ConsumeBool();
  // Unpermute refuses padded_mode = true: mostly ask for the layout it accepts.
  if (c.op == Op::kUnpermute) padded = padded && in.ConsumeIntegralInRange(0, 7) == 0;
  c.with_probs = c.op == Op::kUnpermute && in.ConsumeIntegralInRange(0, 3) != 0;
  int64_t topk = in.ConsumeIntegralInRange<int64_t>(1, 4);
  if (in.ConsumeIntegralInRange(0, 15) == 0) topk = in.ConsumeIntegralInRange<int64_t>(-2, 6);
  if (c.op == Op::kUnpermute && !c.with_probs) topk = 1;  // the vendor's K without probs
  const int64_t tokens = in.ConsumeIntegralInRange<int64_t>(0, 6);
  const int64_t hidden = in.ConsumeIntegralInRange<int64_t>(0, 40);
  const int64_t num_indices =
      tokens * std::max<int64_t>(topk, 1) + (in.ConsumeIntegralInRange(0, 15) == 0 ? 1 : 0);

  Desc g, s, o;
  g.dtype = pick_dtype(in, false);
  o.dtype = in.ConsumeIntegralInRange(0, 15) == 0 ? pick_dtype(in, false) : g.dtype;
  s.dtype = pick_dtype(in, true);

  // grad rows: dropless R in [0, N*K] (sometimes one more); padded E*C as [E*C, H] or [E, C, H].
  const bool grad_3d = padded && in.ConsumeBool();
  int64_t grad_rows = 0;
  if (padded) {
    const int64_t experts = in.ConsumeIntegralInRange<int64_t>(0, 4);
    // Now and then a capacity wide enough (E*C/8 bytes > 8 per index) that the duplicate check
    // sorts the indices instead of using a bitmap.
    const int64_t capacity = in.ConsumeIntegralInRange(0, 7) == 0
                                 ? in.ConsumeIntegralInRange<int64_t>(0, 64)
                                 : in.ConsumeIntegralInRange<int64_t>(0, 6);
    grad_rows = experts * capacity;
    g.dims = grad_3d ? std::vector<int64_t>{experts, capacity, hidden}
                     : std::vector<int64_t>{grad_rows, hidden};
  } else {
    grad_rows = in.ConsumeIntegralInRange<int64_t>(0, num_indices + 1);
    g.dims = {grad_rows, hidden};
  }
  o.dims = {tokens, hidden};
  s.dims = {num_indices};
  // InitRoutingV2Grad: drop_pad_mode from the layout, active_num = R (or 0 when nothing was
  // dropped); now and then any value.
  c.drop_pad_mode = padded ? 1 : 0;
  if (in.ConsumeIntegralInRange(0, 31) == 0) c.drop_pad_mode = in.ConsumeIntegralInRange(-1, 2);
  if (!padded) c.active_num = grad_rows == num_indices && in.ConsumeBool() ? 0 : grad_rows;
  if (padded) c.active_num = in.ConsumeIntegralInRange<int64_t>(0, 5);  // ignored
  if (in.ConsumeIntegralInRange(0, 15) == 0) {
    c.active_num = in.ConsumeIntegralInRange<int64_t>(-2, num_indices + 2);
  }
  // Unpermute's probs [N, K], any dtype (mostly a float one).
  Desc& p = c.probs;
  if (c.with_probs) {
    p.dtype = pick_dtype(in, false);
    p.dims = {tokens, std::max<int64_t>(topk, 0)};
    switch (in.ConsumeIntegralInRange(0, 31)) {  // rare shape misuse
      case 0: p.dims[0] += 1; break;
      case 1: p.dims[1] += 1; break;
      case 2: p.dims = {num_indices}; break;
      default: break;
    }
  }
  switch (in.ConsumeIntegralInRange(0, 31)) {  // rare shape misuse
    case 0: o.dims[1] += 1; break;
    case 1: o.dims[0] += 1; break;
    case 2: g.dims.push_back(1); break;
    case 3: s.dims.push_back(1); break;
    case 4: o.dims = {tokens * std::max<int64_t>(hidden, 1)}; break;
    case 5: g.dims[0] = -1; break;
    case 6:  // huge but empty: must not be allocated or scanned
      if (hidden == 0 && padded && !grad_3d) g.dims[0] = (int64_t{1} << 40) + 3;
      break;
    default: break;
  }
  pick_strides(in, &g);
  pick_strides(in, &o);
  if (c.with_probs) pick_strides(in, &p);
  s.strides.assign(s.dims.size(), 1);
  if (s.dims.size() == 2) s.strides[0] = s.dims[1];
  if (in.ConsumeIntegralInRange(0, 15) == 0) {
    s.explicit_strides = true;
    s.strides[0] = in.ConsumeIntegralInRange<int64_t>(0, 2);
  }
  if (c.with_probs) {
    p.offset = in.ConsumeIntegralInRange<int64_t>(0, 3);
    p.null_data = in.ConsumeIntegralInRange(0, 31) == 0;
  }
  for (Desc* d : {&g, &s, &o}) {
    d->offset = in.ConsumeIntegralInRange<int64_t>(0, 3);
    d->null_data = in.ConsumeIntegralInRange(0, 31) == 0;
    d->null_tensor = in.ConsumeIntegralInRange(0, 63) == 0;
  }

  // Placement: each tensor at its own region, except that out sometimes lands on grad, the
  // indices or probs. Positions are multiples of 8 so every element is aligned for its type.
  std::vector<const Desc*> descs = {&g, &s, &o};
  if (c.with_probs) descs.push_back(&p);
  const auto align8 = [](int64_t x) { return (x + 7) / 8 * 8; };
  g.position = kGuardBytes;
  s.position = align8(max_byte(g) + in.ConsumeIntegralInRange<int64_t>(0, 2) * 8);
  o.position = align8(max_byte(s) + in.ConsumeIntegralInRange<int64_t>(0, 2) * 8);
  if (c.with_probs) {
    p.position = o.position;
    o.position = align8(max_byte(p) + in.ConsumeIntegralInRange<int64_t>(0, 2) * 8);
  }
  const uint8_t alias = in.ConsumeIntegralInRange<uint8_t>(0, 7);
  if (alias == 4 && c.with_probs) {
    o.position = p.position + in.ConsumeIntegralInRange<int64_t>(0, 3) * 8;
  }
  if (alias == 1) o.position = g.position + in.ConsumeIntegralInRange<int64_t>(0, 8) * 8;
  if (alias == 2) o.position = s.position + in.ConsumeIntegralInRange<int64_t>(0, 3) * 8;
  if (alias == 3)
    o.position = std::max<int64_t>(8, g.position - 8 * in.ConsumeIntegralInRange<int64_t>(0, 4));
  const bool huge = g.dims[0] > (int64_t{1} << 32);
  Arena arena;
  {
    int64_t end = 0;
    for (const Desc* d : descs) {
      Desc bounded = *d;  // a negative stride never gets past validation: size as if 0
      for (int64_t& x : bounded.strides) x = std::max<int64_t>(x, 0);
      if (huge && d == &g) bounded.dims[0] = 1;
      end = std::max(end, max_byte(bounded));
    }
    arena.size = align8(end) + kGuardBytes;
    arena.words.assign(static_cast<size_t>(arena.size / 8), 0);
    std::memset(arena.bytes(), kSentinel, static_cast<size_t>(arena.size));
  }

  // Data: grad elements from the input's raw bits (NaN, inf and subnormals included).
  if (!huge && is_element_dtype(g.dtype)) {
    const int64_t es = element_size(g.dtype);
    for_each_element(g, [&](const std::vector<int64_t>&, int64_t b) {
      if (b < 0 || b + es > arena.size) return;
      const uint32_t bits = in.ConsumeIntegral<uint32_t>();
      std::memcpy(arena.bytes() + b, &bits, static_cast<size_t>(es));
    });
  }
  if (c.with_probs && is_element_dtype(p.dtype)) {  // probs too: zeros, NaN and all
    const int64_t es = element_size(p.dtype);
    for_each_element(p, [&](const std::vector<int64_t>&, int64_t b) {
      if (b < 0 || b + es > arena.size) return;
      const uint32_t bits = in.ConsumeIntegral<uint32_t>();
      std::memcpy(arena.bytes() + b, &bits, static_cast<size_t>(es));
    });
  }
  {
    const std::vector<int64_t> values = pick_indices(in, num_indices, grad_rows, padded);
    const int64_t es = element_size(s.dtype);
    for_each_element(s, [&](const std::vector<int64_t>& idx, int64_t b) {
      if (b < 0 || b + es > arena.size || idx[0] >= static_cast<int64_t>(values.size())) return;
      if (es == 8) {
        std::memcpy(arena.bytes() + b, &values[idx[0]], 8);
      } else {
        const auto v32 = static_cast<int32_t>(values[idx[0]]);
        std::memcpy(arena.bytes() + b, &v32, 4);
      }
    });
  }

  const std::vector<uint8_t> before(arena.bytes(), arena.bytes() + arena.size);
  const auto make = [&](const Desc& d) -> acl::Tensor* {
    if (d.null_tensor) return nullptr;
    void* data = d.null_data ? nullptr : arena.bytes() + d.position;
    return acl::CreateTensor(d.dims.data(), d.dims.size(), d.dtype,
                             d.explicit_strides ? d.strides.data() : nullptr, d.offset, data);
  };
  acl::Tensor* grad_t = make(g);
  acl::Tensor* index_t = make(s);
  acl::Tensor* out_t = make(o);
  acl::Tensor* probs_t = c.with_probs ? make(p) : nullptr;
  // restore_shape: mostly absent or out's shape, rarely another one.
  std::vector<int64_t> restore = o.dims;
  const uint8_t restore_choice = in.ConsumeIntegralInRange<uint8_t>(0, 7);
  if (restore_choice == 7 && !restore.empty()) restore.back() += 1;
  acl::IntArray* restore_a =
      restore_choice >= 4 ? acl::CreateIntArray(restore.data(), restore.size()) : nullptr;
  c.topk = topk;
  c.padded = padded;

  uint64_t workspace_size = 0;
  acl::Executor* executor = reinterpret_cast<acl::Executor*>(&workspace_size);  // must be reset
  acl::aclnnStatus phase1 = acl::kSuccess;
  switch (c.op) {
    case Op::kPermuteGrad:
      phase1 = acl::MoeTokenPermuteGradGetWorkspaceSize(grad_t, index_t, topk, padded, out_t,
                                                        &workspace_size, &executor);
      break;
    case Op::kInitRoutingV2Grad:
      phase1 = acl::MoeInitRoutingV2GradGetWorkspaceSize(
          grad_t, index_t, topk, c.drop_pad_mode, c.active_num, out_t, &workspace_size, &executor);
      break;
    case Op::kUnpermute:
      phase1 = acl::MoeTokenUnpermuteGetWorkspaceSize(grad_t, index_t, probs_t, padded, restore_a,
                                                      out_t, &workspace_size, &executor);
      break;
  }
  const auto phase_two = [&c](void* workspace, uint64_t bytes, acl::Executor* e) {
    switch (c.op) {
      case Op::kPermuteGrad: return acl::MoeTokenPermuteGrad(workspace, bytes, e);
      case Op::kInitRoutingV2Grad: return acl::MoeInitRoutingV2Grad(workspace, bytes, e);
      case Op::kUnpermute: break;
    }
    return acl::MoeTokenUnpermute(workspace, bytes, e);
  };
  acl::DestroyTensor(grad_t);
  acl::DestroyTensor(index_t);
  acl::DestroyTensor(out_t);
  acl::DestroyTensor(probs_t);
  acl::DestroyIntArray(restore_a);
  FUZZ_CHECK(phase1 == acl::kSuccess || phase1 == acl::kErrParamNullptr ||
             phase1 == acl::kErrParamInvalid);
  if (phase1 != acl::kSuccess) {
    FUZZ_CHECK(executor == nullptr);
    FUZZ_CHECK(std::strlen(acl::GetLastErrorMessage()) > 0);
    FUZZ_CHECK(std::memcmp(before.data(), arena.bytes(), before.size()) == 0);
    return;
  }
  FUZZ_CHECK(executor != nullptr);
  FUZZ_CHECK(std::strlen(acl::GetLastErrorMessage()) == 0);

  // Which arena bytes belong to out's elements and to the inputs'. Phase one accepted, so no
  // byte may be both.
  constexpr uint8_t kInput = 1;
  constexpr uint8_t kOut = 2;
  std::vector<uint8_t> owner(static_cast<size_t>(arena.size), 0);
  for (const Desc* d : descs) {
    const int64_t des = element_size(d->dtype);
    for_each_element(*d, [&](const std::vector<int64_t>&, int64_t b) {
      FUZZ_CHECK(b >= 0 && b + des <= arena.size);
      for (int64_t i = 0; i < des; ++i) owner[b + i] |= d == &o ? kOut : kInput;
    });
  }
  for (uint8_t x : owner) FUZZ_CHECK(x != (kInput | kOut));

  // Workspace: as asked; rarely too small (always when too big to allocate here); rarely inside
  // the arena, where it must be refused if it shares a byte with out or an input.
  const bool short_workspace = workspace_size > (uint64_t{1} << 20) ||
                               (workspace_size > 0 && in.ConsumeIntegralInRange(0, 15) == 0);
  const bool arena_workspace = !short_workspace && workspace_size > 0 &&
                               workspace_size <= static_cast<uint64_t>(arena.size) &&
                               in.ConsumeIntegralInRange(0, 7) == 0;
  std::vector<uint8_t> workspace(short_workspace ? 0 : workspace_size + 1, kSentinel);
  uint8_t* workspace_data = workspace.empty() ? nullptr : workspace.data();
  int64_t ws_begin = 0;
  int64_t ws_end = 0;  // arena bytes the workspace covers
  bool ws_overlaps = false;
  if (arena_workspace) {
    ws_begin =
        in.ConsumeIntegralInRange<int64_t>(0, arena.size - static_cast<int64_t>(workspace_size));
    ws_end = ws_begin + static_cast<int64_t>(workspace_size);
    workspace_data = arena.bytes() + ws_begin;
    for (int64_t i = ws_begin; i < ws_end; ++i) ws_overlaps = ws_overlaps || owner[i] != 0;
  }
  const acl::aclnnStatus phase2 =
      phase_two(workspace_data, short_workspace ? 0 : workspace_size, executor);
  const std::string phase2_message = acl::GetLastErrorMessage();
  FUZZ_CHECK(phase2 == acl::kSuccess || phase2 == acl::kErrParamInvalid);
  FUZZ_CHECK(!short_workspace || phase2 == acl::kErrParamInvalid);
  FUZZ_CHECK(!ws_overlaps || phase2 == acl::kErrParamInvalid);
  FUZZ_CHECK(phase_two(nullptr, 0, executor) == acl::kErrParamInvalid);
  if (!arena_workspace && !workspace.empty()) FUZZ_CHECK(workspace.back() == kSentinel);

  // Only out's elements (on success) and a workspace of the arena's own free bytes may change.
  for (int64_t i = 0; i < arena.size; ++i) {
    const bool out_byte = phase2 == acl::kSuccess && (owner[i] & kOut) != 0;
    const bool scratch_byte = !ws_overlaps && i >= ws_begin && i < ws_end;
    if (!out_byte && !scratch_byte) FUZZ_CHECK(arena.bytes()[i] == before[i]);
  }
  if (short_workspace || ws_overlaps) return;  // refused before the index checks
  mpg::DType dtype{};
  FUZZ_CHECK(acl::to_dtype(g.dtype, &dtype) && mpg::is_arithmetic(dtype));  // phase one accepted it
  mpg::detail::visit_dtype(mpg::ElementTypeList{}, dtype, [&](auto t) {
    dispatch_index<typename decltype(t)::type>(c, g, s, o, before.data(), arena.bytes(), phase2,
                                               phase2_message);
  });
}

// ---- MoeTokenPermute ---------------------------------------------------------------------------
// Inputs whose first byte is 'P' drive MoeTokenPermute with the rest: tokens [N, H] and expert
// ids [N, K] (or [N]) as inputs, permute_tokens_out [n, H] and sorted_indices_out [N*K] as
// outputs, each placed in the arena and sometimes laid over another. Same invariants: on error
// no arena byte changes; on success only the outputs' elements change, they equal
// mpg::token_permute on Path::kReference (bytes), and no output byte is another operand's.

acl::DataType pick_token_dtype(FuzzedDataProvider& in) {
  static constexpr acl::DataType kTokens[] = {acl::DataType::kFloat, acl::DataType::kFloat16,
                                              acl::DataType::kBFloat16, acl::DataType::kInt8};
  const uint8_t choice = in.ConsumeIntegralInRange<uint8_t>(0, 15);
  if (choice < 12) return kTokens[choice % 4];
  static constexpr int32_t kOthers[] = {0, 1, 2, 3, 9, 27, -1, 1000};
  return static_cast<acl::DataType>(kOthers[in.ConsumeIntegralInRange<int>(0, 7)]);
}

// Expert ids: few experts (ties), ids spread over 24 bits (the radix sort), or the top of the
// range; sometimes a few values out of [0, 2^24 - 1).
std::vector<int64_t> pick_expert_ids(FuzzedDataProvider& in, int64_t n) {
  constexpr int64_t kLimit = (int64_t{1} << 24) - 1;
  const uint8_t kind = in.ConsumeIntegralInRange<uint8_t>(0, 3);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& e : v) {
    switch (kind) {
      case 0: e = in.ConsumeIntegralInRange<int64_t>(0, 3); break;
      case 1: e = in.ConsumeIntegralInRange<int64_t>(0, 40); break;
      case 2: e = in.ConsumeIntegralInRange<int64_t>(0, 7) * 2396745; break;
      default: e = kLimit - 1 - in.ConsumeIntegralInRange<int64_t>(0, 3); break;
    }
  }
  const int corruptions = in.ConsumeIntegralInRange(0, 7) < 6 ? 0 : in.ConsumeIntegralInRange(1, 3);
  for (int c = 0; c < corruptions && n > 0; ++c) {
    static constexpr int64_t kSpecial[] = {-1,
                                           kLimit,
                                           kLimit + 1,
                                           int64_t{1} << 31,
                                           -(int64_t{1} << 31),
                                           std::numeric_limits<int64_t>::min()};
    v[in.ConsumeIntegralInRange<int64_t>(0, n - 1)] = kSpecial[in.ConsumeIntegralInRange(0, 5)];
  }
  return v;
}

// The expected outputs from a snapshot of the arena: tokens and ids gathered into contiguous
// copies, then mpg::token_permute on Path::kReference.
template <class E>
void check_token_permute(const Desc& tok, const Desc& ids, const Desc& out, const Desc& sorted,
                         int64_t num_out_tokens, const uint8_t* before, const uint8_t* after,
                         acl::aclnnStatus phase2, const std::string& phase2_message) {
  const int64_t es = element_size(tok.dtype);
  const int64_t n = tok.dims[0];
  const int64_t hidden = tok.dims[1];
  const int64_t topk = ids.dims.size() == 2 ? ids.dims[1] : 1;
  std::vector<uint8_t> tokens(static_cast<size_t>(std::max<int64_t>(n * hidden * es, 1)));
  for_each_element(tok, [&](const std::vector<int64_t>& idx, int64_t b) {
    std::memcpy(&tokens[(idx[0] * hidden + idx[1]) * es], before + b, static_cast<size_t>(es));
  });
  std::vector<E> expert_ids(static_cast<size_t>(std::max<int64_t>(n * topk, 1)));
  for_each_element(ids, [&](const std::vector<int64_t>& idx, int64_t b) {
    const int64_t i = idx.size() == 2 ? idx[0] * topk + idx[1] : idx[0];
    std::memcpy(&expert_ids[i], before + b, sizeof(E));
  });
  const int64_t rows = out.dims[0];
  std::vector<uint8_t> expected(static_cast<size_t>(std::max<int64_t>(rows * hidden * es, 1)));
  std::vector<int32_t> expected_sorted(static_cast<size_t>(std::max<int64_t>(n * topk, 1)));
  mpg::Options options;
  options.path = mpg::Path::kReference;
  // The op copies bytes: any token type of the same size gives the same bytes.
  const auto reference = [&](auto* typed_tokens, auto* typed_out) {
    return mpg::token_permute(mpg::MatrixView(typed_tokens, n, hidden),
                              mpg::IndexView(expert_ids.data(), n * topk), topk, num_out_tokens,
                              mpg::MatrixView(typed_out, rows, hidden),
                              {expected_sorted.data(), n * topk}, options);
  };
  mpg::Status ref;
  switch (es) {
    case 4:
      ref = reference(reinterpret_cast<const float*>(tokens.data()),
                      reinterpret_cast<float*>(expected.data()));
      break;
    case 2:
      ref = reference(reinterpret_cast<const mpg::half*>(tokens.data()),
                      reinterpret_cast<mpg::half*>(expected.data()));
      break;
    default:
      ref = reference(reinterpret_cast<const int8_t*>(tokens.data()),
                      reinterpret_cast<int8_t*>(expected.data()));
      break;
  }
  FUZZ_CHECK(ref.ok() == (phase2 == acl::kSuccess));
  if (!ref.ok()) {
    FUZZ_CHECK(mpg::to_aclnn_status(ref.code()) == phase2);
    FUZZ_CHECK(ref.message() == phase2_message);
    return;
  }
  for_each_element(out, [&](const std::vector<int64_t>& idx, int64_t b) {
    FUZZ_CHECK(std::memcmp(after + b, &expected[(idx[0] * hidden + idx[1]) * es],
                           static_cast<size_t>(es)) == 0);
  });
  for_each_element(sorted, [&](const std::vector<int64_t>& idx, int64_t b) {
    FUZZ_CHECK(std::memcmp(after + b, &expected_sorted[idx[0]], 4) == 0);
  });
}

void run_token_permute(FuzzedDataProvider& in) {
  const bool padded = in.ConsumeIntegralInRange(0, 15) == 0;
  const int64_t tokens = in.ConsumeIntegralInRange<int64_t>(0, 6);
  const int64_t topk =
      in.ConsumeIntegralInRange<int64_t>(in.ConsumeIntegralInRange(0, 15) == 0 ? 0 : 1, 4);
  const int64_t hidden = in.ConsumeIntegralInRange<int64_t>(0, 40);
  const int64_t copies = tokens * topk;
  int64_t num_out_tokens = in.ConsumeIntegralInRange<int64_t>(-copies - 2, copies + 2);
  if (in.ConsumeIntegralInRange(0, 15) == 0) {
    num_out_tokens = in.ConsumeBool() ? std::numeric_limits<int64_t>::min()
                                      : std::numeric_limits<int64_t>::max();
  }
  const int64_t rows = mpg::token_permute_rows(num_out_tokens, copies);

  Desc tok, ids, out, sorted;
  tok.dtype = pick_token_dtype(in);
  out.dtype = in.ConsumeIntegralInRange(0, 15) == 0 ? pick_token_dtype(in) : tok.dtype;
  ids.dtype = pick_dtype(in, true);
  sorted.dtype =
      in.ConsumeIntegralInRange(0, 15) == 0 ? pick_dtype(in, true) : acl::DataType::kInt32;
  tok.dims = {tokens, hidden};
  ids.dims = topk == 1 && in.ConsumeBool() ? std::vector<int64_t>{tokens}
                                           : std::vector<int64_t>{tokens, topk};
  out.dims = {rows, hidden};
  sorted.dims = {copies};
  switch (in.ConsumeIntegralInRange(0, 31)) {  // rare shape misuse
    case 0: out.dims[0] += 1; break;
    case 1: out.dims[1] += 1; break;
    case 2: sorted.dims[0] += 1; break;
    case 3: tok.dims[0] += 1; break;
    case 4: ids.dims.push_back(1); break;
    case 5: sorted.dims.push_back(1); break;
    case 6: tok.dims = {tokens * std::max<int64_t>(hidden, 1)}; break;
    default: break;
  }
  pick_strides(in, &tok);
  pick_strides(in, &out);
  pick_strides(in, &ids);
  sorted.strides.assign(sorted.dims.size(), 1);
  if (sorted.dims.size() == 2) sorted.strides[0] = sorted.dims[1];
  for (Desc* d : {&tok, &ids, &out, &sorted}) {
    d->offset = in.ConsumeIntegralInRange<int64_t>(0, 3);
    d->null_data = in.ConsumeIntegralInRange(0, 31) == 0;
    d->null_tensor = in.ConsumeIntegralInRange(0, 63) == 0;
  }

  // Placement: in order, each after the last; then sometimes an output laid over another operand.
  const auto align8 = [](int64_t x) { return (x + 7) / 8 * 8; };
  const auto bounded = [](const Desc& d) {  // a negative stride never passes phase one
    Desc b = d;
    for (int64_t& x : b.strides) x = std::max<int64_t>(x, 0);
    return b;
  };
  tok.position = kGuardBytes;
  ids.position = align8(max_byte(bounded(tok)) + in.ConsumeIntegralInRange<int64_t>(0, 2) * 8);
  out.position = align8(max_byte(bounded(ids)) + in.ConsumeIntegralInRange<int64_t>(0, 2) * 8);
  sorted.position = align8(max_byte(bounded(out)) + in.ConsumeIntegralInRange<int64_t>(0, 2) * 8);
  switch (in.ConsumeIntegralInRange<uint8_t>(0, 9)) {
    case 1: out.position = tok.position + in.ConsumeIntegralInRange<int64_t>(0, 8) * 8; break;
    case 2: out.position = ids.position + in.ConsumeIntegralInRange<int64_t>(0, 3) * 8; break;
    case 3: sorted.position = tok.position + in.ConsumeIntegralInRange<int64_t>(0, 8) * 8; break;
    case 4: sorted.position = ids.position + in.ConsumeIntegralInRange<int64_t>(0, 3) * 8; break;
    case 5: sorted.position = out.position + in.ConsumeIntegralInRange<int64_t>(0, 8) * 8; break;
    default: break;
  }
  Arena arena;
  {
    int64_t end = 0;
    for (const Desc* d : {&tok, &ids, &out, &sorted}) end = std::max(end, max_byte(bounded(*d)));
    arena.size = align8(end) + kGuardBytes;
    arena.words.assign(static_cast<size_t>(arena.size / 8), 0);
    std::memset(arena.bytes(), kSentinel, static_cast<size_t>(arena.size));
  }
  {  // Token bytes from the input (any bit pattern), then the expert ids.
    const int64_t es = element_size(tok.dtype);
    for_each_element(tok, [&](const std::vector<int64_t>&, int64_t b) {
      if (b < 0 || b + es > arena.size) return;
      const uint32_t bits = in.ConsumeIntegral<uint32_t>();
      std::memcpy(arena.bytes() + b, &bits, static_cast<size_t>(std::min<int64_t>(es, 4)));
    });
    const std::vector<int64_t> values = pick_expert_ids(in, copies);
    const int64_t ies = element_size(ids.dtype);
    for_each_element(ids, [&](const std::vector<int64_t>& idx, int64_t b) {
      const int64_t i = idx.size() == 2 ? idx[0] * topk + idx[1] : idx[0];
      if (b < 0 || b + ies > arena.size || i >= static_cast<int64_t>(values.size())) return;
      if (ies == 8) {
        std::memcpy(arena.bytes() + b, &values[i], 8);
      } else if (ies == 4) {
        const auto v32 = static_cast<int32_t>(values[i]);
        std::memcpy(arena.bytes() + b, &v32, 4);
      }
    });
  }

  const std::vector<uint8_t> before(arena.bytes(), arena.bytes() + arena.size);
  const auto make = [&](const Desc& d) -> acl::Tensor* {
    if (d.null_tensor) return nullptr;
    void* data = d.null_data ? nullptr : arena.bytes() + d.position;
    return acl::CreateTensor(d.dims.data(), d.dims.size(), d.dtype,
                             d.explicit_strides ? d.strides.data() : nullptr, d.offset, data);
  };
  acl::Tensor* tok_t = make(tok);
  acl::Tensor* ids_t = make(ids);
  acl::Tensor* out_t = make(out);
  acl::Tensor* sorted_t = make(sorted);
  uint64_t workspace_size = 0;
  acl::Executor* executor = reinterpret_cast<acl::Executor*>(&workspace_size);  // must be reset
  const acl::aclnnStatus phase1 = acl::MoeTokenPermuteGetWorkspaceSize(
      tok_t, ids_t, num_out_tokens, padded, out_t, sorted_t, &workspace_size, &executor);
  for (acl::Tensor* t : {tok_t, ids_t, out_t, sorted_t}) acl::DestroyTensor(t);
  FUZZ_CHECK(phase1 == acl::kSuccess || phase1 == acl::kErrParamNullptr ||
             phase1 == acl::kErrParamInvalid);
  if (phase1 != acl::kSuccess) {
    FUZZ_CHECK(executor == nullptr);
    FUZZ_CHECK(std::strlen(acl::GetLastErrorMessage()) > 0);
    FUZZ_CHECK(std::memcmp(before.data(), arena.bytes(), before.size()) == 0);
    return;
  }
  FUZZ_CHECK(!padded);
  FUZZ_CHECK(executor != nullptr);

  // Phase one accepted: no output byte is also another operand's byte.
  constexpr uint8_t kInput = 1;
  constexpr uint8_t kOut = 2;
  constexpr uint8_t kSorted = 4;
  std::vector<uint8_t> owner(static_cast<size_t>(arena.size), 0);
  for (const Desc* d : {&tok, &ids, &out, &sorted}) {
    const int64_t des = element_size(d->dtype);
    const uint8_t role = d == &out ? kOut : d == &sorted ? kSorted : kInput;
    for_each_element(*d, [&](const std::vector<int64_t>&, int64_t b) {
      FUZZ_CHECK(b >= 0 && b + des <= arena.size);
      for (int64_t i = 0; i < des; ++i) {
        // Inputs come first and may share bytes; an output byte belongs to nothing else.
        if (role != kInput) FUZZ_CHECK(owner[b + i] == 0);
        owner[b + i] |= role;
      }
    });
  }

  const bool short_workspace = workspace_size > (uint64_t{1} << 20) ||
                               (workspace_size > 0 && in.ConsumeIntegralInRange(0, 15) == 0);
  const bool arena_workspace = !short_workspace && workspace_size > 0 &&
                               workspace_size <= static_cast<uint64_t>(arena.size) &&
                               in.ConsumeIntegralInRange(0, 7) == 0;
  std::vector<uint8_t> workspace(short_workspace ? 0 : workspace_size + 1, kSentinel);
  uint8_t* workspace_data = workspace.empty() ? nullptr : workspace.data();
  int64_t ws_begin = 0;
  int64_t ws_end = 0;
  bool ws_overlaps = false;
  if (arena_workspace) {
    ws_begin =
        in.ConsumeIntegralInRange<int64_t>(0, arena.size - static_cast<int64_t>(workspace_size));
    ws_end = ws_begin + static_cast<int64_t>(workspace_size);
    workspace_data = arena.bytes() + ws_begin;
    for (int64_t i = ws_begin; i < ws_end; ++i) ws_overlaps = ws_overlaps || owner[i] != 0;
  }
  const acl::aclnnStatus phase2 =
      acl::MoeTokenPermute(workspace_data, short_workspace ? 0 : workspace_size, executor);
  const std::string phase2_message = acl::GetLastErrorMessage();
  FUZZ_CHECK(phase2 == acl::kSuccess || phase2 == acl::kErrParamInvalid);
  FUZZ_CHECK(!short_workspace || phase2 == acl::kErrParamInvalid);
  FUZZ_CHECK(!ws_overlaps || phase2 == acl::kErrParamInvalid);
  FUZZ_CHECK(acl::MoeTokenPermute(nullptr, 0, executor) == acl::kErrParamInvalid);
  if (!arena_workspace && !workspace.empty()) FUZZ_CHECK(workspace.back() == kSentinel);
  for (int64_t i = 0; i < arena.size; ++i) {
    const bool out_byte = phase2 == acl::kSuccess && (owner[i] & (kOut | kSorted)) != 0;
    const bool scratch_byte = !ws_overlaps && i >= ws_begin && i < ws_end;
    if (!out_byte && !scratch_byte) FUZZ_CHECK(arena.bytes()[i] == before[i]);
  }
  if (short_workspace || ws_overlaps) return;
  if (ids.dtype == acl::DataType::kInt64) {
    check_token_permute<int64_t>(tok, ids, out, sorted, num_out_tokens, before.data(),
                                 arena.bytes(), phase2, phase2_message);
  } else {
    check_token_permute<int32_t>(tok, ids, out, sorted, num_out_tokens, before.data(),
                                 arena.bytes(), phase2, phase2_message);
  }
}

// ---- MoeTokenUnpermuteGrad ('G'-prefixed inputs) -------------------------------------------
// X [R, H], g [N, H], S [N*K], P [N, K] (or none, K = 1), outputs dX [N*K, H] and dP [N, K] in
// one arena; either output may be laid over any input or over the other output. Invariants as
// above: on an error no arena byte changes; on success only the outputs' elements change, they
// equal mpg::unpermute_grad on Path::kReference, and no output byte is another operand's.

// Contiguous copy of a 2-D tensor's elements from a snapshot of the arena.
std::vector<uint8_t> gather_matrix(const Desc& d, const uint8_t* before) {
  const int64_t es = element_size(d.dtype);
  const int64_t cols = d.dims.size() == 2 ? d.dims[1] : 1;
  std::vector<uint8_t> v(static_cast<size_t>(std::max<int64_t>(num_elements(d) * es, 8)));
  for_each_element(d, [&](const std::vector<int64_t>& idx, int64_t b) {
    const int64_t i = idx.size() == 2 ? idx[0] * cols + idx[1] : idx[0];
    std::memcpy(&v[i * es], before + b, static_cast<size_t>(es));
  });
  return v;
}

template <class T, class I, class P>
void check_unpermute_grad(const Desc& x, const Desc& g, const Desc& s, const Desc* p,
                          const Desc& dx, const Desc* dp, const uint8_t* before,
                          const uint8_t* after, acl::aclnnStatus phase2,
                          const std::string& phase2_message) {
  const int64_t hidden = g.dims[1];
  const std::vector<uint8_t> tokens = gather_matrix(x, before);
  const std::vector<uint8_t> grad = gather_matrix(g, before);
  const std::vector<uint8_t> index_bytes = gather_matrix(s, before);
  const int64_t n = s.dims[0];
  std::vector<T> want_dx(static_cast<size_t>(std::max<int64_t>(n * hidden, 1)));
  mpg::Options options;
  options.path = mpg::Path::kReference;
  const mpg::ConstMatrixView<T> xv(reinterpret_cast<const T*>(tokens.data()), x.dims[0], hidden);
  const mpg::ConstMatrixView<T> gv(reinterpret_cast<const T*>(grad.data()), g.dims[0], hidden);
  const mpg::IndexView<I> sv(reinterpret_cast<const I*>(index_bytes.data()), n);
  const mpg::MatrixView<T> dxv(want_dx.data(), n, hidden);
  std::vector<P> want_dp;
  mpg::Status ref;
  if (p != nullptr) {
    const std::vector<uint8_t> probs = gather_matrix(*p, before);
    want_dp.resize(static_cast<size_t>(std::max<int64_t>(num_elements(*p), 1)));
    ref = mpg::unpermute_grad(
        xv, gv, sv,
        mpg::MatrixView(reinterpret_cast<const P*>(probs.data()), p->dims[0], p->dims[1]), dxv,
        mpg::MatrixView(want_dp.data(), p->dims[0], p->dims[1]), options);
  } else {
    ref = mpg::unpermute_grad(xv, gv, sv, dxv, options);
  }
  FUZZ_CHECK(ref.ok() == (phase2 == acl::kSuccess));
  if (!ref.ok()) {
    FUZZ_CHECK(mpg::to_aclnn_status(ref.code()) == phase2);
    FUZZ_CHECK(ref.message() == phase2_message);
    return;
  }
  for_each_element(dx, [&](const std::vector<int64_t>& idx, int64_t b) {
    T got;
    std::memcpy(&got, after + b, sizeof(T));
    FUZZ_CHECK(same_bits_or_both_nan(got, want_dx[idx[0] * hidden + idx[1]]));
  });
  if (dp == nullptr) return;
  for_each_element(*dp, [&](const std::vector<int64_t>& idx, int64_t b) {
    P got;
    std::memcpy(&got, after + b, sizeof(P));
    FUZZ_CHECK(same_bits_or_both_nan(got, want_dp[idx[0] * dp->dims[1] + idx[1]]));
  });
}

void run_unpermute_grad(FuzzedDataProvider& in) {
  const bool padded = in.ConsumeIntegralInRange(0, 15) == 0;
  const bool with_probs = in.ConsumeIntegralInRange(0, 3) != 0;
  // Rarely the other output's presence does not match probs' (both are errors).
  const bool with_dp = in.ConsumeIntegralInRange(0, 31) == 0 ? !with_probs : with_probs;
  const int64_t tokens = in.ConsumeIntegralInRange<int64_t>(0, 5);
  const int64_t topk = with_probs ? in.ConsumeIntegralInRange<int64_t>(
                                        in.ConsumeIntegralInRange(0, 15) == 0 ? 0 : 1, 3)
                                  : 1;
  // Mostly short rows; sometimes past 64 (the tree's first fold) or 512 (the next shape).
  const uint8_t length = in.ConsumeIntegralInRange<uint8_t>(0, 7);
  const int64_t hidden =
      in.ConsumeIntegralInRange<int64_t>(0, length == 0 ? 600 : (length == 1 ? 140 : 40));
  const int64_t copies = tokens * topk;
  const int64_t rows = in.ConsumeIntegralInRange<int64_t>(0, copies);

  Desc x, g, s, p, dx, dp;
  x.dtype = pick_dtype(in, false);
  g.dtype = in.ConsumeIntegralInRange(0, 15) == 0 ? pick_dtype(in, false) : x.dtype;
  dx.dtype = in.ConsumeIntegralInRange(0, 15) == 0 ? pick_dtype(in, false) : x.dtype;
  s.dtype = pick_dtype(in, true);
  p.dtype = pick_dtype(in, false);
  dp.dtype = in.ConsumeIntegralInRange(0, 15) == 0 ? pick_dtype(in, false) : p.dtype;
  x.dims = {rows, hidden};
  g.dims = {with_probs ? tokens : copies, hidden};
  s.dims = {copies};
  p.dims = {tokens, topk};
  dx.dims = {copies, hidden};
  dp.dims = {tokens, topk};
  switch (in.ConsumeIntegralInRange(0, 31)) {  // rare shape misuse
    case 0: dx.dims[0] += 1; break;
    case 1: dx.dims[1] += 1; break;
    case 2: dp.dims[1] += 1; break;
    case 3: x.dims[0] = copies + 1; break;
    case 4: g.dims[0] += 1; break;
    case 5: p.dims = {copies}; break;
    case 6: s.dims.push_back(1); break;
    default: break;
  }
  for (Desc* d : {&x, &g, &p, &dx, &dp}) pick_strides(in, d);
  s.strides.assign(s.dims.size(), 1);
  if (s.dims.size() == 2) s.strides[0] = s.dims[1];
  for (Desc* d : {&x, &g, &s, &p, &dx, &dp}) {
    d->offset = in.ConsumeIntegralInRange<int64_t>(0, 3);
    d->null_data = in.ConsumeIntegralInRange(0, 31) == 0;
    d->null_tensor = in.ConsumeIntegralInRange(0, 63) == 0;
  }
  std::vector<int64_t> restore = {g.dims[0], hidden};
  const uint8_t restore_kind = in.ConsumeIntegralInRange<uint8_t>(0, 7);
  if (restore_kind == 1) restore[1] += 1;
  if (restore_kind == 2) restore.pop_back();

  // Placement: in order, each after the last; then sometimes an output laid over another
  // operand, the other output included.
  const auto align8 = [](int64_t v) { return (v + 7) / 8 * 8; };
  const auto bounded = [](const Desc& d) {  // a negative stride never passes phase one
    Desc b = d;
    for (int64_t& v : b.strides) v = std::max<int64_t>(v, 0);
    return b;
  };
  Desc* order[] = {&x, &g, &s, &p, &dx, &dp};
  int64_t next = kGuardBytes;
  for (Desc* d : order) {
    d->position = next;
    next = align8(max_byte(bounded(*d)) + in.ConsumeIntegralInRange<int64_t>(0, 2) * 8);
  }
  const auto over = [&](Desc* out) {
    Desc* target = order[in.ConsumeIntegralInRange(0, 5)];
    if (target != out) out->position = target->position + in.ConsumeIntegralInRange(0, 8) * 8;
  };
  switch (in.ConsumeIntegralInRange<uint8_t>(0, 5)) {
    case 1: over(&dx); break;
    case 2: over(&dp); break;
    default: break;
  }
  Arena arena;
  {
    int64_t end = 0;
    for (const Desc* d : order) end = std::max(end, max_byte(bounded(*d)));
    arena.size = align8(end) + kGuardBytes;
    arena.words.assign(static_cast<size_t>(arena.size / 8), 0);
    std::memset(arena.bytes(), kSentinel, static_cast<size_t>(arena.size));
  }
  // Data: any bits for X, g and P (mostly small values for P), then the index values.
  for (const Desc* d : {&x, &g, &p}) {
    const int64_t es = element_size(d->dtype);
    for_each_element(*d, [&](const std::vector<int64_t>&, int64_t b) {
      if (b < 0 || b + es > arena.size) return;
      const uint32_t bits = in.ConsumeIntegral<uint32_t>();
      std::memcpy(arena.bytes() + b, &bits, static_cast<size_t>(std::min<int64_t>(es, 4)));
    });
  }
  {
    const std::vector<int64_t> values = pick_indices(in, copies, rows, false);
    const int64_t ies = element_size(s.dtype);
    for_each_element(s, [&](const std::vector<int64_t>& idx, int64_t b) {
      if (b < 0 || b + ies > arena.size || idx[0] >= static_cast<int64_t>(values.size())) return;
      if (ies == 8) {
        std::memcpy(arena.bytes() + b, &values[idx[0]], 8);
      } else if (ies == 4) {
        const auto v32 = static_cast<int32_t>(values[idx[0]]);
        std::memcpy(arena.bytes() + b, &v32, 4);
      }
    });
  }

  const std::vector<uint8_t> before(arena.bytes(), arena.bytes() + arena.size);
  const auto make = [&](const Desc& d) -> acl::Tensor* {
    if (d.null_tensor) return nullptr;
    void* data = d.null_data ? nullptr : arena.bytes() + d.position;
    return acl::CreateTensor(d.dims.data(), d.dims.size(), d.dtype,
                             d.explicit_strides ? d.strides.data() : nullptr, d.offset, data);
  };
  acl::Tensor* x_t = make(x);
  acl::Tensor* g_t = make(g);
  acl::Tensor* s_t = make(s);
  acl::Tensor* p_t = with_probs ? make(p) : nullptr;
  acl::Tensor* dx_t = make(dx);
  acl::Tensor* dp_t = with_dp ? make(dp) : nullptr;
  acl::IntArray* restore_a =
      restore_kind < 4 ? acl::CreateIntArray(restore.data(), restore.size()) : nullptr;
  uint64_t workspace_size = 0;
  acl::Executor* executor = reinterpret_cast<acl::Executor*>(&workspace_size);  // must be reset
  const acl::aclnnStatus phase1 = acl::MoeTokenUnpermuteGradGetWorkspaceSize(
      x_t, g_t, s_t, p_t, padded, restore_a, dx_t, dp_t, &workspace_size, &executor);
  for (acl::Tensor* t : {x_t, g_t, s_t, p_t, dx_t, dp_t}) acl::DestroyTensor(t);
  acl::DestroyIntArray(restore_a);
  FUZZ_CHECK(phase1 == acl::kSuccess || phase1 == acl::kErrParamNullptr ||
             phase1 == acl::kErrParamInvalid);
  if (phase1 != acl::kSuccess) {
    FUZZ_CHECK(executor == nullptr);
    FUZZ_CHECK(std::strlen(acl::GetLastErrorMessage()) > 0);
    FUZZ_CHECK(std::memcmp(before.data(), arena.bytes(), before.size()) == 0);
    return;
  }
  FUZZ_CHECK(!padded);
  FUZZ_CHECK(executor != nullptr);
  // What phase one accepted: the described tensors (a missing one would have been refused).
  const bool has_probs = p_t != nullptr;
  FUZZ_CHECK(has_probs == (dp_t != nullptr));

  // Phase one accepted: no output byte is also another operand's byte.
  constexpr uint8_t kInput = 1;
  constexpr uint8_t kDx = 2;
  constexpr uint8_t kDp = 4;
  std::vector<uint8_t> owner(static_cast<size_t>(arena.size), 0);
  std::vector<const Desc*> operands = {&x, &g, &s, &dx};
  if (has_probs) {
    operands.push_back(&p);
    operands.push_back(&dp);
  }
  std::stable_partition(operands.begin(), operands.end(),
                        [&](const Desc* d) { return d != &dx && d != &dp; });  // inputs first
  for (const Desc* d : operands) {
    const int64_t des = element_size(d->dtype);
    const uint8_t role = d == &dx ? kDx : d == &dp ? kDp : kInput;
    for_each_element(*d, [&](const std::vector<int64_t>&, int64_t b) {
      FUZZ_CHECK(b >= 0 && b + des <= arena.size);
      for (int64_t i = 0; i < des; ++i) {
        if (role != kInput) FUZZ_CHECK(owner[b + i] == 0);
        owner[b + i] |= role;
      }
    });
  }

  const bool short_workspace = workspace_size > (uint64_t{1} << 20) ||
                               (workspace_size > 0 && in.ConsumeIntegralInRange(0, 15) == 0);
  const bool arena_workspace = !short_workspace && workspace_size > 0 &&
                               workspace_size <= static_cast<uint64_t>(arena.size) &&
                               in.ConsumeIntegralInRange(0, 7) == 0;
  std::vector<uint8_t> workspace(short_workspace ? 0 : workspace_size + 1, kSentinel);
  uint8_t* workspace_data = workspace.empty() ? nullptr : workspace.data();
  int64_t ws_begin = 0;
  int64_t ws_end = 0;
  bool ws_overlaps = false;
  if (arena_workspace) {
    ws_begin =
        in.ConsumeIntegralInRange<int64_t>(0, arena.size - static_cast<int64_t>(workspace_size));
    ws_end = ws_begin + static_cast<int64_t>(workspace_size);
    workspace_data = arena.bytes() + ws_begin;
    for (int64_t i = ws_begin; i < ws_end; ++i) ws_overlaps = ws_overlaps || owner[i] != 0;
  }
  const acl::aclnnStatus phase2 =
      acl::MoeTokenUnpermuteGrad(workspace_data, short_workspace ? 0 : workspace_size, executor);
  const std::string phase2_message = acl::GetLastErrorMessage();
  FUZZ_CHECK(phase2 == acl::kSuccess || phase2 == acl::kErrParamInvalid);
  FUZZ_CHECK(!short_workspace || phase2 == acl::kErrParamInvalid);
  FUZZ_CHECK(!ws_overlaps || phase2 == acl::kErrParamInvalid);
  FUZZ_CHECK(acl::MoeTokenUnpermuteGrad(nullptr, 0, executor) == acl::kErrParamInvalid);
  if (!arena_workspace && !workspace.empty()) FUZZ_CHECK(workspace.back() == kSentinel);
  for (int64_t i = 0; i < arena.size; ++i) {
    const bool out_byte = phase2 == acl::kSuccess && (owner[i] & (kDx | kDp)) != 0;
    const bool scratch_byte = !ws_overlaps && i >= ws_begin && i < ws_end;
    if (!out_byte && !scratch_byte) FUZZ_CHECK(arena.bytes()[i] == before[i]);
  }
  if (short_workspace || ws_overlaps) return;
  mpg::DType token_dtype{};
  mpg::DType probs_dtype = mpg::DType::kFloat32;
  FUZZ_CHECK(acl::to_dtype(x.dtype, &token_dtype));
  if (has_probs) FUZZ_CHECK(acl::to_dtype(p.dtype, &probs_dtype));
  mpg::detail::visit_dtype(mpg::ElementTypeList{}, token_dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    mpg::detail::visit_dtype(mpg::ElementTypeList{}, probs_dtype, [&](auto w) {
      using P = typename decltype(w)::type;
      const Desc* probs = has_probs ? &p : nullptr;
      const Desc* probs_grad = has_probs ? &dp : nullptr;
      if (s.dtype == acl::DataType::kInt64) {
        check_unpermute_grad<T, int64_t, P>(x, g, s, probs, dx, probs_grad, before.data(),
                                            arena.bytes(), phase2, phase2_message);
      } else {
        check_unpermute_grad<T, int32_t, P>(x, g, s, probs, dx, probs_grad, before.data(),
                                            arena.bytes(), phase2, phase2_message);
      }
    });
  });
}

}  // namespace

// The first byte picks the op: 'P' MoeTokenPermute, 'G' MoeTokenUnpermuteGrad (the rest is
// its input); anything else is MoeTokenPermuteGrad's input as a whole, so its seeds keep their
// meaning.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] == 'P') {
    FuzzedDataProvider in(data + 1, size - 1);
    run_token_permute(in);
    return 0;
  }
  if (size > 0 && data[0] == 'G') {
    FuzzedDataProvider in(data + 1, size - 1);
    run_unpermute_grad(in);
    return 0;
  }
  FuzzedDataProvider in(data, size);
  run(in);
  return 0;
}
