// Shared test helpers: guarded buffers, bit patterns, random data and realistic routings.
//
//   GuardedBuffer<T>   payload with guard bytes on both sides (optionally one element off a
//                      64-byte boundary), sentinel-filled; guards_intact(), payload_untouched()
//   GuardedMatrix<T>   rows x cols with a row stride (>= cols) inside a GuardedBuffer; view(),
//                      const_view(), at(r, c), same_bytes(), row_gaps_untouched()
//   bits_of(x), from_bits<T>(b), is_nan(x)   IEEE bit patterns of float / half / bfloat16
//   fill_random(m, rng, Values::...)          uniform, small integers, or with specials
//                                             (subnormals, +-inf, NaN, -0, +-max)
//   make_routing<I>()  sorted_indices from mpg::route_dropless / route_padded with random top-K
//                      distinct experts per token and a random R / capacity that drops some copies
//   first_difference() where two matrices first differ in bits ("" if nowhere)
//   run_permute_grad() the typed API on GuardedMatrix arguments
//   PathCase, kReferencePath, kFastPaths, kAllPaths, path_options(), path_name(),
//   path_supported(), MPG_SKIP_IF_UNSUPPORTED   the paths tests sweep
//   with_element_type(dtype, f), short_name()    run-time dtype -> C++ type; test-name pieces
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mpg/mpg.hpp"

namespace mpg_test {

using mpg::bfloat16;
using mpg::half;

// ---------------------------------------------------------------------------------------------
// Bit patterns.

inline uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
inline uint16_t bits_of(half x) {
  return Eigen::numext::bit_cast<uint16_t>(x);
}
inline uint16_t bits_of(bfloat16 x) {
  return Eigen::numext::bit_cast<uint16_t>(x);
}

template <class T>
using Bits = decltype(bits_of(T{}));

template <class T>
T from_bits(Bits<T> b) {
  return Eigen::numext::bit_cast<T>(b);
}

template <class T>
bool is_nan(T x) {
  return std::isnan(static_cast<float>(x));
}

// ---------------------------------------------------------------------------------------------
// Guarded memory (the XNNPACK Buffer<T> idea): a write outside the payload, or any write when
// none is allowed, shows up as a changed byte.

inline constexpr uint8_t kGuardByte = 0xA7;
// Every payload byte starts as this. 0x5A5A... is finite in all three dtypes, and no test
// value has this pattern, so "untouched" is unambiguous.
inline constexpr uint8_t kSentinelByte = 0x5A;

template <class T>
class GuardedBuffer {
 public:
  static constexpr size_t kGuardBytes = 64;

  // misaligned: the payload starts one element past a 64-byte boundary.
  explicit GuardedBuffer(size_t num_elements, bool misaligned = false)
      : size_(num_elements),
        misaligned_(misaligned),
        storage_size_(2 * kGuardBytes + 64 + (num_elements + 1) * sizeof(T)),
        storage_(new uint8_t[storage_size_]) {  // not value-initialized: one pass touches it
    const auto raw = reinterpret_cast<uintptr_t>(storage_.get()) + kGuardBytes;
    const uintptr_t aligned = (raw + 63) & ~uintptr_t{63};
    offset_ = aligned - reinterpret_cast<uintptr_t>(storage_.get()) + (misaligned ? sizeof(T) : 0);
    std::fill(storage_.get(), storage_.get() + offset_, kGuardByte);
    std::fill(storage_.get() + offset_ + size_bytes(), storage_.get() + storage_size_, kGuardByte);
    fill_sentinel();
  }

  // A copy has fresh guards and the payload bytes of `other`.
  GuardedBuffer(const GuardedBuffer& other) : GuardedBuffer(other.size_, other.misaligned_) {
    std::memcpy(storage_.get() + offset_, other.storage_.get() + other.offset_, size_bytes());
  }
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  GuardedBuffer(GuardedBuffer&&) noexcept = default;

  T* data() { return reinterpret_cast<T*>(storage_.get() + offset_); }
  const T* data() const { return reinterpret_cast<const T*>(storage_.get() + offset_); }
  size_t size() const { return size_; }
  size_t size_bytes() const { return size_ * sizeof(T); }

  void fill_sentinel() { std::memset(storage_.get() + offset_, kSentinelByte, size_bytes()); }

  bool guards_intact() const {
    const auto is_guard = [](uint8_t b) { return b == kGuardByte; };
    const uint8_t* begin = storage_.get();
    return std::all_of(begin, begin + offset_, is_guard) &&
           std::all_of(begin + offset_ + size_bytes(), begin + storage_size_, is_guard);
  }
  bool payload_untouched() const {
    const auto* p = reinterpret_cast<const uint8_t*>(data());
    return std::all_of(p, p + size_bytes(), [](uint8_t b) { return b == kSentinelByte; });
  }

 private:
  size_t size_;
  bool misaligned_;
  size_t storage_size_;
  std::unique_ptr<uint8_t[]> storage_;
  size_t offset_ = 0;
};

// A rows x cols matrix in guarded memory; the elements between rows (stride > cols) keep the
// sentinel unless someone writes there.
template <class T>
class GuardedMatrix {
 public:
  GuardedMatrix(int64_t rows, int64_t cols, int64_t row_stride = -1, bool misaligned = false)
      : rows_(rows),
        cols_(cols),
        stride_(row_stride < 0 ? cols : row_stride),
        buffer_(rows == 0 ? 0 : static_cast<size_t>((rows - 1) * stride_ + cols), misaligned) {}

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t row_stride() const { return stride_; }
  T* data() { return buffer_.data(); }
  const T* data() const { return buffer_.data(); }
  T& at(int64_t r, int64_t c) { return data()[r * stride_ + c]; }
  const T& at(int64_t r, int64_t c) const { return data()[r * stride_ + c]; }

  mpg::MatrixView<T> view() { return {data(), rows_, cols_, stride_}; }
  mpg::ConstMatrixView<T> const_view() const { return {data(), rows_, cols_, stride_}; }

  GuardedBuffer<T>& buffer() { return buffer_; }
  const GuardedBuffer<T>& buffer() const { return buffer_; }
  bool guards_intact() const { return buffer_.guards_intact(); }
  bool payload_untouched() const { return buffer_.payload_untouched(); }
  // Whether every byte of the payload, row gaps included, equals that of `other`.
  bool same_bytes(const GuardedMatrix& other) const {
    return buffer_.size_bytes() == other.buffer_.size_bytes() &&
           std::memcmp(data(), other.data(), buffer_.size_bytes()) == 0;
  }
  // Whether the elements between rows still hold the sentinel.
  bool row_gaps_untouched() const {
    for (int64_t r = 0; r + 1 < rows_; ++r) {
      const auto* gap = reinterpret_cast<const uint8_t*>(data() + r * stride_ + cols_);
      const size_t gap_bytes = static_cast<size_t>(stride_ - cols_) * sizeof(T);
      if (!std::all_of(gap, gap + gap_bytes, [](uint8_t b) { return b == kSentinelByte; })) {
        return false;
      }
    }
    return true;
  }

 private:
  int64_t rows_;
  int64_t cols_;
  int64_t stride_;
  GuardedBuffer<T> buffer_;
};

// "" when every element of got has the bits of want, else where and how the first differs.
template <class T>
std::string first_difference(const GuardedMatrix<T>& got, const GuardedMatrix<T>& want) {
  for (int64_t r = 0; r < want.rows(); ++r) {
    for (int64_t c = 0; c < want.cols(); ++c) {
      if (bits_of(got.at(r, c)) != bits_of(want.at(r, c))) {
        return "first difference at [" + std::to_string(r) + ", " + std::to_string(c) + "]: got " +
               std::to_string(static_cast<float>(got.at(r, c))) + " (bits " +
               std::to_string(bits_of(got.at(r, c))) + "), want " +
               std::to_string(static_cast<float>(want.at(r, c))) + " (bits " +
               std::to_string(bits_of(want.at(r, c))) + ")";
      }
    }
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Random data.

enum class Values {
  kNormal,         // uniform in [-4, 4) with 24 random bits: sums round in every dtype
  kSmallIntegers,  // integers in [-8, 8]: sums of a few are exact in every dtype
  kWithSpecials,   // kNormal with ~1/8 subnormals, +-inf, NaN, -0, +-max
};

template <class T>
T random_special(std::mt19937_64& rng) {
  using L = std::numeric_limits<T>;
  const T specials[] = {L::denorm_min(),
                        T(-static_cast<float>(L::denorm_min())),
                        T(static_cast<float>(L::min()) * 0.75f),  // subnormal in every dtype
                        T(static_cast<float>(L::min()) * -0.25f),
                        L::infinity(),
                        T(-static_cast<float>(L::infinity())),
                        L::quiet_NaN(),
                        T(-0.0f),
                        L::max(),
                        T(-static_cast<float>(L::max()))};
  return specials[std::uniform_int_distribution<size_t>(0, std::size(specials) - 1)(rng)];
}

template <class T>
T random_value(std::mt19937_64& rng, Values kind) {
  if (kind == Values::kSmallIntegers) {
    return T(static_cast<float>(std::uniform_int_distribution<int>(-8, 8)(rng)));
  }
  if (kind == Values::kWithSpecials && std::uniform_int_distribution<int>(0, 7)(rng) == 0) {
    return random_special<T>(rng);
  }
  // 24 random bits scaled by 2^-21: exact in fp32, full mantissas, and cheap (a normal
  // distribution made the fill cost more than the sweeps themselves).
  return T(static_cast<float>(static_cast<int32_t>(rng() >> 40)) * 0x1p-21f - 4.0f);
}

// Fills the rows x cols elements (not the row gaps) of m.
template <class T>
void fill_random(GuardedMatrix<T>& m, std::mt19937_64& rng, Values kind = Values::kNormal) {
  for (int64_t r = 0; r < m.rows(); ++r) {
    for (int64_t c = 0; c < m.cols(); ++c) m.at(r, c) = random_value<T>(rng, kind);
  }
}

// ---------------------------------------------------------------------------------------------
// Routings made by the library's own helpers from random top-K decisions.

template <class I>
struct Routing {
  mpg::Mode mode = mpg::Mode::kDropless;
  int64_t num_tokens = 0;
  int64_t topk = 1;
  int64_t num_experts = 1;
  std::vector<int32_t> expert_ids;  // [N, K]: K distinct experts per token
  int64_t capacity = 0;             // padded mode only
  int64_t grad_rows = 0;            // R (dropless) or E * C (padded): rows of G
  std::vector<I> sorted_indices;

  int64_t num_kept() const {
    return std::count_if(sorted_indices.begin(), sorted_indices.end(),
                         [&](I s) { return s >= 0 && s < grad_rows; });
  }
};

// num_experts >= topk. Dropless: R is random in [3/4, 1] of min(N*K, max_rows), so usually some
// copies are dropped and sometimes none. Padded: the capacity is random in [1, the capacity that
// drops nothing], lowered so that E*C <= max_rows when possible, so usually some are dropped.
template <class I>
Routing<I> make_routing(std::mt19937_64& rng, mpg::Mode mode, int64_t num_tokens, int64_t topk,
                        int64_t num_experts,
                        int64_t max_rows = std::numeric_limits<int64_t>::max()) {
  Routing<I> r;
  r.mode = mode;
  r.num_tokens = num_tokens;
  r.topk = topk;
  r.num_experts = num_experts;
  std::vector<int32_t> experts(static_cast<size_t>(num_experts));
  std::iota(experts.begin(), experts.end(), 0);
  for (int64_t t = 0; t < num_tokens; ++t) {
    // Partial Fisher-Yates: the first topk entries become a random set of distinct experts.
    for (int64_t k = 0; k < topk; ++k) {
      const auto j = std::uniform_int_distribution<int64_t>(k, num_experts - 1)(rng);
      std::swap(experts[static_cast<size_t>(k)], experts[static_cast<size_t>(j)]);
      r.expert_ids.push_back(experts[static_cast<size_t>(k)]);
    }
  }
  const mpg::IndexView<int32_t> ids(r.expert_ids);
  if (mode == mpg::Mode::kDropless) {
    const int64_t most = std::min(num_tokens * topk, max_rows);
    const int64_t num_out = std::uniform_int_distribution<int64_t>(most - most / 4, most)(rng);
    const mpg::Status s =
        mpg::route_dropless(ids, topk, num_experts, num_out, &r.sorted_indices, &r.grad_rows);
    EXPECT_TRUE(s.ok()) << s.message();
  } else {
    std::vector<int64_t> load(static_cast<size_t>(num_experts), 0);
    for (int32_t e : r.expert_ids) ++load[static_cast<size_t>(e)];
    int64_t no_drop = std::max<int64_t>(1, *std::max_element(load.begin(), load.end()));
    no_drop = std::max<int64_t>(1, std::min(no_drop, max_rows / num_experts));
    r.capacity = std::uniform_int_distribution<int64_t>(1, no_drop)(rng);
    r.grad_rows = num_experts * r.capacity;
    const mpg::Status s = mpg::route_padded(ids, topk, num_experts, r.capacity, &r.sorted_indices);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Running the op.

template <class T, class I>
mpg::Status run_permute_grad(const GuardedMatrix<T>& grad, const std::vector<I>& sorted_indices,
                             int64_t topk, mpg::Mode mode, GuardedMatrix<T>& out,
                             const mpg::Options& options = {}) {
  return mpg::permute_grad(grad.const_view(), sorted_indices, topk, mode, out.view(), options);
}

// The paths every equality test sweeps: the oracle, and the fast path forced to each ISA.
struct PathCase {
  mpg::Path path;
  mpg::Isa isa;
};
inline constexpr PathCase kReferencePath{mpg::Path::kReference, mpg::Isa::kAuto};
// Only the kernel sets this build has (kernel_table.hpp): those a CPU lacks are skipped.
inline constexpr PathCase kFastPaths[] = {
    {mpg::Path::kFast, mpg::Isa::kPortable},
#if MPG_HAVE_X86_KERNELS
    {mpg::Path::kFast, mpg::Isa::kAvx2},       {mpg::Path::kFast, mpg::Isa::kAvx512},
    {mpg::Path::kFast, mpg::Isa::kAvx512Bf16},
#endif
#if MPG_HAVE_NEON_KERNELS
    {mpg::Path::kFast, mpg::Isa::kNeon},
#endif
};
inline constexpr std::array<PathCase, std::size(kFastPaths) + 1> with_reference_path() {
  std::array<PathCase, std::size(kFastPaths) + 1> paths{kReferencePath};
  for (size_t i = 0; i < std::size(kFastPaths); ++i) paths[i + 1] = kFastPaths[i];
  return paths;
}
inline constexpr auto kAllPaths = with_reference_path();

inline mpg::Options path_options(PathCase p, int num_threads = 0) {
  mpg::Options o;
  o.path = p.path;
  o.isa = p.isa;
  o.num_threads = num_threads;
  return o;
}
inline std::string path_name(PathCase p) {
  return p.path == mpg::Path::kReference ? "Reference" : std::string("Fast_") + mpg::name_of(p.isa);
}
inline bool path_supported(PathCase p) {
  return mpg::detail::cpu_supports(p.isa);
}
// Skips the current test when the CPU lacks the ISA the path forces.
#define MPG_SKIP_IF_UNSUPPORTED(path_case)                                \
  if (!::mpg_test::path_supported(path_case)) {                           \
    GTEST_SKIP() << "this CPU lacks " << ::mpg::name_of((path_case).isa); \
  }

// The Isa of every row of the kernel table (kernel_table.hpp), best first.
inline std::vector<mpg::Isa> kernel_table_isas() {
  std::vector<mpg::Isa> isas;
  mpg::detail::find_kernel_set([&](auto set) {
    isas.push_back(set.kIsa);
    return false;
  });
  return isas;
}

// While alive, the ISAs in mask (mpg::detail::isa_bit) count as absent from the CPU: forcing
// one is kUnsupportedIsa and the run-time choice skips it. Restores the previous mask.
class ScopedDisabledIsas {
 public:
  explicit ScopedDisabledIsas(uint32_t mask)
      : saved_(mpg::detail::disabled_isa_mask().load(std::memory_order_relaxed)) {
    mpg::detail::set_disabled_isas_for_test(mask);
  }
  ~ScopedDisabledIsas() { mpg::detail::set_disabled_isas_for_test(saved_); }
  ScopedDisabledIsas(const ScopedDisabledIsas&) = delete;
  ScopedDisabledIsas& operator=(const ScopedDisabledIsas&) = delete;

 private:
  uint32_t saved_;
};

// The dtype of a run-time parameter as a C++ type: f(TypeTag<T>{}) with mpg's own dispatch.
template <class F>
void with_element_type(mpg::DType dtype, F&& f) {
  mpg::detail::dispatch(dtype, mpg::IndexType::kInt32, mpg::Mode::kDropless,
                        [&](auto t, auto, auto) { f(t); });
}

inline std::string short_name(mpg::DType d) {
  switch (d) {  // no default: -Wswitch (an error under -Werror) flags a DType without a name
    case mpg::DType::kFloat32: return "F32";
    case mpg::DType::kFloat16: return "F16";
    case mpg::DType::kBFloat16: return "BF16";
    case mpg::DType::kInt8: return "I8";
  }
  return "?";
}
inline std::string short_name(mpg::IndexType i) {
  return i == mpg::IndexType::kInt32 ? "I32" : "I64";
}
inline std::string short_name(mpg::Mode m) {
  return m == mpg::Mode::kDropless ? "Dropless" : "Padded";
}

// The element types, for typed test suites: TYPED_TEST_SUITE(S, ElementTypes, ElementTypeNames).
// Read from mpg's dtype table, so a new arithmetic dtype is tested everywhere at once.
template <class List>
struct GTestTypes;
template <class... T>
struct GTestTypes<mpg::TypeList<T...>> {
  using type = ::testing::Types<T...>;
};
using ElementTypes = GTestTypes<mpg::ElementTypeList>::type;

// The same lists as run-time values, for value-parameterized suites (::testing::ValuesIn).
template <class... T>
constexpr std::array<mpg::DType, sizeof...(T)> dtypes_of(mpg::TypeList<T...>) {
  return {mpg::dtype_of<T>()...};
}
template <class... I>
constexpr std::array<mpg::IndexType, sizeof...(I)> index_types_of(mpg::TypeList<I...>) {
  return {mpg::index_type_of<I>()...};
}
inline constexpr auto kElementDTypes = dtypes_of(mpg::ElementTypeList{});
inline constexpr auto kIndexTypes = index_types_of(mpg::AllIndexTypes{});
class ElementTypeNames {
 public:
  template <class T>
  static std::string GetName(int) {
    return short_name(mpg::dtype_of<T>());
  }
};

}  // namespace mpg_test
