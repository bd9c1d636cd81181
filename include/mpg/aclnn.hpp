// mpg: the vendor-style two-phase API (aclnn), on host memory. Every op has the same shape:
//
//   uint64_t workspace_size = 0;
//   mpg::aclnn::Executor* executor = nullptr;
//   aclnnStatus s = MoeTokenPermuteGradGetWorkspaceSize(grad, indices, topk, padded, out,
//                                                       &workspace_size, &executor);
//   // allocate workspace_size bytes (any alignment)
//   s = MoeTokenPermuteGrad(workspace, workspace_size, executor);   // frees executor
//
// Phase one checks everything knowable from shapes, dtypes and pointers and sizes the workspace
// (the scratch phase two uses, e.g. to check index values for range and duplicates). Phase two
// checks the rest, then computes with the typed API's fast path. Outputs are written only when
// every check passed. The workspace must not overlap any output or input (161002). Tensors are
// described, not owned: their data must stay alive until phase two returns; the descriptors
// (and IntArrays) may be destroyed after phase one.
//
// Executor lifetime, the same for every op: one executor is created by each successful phase
// one and consumed by exactly one phase two of the same op, which frees it whether it succeeds
// or fails. Passing an executor that was already consumed (or never created) returns 161002
// instead of touching freed memory. As in the vendor API there is no separate destroy call: an
// executor never run stays allocated.
//
// Status codes: 161001 for a null tensor, data pointer, out-parameter or executor; 161002 for
// every other error (mpg::ErrorCode says which, and GetLastErrorMessage() says why). The
// contract of each op: docs/contract.md.
//
// Layout of this file: shared plumbing first (dtypes, Tensor, IntArray, Executor and the rules
// every phase one and two share), then one section per op.
#pragma once

#ifndef MPG_INSIDE_PUBLIC_HEADER
#define MPG_INSIDE_PUBLIC_HEADER
#endif

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "mpg/detail/execute.hpp"
#include "mpg/detail/problem.hpp"
#include "mpg/detail/token_permute.hpp"
#include "mpg/detail/validate.hpp"
#include "mpg/init_routing_v2_grad.hpp"
#include "mpg/options.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"
#include "mpg/unpermute.hpp"
#include "mpg/unpermute_grad.hpp"

namespace mpg::aclnn {

// The vendor's status type and codes (mpg::ErrorCode says which error it was).
using aclnnStatus = int32_t;
inline constexpr aclnnStatus kSuccess = kAclnnSuccess;
inline constexpr aclnnStatus kErrParamNullptr = kAclnnErrParamNullptr;
inline constexpr aclnnStatus kErrParamInvalid = kAclnnErrParamInvalid;

// The vendor's dtype codes (ACL_FLOAT, ACL_FLOAT16, ACL_INT8, ACL_INT32, ACL_INT64, ACL_BF16).
enum class DataType : int32_t {
  kFloat = 0,
  kFloat16 = 1,
  kInt8 = 2,
  kInt32 = 3,
  kInt64 = 9,
  kBFloat16 = 27
};

// The DataType of a C++ element or index type, from the dtype tables of types.hpp.
template <class T>
constexpr DataType data_type_of() {
  if constexpr (kIsIndex<T>) {
    return static_cast<DataType>(IndexTraits<T>::aclnn_code);
  } else {
    return static_cast<DataType>(DTypeTraits<T>::aclnn_code);
  }
}
static_assert(data_type_of<float>() == DataType::kFloat &&
                  data_type_of<half>() == DataType::kFloat16 &&
                  data_type_of<bfloat16>() == DataType::kBFloat16 &&
                  data_type_of<int8_t>() == DataType::kInt8 &&
                  data_type_of<int32_t>() == DataType::kInt32 &&
                  data_type_of<int64_t>() == DataType::kInt64,
              "mpg: DataType disagrees with the dtype tables");

namespace detail {

template <class... T>
constexpr bool find_dtype(TypeList<T...>, DataType d, DType* out) {
  return ((d == data_type_of<T>() ? (*out = dtype_of<T>(), true) : false) || ...);
}
template <class... I>
constexpr bool find_index_type(TypeList<I...>, DataType d, IndexType* out) {
  return ((d == data_type_of<I>() ? (*out = index_type_of<I>(), true) : false) || ...);
}
template <class... T>
constexpr int64_t find_size(TypeList<T...>, DataType d) {
  int64_t size = 0;
  static_cast<void>(((d == data_type_of<T>() ? (size = sizeof(T), true) : false) || ...));
  return size;
}

}  // namespace detail

// The DType of an element or token dtype code; false for any other code.
constexpr bool to_dtype(DataType d, DType* out) {
  return detail::find_dtype(AllDTypes{}, d, out);
}
// The IndexType of an index dtype code; false for any other code.
constexpr bool to_index_type(DataType d, IndexType* out) {
  return detail::find_index_type(AllIndexTypes{}, d, out);
}
// Bytes per element of a known code, 0 for an unknown one.
constexpr int64_t size_of(DataType d) {
  const int64_t element = detail::find_size(AllDTypes{}, d);
  return element != 0 ? element : detail::find_size(AllIndexTypes{}, d);
}

// A host tensor descriptor: dims, strides (elements) and a data pointer it does not own.
class Tensor {
 public:
  Tensor(std::vector<int64_t> dims, std::vector<int64_t> strides, DataType dtype, void* data)
      : dims_(std::move(dims)), strides_(std::move(strides)), dtype_(dtype), data_(data) {}
  const std::vector<int64_t>& dims() const { return dims_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  DataType dtype() const { return dtype_; }
  void* data() const { return data_; }  // already advanced by the offset

 private:
  std::vector<int64_t> dims_;
  std::vector<int64_t> strides_;
  DataType dtype_;
  void* data_;
};

// A list of int64 values, as the vendor's aclIntArray (e.g. restore_shape). It keeps its own
// copy of the values, so the caller's array may change or go away after CreateIntArray.
class IntArray {
 public:
  IntArray(const int64_t* values, uint64_t size) : values_(values, values + size) {}
  const int64_t* data() const { return values_.data(); }
  uint64_t size() const { return values_.size(); }
  const std::vector<int64_t>& values() const { return values_; }

 private:
  std::vector<int64_t> values_;
};

// One validated call of some op, waiting for its workspace. Each op's phase one builds it from
// the op's name, the workspace it needs, its operands (for the workspace overlap check) and
// `run`, the op's phase two after the shared checks. Ops never look inside each other's.
class Executor {
 public:
  // Phase two's own work: check what phase one could not (index values), then compute.
  using Run = std::function<Status(uint8_t* workspace)>;
  Executor(const char* op_name, uint64_t workspace_size, std::vector<mpg::detail::Operand> operands,
           Run run)
      : op_name_(op_name),
        workspace_size_(workspace_size),
        operands_(std::move(operands)),
        run_(std::move(run)) {}
  const char* op_name() const { return op_name_; }
  uint64_t workspace_size() const { return workspace_size_; }
  const std::vector<mpg::detail::Operand>& operands() const { return operands_; }
  Status run(uint8_t* workspace) const { return run_(workspace); }

 private:
  const char* op_name_;
  uint64_t workspace_size_;
  std::vector<mpg::detail::Operand> operands_;
  Run run_;
};

namespace detail {

using mpg::detail::error;

inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

// Returns the status code of s and records its message for GetLastErrorMessage().
inline aclnnStatus finish(const Status& s) {
  last_error() = s.message();
  return to_aclnn_status(s.code());
}

// Executors created and not yet consumed: lets phase two reject a stale pointer without
// dereferencing it. One hash lookup per call.
class LiveExecutors {
 public:
  static LiveExecutors& instance() {
    static LiveExecutors* live = new LiveExecutors();  // never destroyed: usable at exit
    return *live;
  }
  void add(const Executor* e) {
    const std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(e);
  }
  bool remove(const Executor* e) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return live_.erase(e) == 1;
  }

 private:
  std::mutex mutex_;
  std::unordered_set<const Executor*> live_;
};

// The start of every phase one: the out-parameters exist; *executor is null until success.
inline Status check_out_params(const uint64_t* workspace_size, Executor** executor) {
  if (executor == nullptr) return error(ErrorCode::kNullPointer, "executor is null");
  *executor = nullptr;
  if (workspace_size == nullptr) return error(ErrorCode::kNullPointer, "workspace_size is null");
  return {};
}

// The end of every successful phase one: a new live executor and the workspace it needs.
inline aclnnStatus plan(const char* op_name, uint64_t bytes,
                        std::vector<mpg::detail::Operand> operands, Executor::Run run,
                        uint64_t* workspace_size, Executor** executor) {
  *workspace_size = bytes;
  *executor = new Executor(op_name, bytes, std::move(operands), std::move(run));
  LiveExecutors::instance().add(*executor);
  return finish({});
}

// Every phase two: the executor is live and made by this op's phase one, it is consumed (freed
// on every path), the workspace is big enough and overlaps no operand; then the op runs.
inline aclnnStatus run(const char* op_name, void* workspace, uint64_t workspace_size,
                       Executor* executor) {
  if (executor == nullptr) return finish(error(ErrorCode::kNullPointer, "executor is null"));
  if (!LiveExecutors::instance().remove(executor)) {
    return finish(error(ErrorCode::kInvalidArgument, "executor was not returned by ", op_name,
                        "GetWorkspaceSize, or was already used (each executor runs once)"));
  }
  const std::unique_ptr<Executor> owned(executor);  // freed on every path from here
  if (std::string(owned->op_name()) != op_name) {
    return finish(error(ErrorCode::kInvalidArgument, "executor was returned by ", owned->op_name(),
                        "GetWorkspaceSize, not by ", op_name,
                        "GetWorkspaceSize (it is consumed all the same)"));
  }
  if (workspace_size < owned->workspace_size() ||
      (workspace == nullptr && owned->workspace_size() > 0)) {
    return finish(error(ErrorCode::kWorkspaceTooSmall, "workspace ",
                        workspace == nullptr ? "is null, " : "", "of ", workspace_size,
                        " bytes is smaller than the ", owned->workspace_size(), " bytes ", op_name,
                        "GetWorkspaceSize asked for"));
  }
  // Phase two writes the workspace before it computes: a workspace laid over an output would
  // write it early, over an input would corrupt it.
  if (Status s = mpg::detail::check_workspace_overlap(owned->operands(), workspace,
                                                      owned->workspace_size());
      !s.ok()) {
    return finish(s);
  }
  return finish(owned->run(static_cast<uint8_t*>(workspace)));
}

// "float32 (0), float16 (1) or bfloat16 (27)": the codes of a list, for messages.
template <class... T>
std::string code_list(TypeList<T...>) {
  std::string s;
  size_t i = 0;
  const size_t n = sizeof...(T);
  const auto append = [&](const char* name, DataType code) {
    s += (i == 0 ? "" : (i + 1 == n ? " or " : ", "));
    s += std::string(name) + " (" + std::to_string(static_cast<int32_t>(code)) + ")";
    ++i;
  };
  if constexpr (std::conjunction_v<std::bool_constant<kIsIndex<T>>...>) {
    (append(IndexTraits<T>::name, data_type_of<T>()), ...);
  } else {
    (append(DTypeTraits<T>::name, data_type_of<T>()), ...);
  }
  return s;
}

inline std::string dims_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// A tensor's data must sit on a multiple of its element size, as C++ needs of an element's
// address (the kernels' streaming stores would fault past a row's head otherwise).
inline Status element_aligned(const char* name, const Tensor& t) {
  const int64_t size = size_of(t.dtype());
  const auto address = reinterpret_cast<uintptr_t>(t.data());
  if (size > 1 && address % static_cast<uintptr_t>(size) != 0) {
    return error(ErrorCode::kInvalidArgument, name, " data address ", address,
                 " is not a multiple of its element size ", size);
  }
  return {};
}

// A 2-D (or, for padded G, 3-D [E, C, H]) tensor as rows x H with a row stride. Columns must be
// contiguous; [E, C, H] must have C rows evenly spaced across experts to flatten into [E*C, H].
inline Status as_matrix(const char* name, const Tensor& t, bool allow_3d,
                        mpg::detail::Problem::Matrix* m) {
  const auto& d = t.dims();
  const auto& s = t.strides();
  if (d.size() != 2 && !(allow_3d && d.size() == 3)) {
    return error(ErrorCode::kShapeMismatch, name, " has rank ", d.size(), " (shape ",
                 dims_string(d), "): must be 2", allow_3d ? " ([E*C, H]) or 3 ([E, C, H])" : "");
  }
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] < 0) {
      return error(ErrorCode::kShapeMismatch, name, " dim ", i, " = ", d[i], " must be >= 0");
    }
    if (s[i] < 0) {
      return error(ErrorCode::kInvalidArgument, name, " stride ", i, " = ", s[i], " must be >= 0");
    }
  }
  const size_t h = d.size() - 1;
  if (d[h] > 1 && s[h] != 1) {
    return error(ErrorCode::kInvalidArgument, name, " stride of the hidden dim = ", s[h],
                 ": must be 1 (rows may be strided, elements within a row may not)");
  }
  if (Status aligned = element_aligned(name, t); !aligned.ok()) return aligned;
  m->data = t.data();
  m->cols = d[h];
  if (d.size() == 2) {
    m->rows = d[0];
    m->row_stride = d[0] > 1 ? s[0] : d[1];
    return {};
  }
  // [E, C, H]: rows e*C + c at e*s0 + c*s1, evenly spaced only if s0 == C*s1 (or E <= 1).
  if (d[0] > 1 && d[1] > 0 && s[0] != d[1] * s[1]) {
    return error(ErrorCode::kInvalidArgument, name, " strides ", dims_string(s), " for shape ",
                 dims_string(d), ": stride 0 must equal dim 1 * stride 1 so that [E, C, H] ",
                 "flattens to [E*C, H]");
  }
  if (!mpg::detail::checked_mul(d[0], d[1], &m->rows)) {
    return error(ErrorCode::kShapeMismatch, name, " shape ", dims_string(d), " overflows int64");
  }
  m->row_stride = d[1] > 1 ? s[1] : (d[0] > 1 ? s[0] : d[2]);
  return {};
}

// The dtype of a tensor that an arithmetic op reads or writes: float32, float16 or bfloat16.
inline Status arithmetic_dtype(const char* name, const Tensor& t, DType* dtype) {
  if (!to_dtype(t.dtype(), dtype) || !is_arithmetic(*dtype)) {
    return error(ErrorCode::kUnsupportedDtype, name, " dtype ", static_cast<int32_t>(t.dtype()),
                 " is not supported: must be ", code_list(ElementTypeList{}));
  }
  return {};
}
// The dtype of an index tensor: int32 or int64.
inline Status index_dtype(const char* name, const Tensor& t, IndexType* index_type) {
  if (!to_index_type(t.dtype(), index_type)) {
    return error(ErrorCode::kUnsupportedDtype, name, " dtype ", static_cast<int32_t>(t.dtype()),
                 " is not supported: must be ", code_list(AllIndexTypes{}));
  }
  return {};
}

// A 1-D contiguous tensor (an index list): its data and length.
inline Status as_vector(const char* name, const Tensor& t, const void** data, int64_t* size) {
  const auto& d = t.dims();
  if (d.size() != 1) {
    return error(ErrorCode::kShapeMismatch, name, " has rank ", d.size(), " (shape ",
                 dims_string(d), "): must be 1");
  }
  if (d[0] < 0) return error(ErrorCode::kShapeMismatch, name, " dim 0 = ", d[0], " must be >= 0");
  if (d[0] > 1 && t.strides()[0] != 1) {
    return error(ErrorCode::kInvalidArgument, name, " stride = ", t.strides()[0],
                 ": must be 1 (contiguous)");
  }
  if (Status aligned = element_aligned(name, t); !aligned.ok()) return aligned;
  *data = t.data();
  *size = d[0];
  return {};
}

}  // namespace detail

// strides in elements, nullptr = contiguous row-major; offset in elements from data.
// Returns nullptr (and sets GetLastErrorMessage()) for a bad descriptor.
inline Tensor* CreateTensor(const int64_t* view_dims, uint64_t num_dims, DataType dtype,
                            const int64_t* strides, int64_t offset, void* data) {
  if (view_dims == nullptr && num_dims > 0) {
    detail::finish(detail::error(ErrorCode::kNullPointer, "CreateTensor: view_dims is null"));
    return nullptr;
  }
  if (num_dims > 8 || offset < 0) {
    detail::finish(detail::error(ErrorCode::kInvalidArgument, "CreateTensor: num_dims = ", num_dims,
                                 " must be <= 8 and offset = ", offset, " must be >= 0"));
    return nullptr;
  }
  std::vector<int64_t> dims(view_dims, view_dims + num_dims);
  std::vector<int64_t> st(num_dims);
  for (uint64_t i = num_dims, run = 1; i-- > 0;) {
    st[i] = strides ? strides[i] : static_cast<int64_t>(run);
    run *= static_cast<uint64_t>(dims[i] > 0 ? dims[i] : 1);
  }
  // An unknown dtype (refused later by every op) takes the offset in bytes.
  const int64_t element_size = size_of(dtype) > 0 ? size_of(dtype) : 1;
  auto* base = static_cast<char*>(data);
  if (base != nullptr) base += offset * element_size;
  return new Tensor(std::move(dims), std::move(st), dtype, base);
}

inline void DestroyTensor(const Tensor* tensor) {
  delete tensor;
}

// size values from `values` (copied). Returns nullptr (and sets GetLastErrorMessage()) when
// values is null and size > 0.
inline IntArray* CreateIntArray(const int64_t* values, uint64_t size) {
  if (values == nullptr && size > 0) {
    detail::finish(detail::error(ErrorCode::kNullPointer, "CreateIntArray: values is null"));
    return nullptr;
  }
  return new IntArray(values, size);
}

inline void DestroyIntArray(const IntArray* array) {
  delete array;
}

// Why the last call on this thread failed; "" after a success.
inline const char* GetLastErrorMessage() {
  return detail::last_error().c_str();
}

// ---- MoeTokenPermuteGrad -----------------------------------------------------------------------

namespace detail {

inline Status make_permute_grad_problem(const Tensor* grad, const Tensor* indices, int64_t num_topk,
                                        bool padded_mode, Tensor* out, mpg::detail::Problem* p) {
  if (grad == nullptr) return error(ErrorCode::kNullPointer, "permuted_output_grad is null");
  if (indices == nullptr) return error(ErrorCode::kNullPointer, "sorted_indices is null");
  if (out == nullptr) return error(ErrorCode::kNullPointer, "out is null");
  if (Status s = arithmetic_dtype("permuted_output_grad", *grad, &p->dtype); !s.ok()) return s;
  if (out->dtype() != grad->dtype()) {
    return error(ErrorCode::kDtypeMismatch, "out dtype ", static_cast<int32_t>(out->dtype()),
                 " differs from permuted_output_grad dtype ", static_cast<int32_t>(grad->dtype()));
  }
  if (Status s = index_dtype("sorted_indices", *indices, &p->index_type); !s.ok()) return s;
  p->mode = padded_mode ? Mode::kPadded : Mode::kDropless;
  p->topk = num_topk;
  if (Status s = as_matrix("permuted_output_grad", *grad, padded_mode, &p->grad); !s.ok()) {
    return s;
  }
  if (Status s = as_matrix("out", *out, false, &p->out); !s.ok()) return s;
  if (Status s = as_vector("sorted_indices", *indices, &p->indices, &p->num_indices); !s.ok()) {
    return s;
  }
  return mpg::detail::check_shapes(*p);
}

}  // namespace detail

inline aclnnStatus MoeTokenPermuteGradGetWorkspaceSize(const Tensor* permuted_output_grad,
                                                       const Tensor* sorted_indices,
                                                       int64_t num_topk, bool padded_mode,
                                                       Tensor* out, uint64_t* workspace_size,
                                                       Executor** executor) {
  if (Status s = detail::check_out_params(workspace_size, executor); !s.ok()) {
    return detail::finish(s);
  }
  mpg::detail::Problem p;
  if (Status s = detail::make_permute_grad_problem(permuted_output_grad, sorted_indices, num_topk,
                                                   padded_mode, out, &p);
      !s.ok()) {
    return detail::finish(s);
  }
  const auto operands = mpg::detail::operands(p);
  return detail::plan(
      "MoeTokenPermuteGrad", mpg::detail::index_scratch_bytes(p.mode, p.num_indices, p.grad.rows),
      {operands.begin(), operands.end()},
      [p](uint8_t* workspace) {
        return mpg::detail::execute<mpg::detail::kSequentialSum>(p, workspace, Options{});
      },
      workspace_size, executor);
}

inline aclnnStatus MoeTokenPermuteGrad(void* workspace, uint64_t workspace_size,
                                       Executor* executor) {
  return detail::run("MoeTokenPermuteGrad", workspace, workspace_size, executor);
}

// ---- MoeTokenPermute ---------------------------------------------------------------------------
//
// tokens [N, H] (float32, float16, bfloat16 or int8), indices [N, K] or [N] (K = 1) of expert
// ids (int32 or int64, contiguous), num_out_tokens (any value: clamped, see token_permute.hpp),
// permute_tokens_out [n, H] in the tokens' dtype, sorted_indices_out [N*K] int32. padded_mode
// = true is refused (161002), as on the device. Phase one checks shapes, dtypes, pointers and
// overlaps of both outputs against each other and every input; phase two checks the expert ids
// are in [0, 2^24 - 1), then sorts in the workspace ((N*K + 4096) * 4 bytes + 3) and writes
// the outputs.

namespace detail {

inline Status make_token_permute_problem(const Tensor* tokens, const Tensor* indices,
                                         int64_t num_out_tokens, bool padded_mode,
                                         Tensor* permute_tokens_out, Tensor* sorted_indices_out,
                                         mpg::detail::TokenPermuteProblem* p) {
  if (tokens == nullptr) return error(ErrorCode::kNullPointer, "tokens is null");
  if (indices == nullptr) return error(ErrorCode::kNullPointer, "indices is null");
  if (permute_tokens_out == nullptr) {
    return error(ErrorCode::kNullPointer, "permute_tokens_out is null");
  }
  if (sorted_indices_out == nullptr) {
    return error(ErrorCode::kNullPointer, "sorted_indices_out is null");
  }
  if (padded_mode) {
    return error(ErrorCode::kInvalidArgument,
                 "padded_mode = true is not supported: MoeTokenPermute sorts the copies by "
                 "expert (padded_mode = false) only, as on the device");
  }
  DType dtype{};
  if (!to_dtype(tokens->dtype(), &dtype)) {
    return error(ErrorCode::kUnsupportedDtype, "tokens dtype ",
                 static_cast<int32_t>(tokens->dtype()), " is not supported: must be ",
                 code_list(AllDTypes{}));
  }
  if (permute_tokens_out->dtype() != tokens->dtype()) {
    return error(ErrorCode::kDtypeMismatch, "permute_tokens_out dtype ",
                 static_cast<int32_t>(permute_tokens_out->dtype()), " differs from tokens dtype ",
                 static_cast<int32_t>(tokens->dtype()));
  }
  if (Status s = index_dtype("indices", *indices, &p->id_type); !s.ok()) return s;
  if (sorted_indices_out->dtype() != DataType::kInt32) {
    return error(ErrorCode::kUnsupportedDtype, "sorted_indices_out dtype ",
                 static_cast<int32_t>(sorted_indices_out->dtype()),
                 " is not supported: must be int32 (3)");
  }
  p->elem_size = size_of(dtype);
  p->num_out_tokens = num_out_tokens;
  if (Status s = as_matrix("tokens", *tokens, false, &p->tokens); !s.ok()) return s;
  if (Status s = as_matrix("permute_tokens_out", *permute_tokens_out, false, &p->permuted);
      !s.ok()) {
    return s;
  }
  // indices: [N] (K = 1) or [N, K], row-major contiguous.
  const auto& d = indices->dims();
  const auto& st = indices->strides();
  if (d.size() == 2) {
    if (d[0] < 0 || d[1] < 0) {
      return error(ErrorCode::kShapeMismatch, "indices has shape ", dims_string(d),
                   ": dimensions must be >= 0");
    }
    if (d[1] < 1) {
      return error(ErrorCode::kShapeMismatch, "indices has shape ", dims_string(d),
                   ": K (dim 1) must be >= 1");
    }
    if ((d[1] > 1 && st[1] != 1) || (d[0] > 1 && st[0] != d[1])) {
      return error(ErrorCode::kInvalidArgument, "indices strides ", dims_string(st), " for shape ",
                   dims_string(d), ": must be contiguous row-major");
    }
    if (Status s = element_aligned("indices", *indices); !s.ok()) return s;
    p->expert_ids = indices->data();
    p->topk = d[1];
    if (!mpg::detail::checked_mul(d[0], d[1], &p->num_ids)) {
      return error(ErrorCode::kShapeMismatch, "indices shape ", dims_string(d), " overflows int64");
    }
  } else if (d.size() == 1) {
    if (Status s = as_vector("indices", *indices, &p->expert_ids, &p->num_ids); !s.ok()) return s;
    p->topk = 1;
  } else {
    return error(ErrorCode::kShapeMismatch, "indices has rank ", d.size(), " (shape ",
                 dims_string(d), "): must be 2 ([N, K]) or 1 ([N], K = 1)");
  }
  const void* sorted = nullptr;
  if (Status s = as_vector("sorted_indices_out", *sorted_indices_out, &sorted, &p->num_sorted);
      !s.ok()) {
    return s;
  }
  p->sorted_indices = static_cast<int32_t*>(const_cast<void*>(sorted));
  return mpg::detail::check_token_permute_shapes(*p);
}

}  // namespace detail

inline aclnnStatus MoeTokenPermuteGetWorkspaceSize(const Tensor* tokens, const Tensor* indices,
                                                   int64_t num_out_tokens, bool padded_mode,
                                                   Tensor* permute_tokens_out,
                                                   Tensor* sorted_indices_out,
                                                   uint64_t* workspace_size, Executor** executor) {
  if (Status s = detail::check_out_params(workspace_size, executor); !s.ok()) {
    return detail::finish(s);
  }
  mpg::detail::TokenPermuteProblem p;
  if (Status s = detail::make_token_permute_problem(tokens, indices, num_out_tokens, padded_mode,
                                                    permute_tokens_out, sorted_indices_out, &p);
      !s.ok()) {
    return detail::finish(s);
  }
  const auto operands = mpg::detail::token_permute_operands(p);
  return detail::plan(
      "MoeTokenPermute", mpg::detail::token_permute_scratch_bytes(p.num_ids),
      {operands.begin(), operands.end()},
      [p](uint8_t* workspace) {
        return mpg::detail::execute_token_permute(p, workspace, Options{});
      },
      workspace_size, executor);
}

inline aclnnStatus MoeTokenPermute(void* workspace, uint64_t workspace_size, Executor* executor) {
  return detail::run("MoeTokenPermute", workspace, workspace_size, executor);
}

// ---- MoeInitRoutingV2Grad ----------------------------------------------------------------------

namespace detail {

// docs/contract.md section 8's table: drop_pad_mode 0 takes G [N*K, H] (active_num 0) or
// [active_num, H]; drop_pad_mode 1 takes [E, C, H] or [E*C, H] and ignores active_num.
inline Status make_init_routing_v2_grad_problem(const Tensor* grad, const Tensor* indices,
                                                int64_t top_k, int64_t drop_pad_mode,
                                                int64_t active_num, Tensor* out,
                                                mpg::detail::Problem* p) {
  p->names = mpg::detail::init_routing_v2_grad_names();
  p->order = mpg::detail::Order::kBinaryBins;
  if (grad == nullptr) return error(ErrorCode::kNullPointer, "grad_expanded_x is null");
  if (indices == nullptr) return error(ErrorCode::kNullPointer, "expanded_row_idx is null");
  if (out == nullptr) return error(ErrorCode::kNullPointer, "out is null");
  if (drop_pad_mode != 0 && drop_pad_mode != 1) {
    return error(ErrorCode::kInvalidArgument, "drop_pad_mode = ", drop_pad_mode,
                 " must be 0 (dropless) or 1 (drop and pad)");
  }
  if (active_num < 0) {
    return error(ErrorCode::kInvalidArgument, "active_num = ", active_num, " must be >= 0");
  }
  if (Status s = arithmetic_dtype("grad_expanded_x", *grad, &p->dtype); !s.ok()) return s;
  if (out->dtype() != grad->dtype()) {
    return error(ErrorCode::kDtypeMismatch, "out dtype ", static_cast<int32_t>(out->dtype()),
                 " differs from grad_expanded_x dtype ", static_cast<int32_t>(grad->dtype()));
  }
  if (Status s = index_dtype("expanded_row_idx", *indices, &p->index_type); !s.ok()) return s;
  const bool drop_pad = drop_pad_mode == 1;
  p->mode = drop_pad ? Mode::kPadded : Mode::kDropless;
  p->topk = top_k;
  if (Status s = as_matrix("grad_expanded_x", *grad, drop_pad, &p->grad); !s.ok()) return s;
  if (Status s = as_matrix("out", *out, false, &p->out); !s.ok()) return s;
  if (Status s = as_vector("expanded_row_idx", *indices, &p->indices, &p->num_indices); !s.ok()) {
    return s;
  }
  if (!drop_pad && active_num == 0 && p->grad.rows != p->num_indices) {
    return error(ErrorCode::kShapeMismatch, "grad_expanded_x has ", p->grad.rows,
                 " rows but must have len(expanded_row_idx) = ", p->num_indices,
                 " (drop_pad_mode 0, active_num 0: nothing dropped)");
  }
  if (!drop_pad && active_num > 0) {
    if (active_num > p->num_indices) {
      return error(ErrorCode::kInvalidArgument, "active_num = ", active_num,
                   " must be <= len(expanded_row_idx) = ", p->num_indices);
    }
    if (p->grad.rows != active_num) {
      return error(ErrorCode::kShapeMismatch, "grad_expanded_x has ", p->grad.rows,
                   " rows but must have active_num = ", active_num, " (drop_pad_mode 0)");
    }
  }
  return mpg::detail::check_shapes(*p);
}

}  // namespace detail

inline aclnnStatus MoeInitRoutingV2GradGetWorkspaceSize(const Tensor* grad_expanded_x,
                                                        const Tensor* expanded_row_idx,
                                                        int64_t top_k, int64_t drop_pad_mode,
                                                        int64_t active_num, Tensor* out,
                                                        uint64_t* workspace_size,
                                                        Executor** executor) {
  if (Status s = detail::check_out_params(workspace_size, executor); !s.ok()) {
    return detail::finish(s);
  }
  mpg::detail::Problem p;
  if (Status s = detail::make_init_routing_v2_grad_problem(grad_expanded_x, expanded_row_idx, top_k,
                                                           drop_pad_mode, active_num, out, &p);
      !s.ok()) {
    return detail::finish(s);
  }
  const auto operands = mpg::detail::operands(p);
  return detail::plan(
      "MoeInitRoutingV2Grad", mpg::detail::index_scratch_bytes(p.mode, p.num_indices, p.grad.rows),
      {operands.begin(), operands.end()},
      [p](uint8_t* workspace) {
        return mpg::detail::execute<mpg::detail::kBinaryBinsSum>(p, workspace, Options{});
      },
      workspace_size, executor);
}

inline aclnnStatus MoeInitRoutingV2Grad(void* workspace, uint64_t workspace_size,
                                        Executor* executor) {
  return detail::run("MoeInitRoutingV2Grad", workspace, workspace_size, executor);
}

// ---- MoeTokenUnpermute -------------------------------------------------------------------------

namespace detail {

// probs may be null (then K = 1 and out is [len(sorted_indices), H]); restore_shape may be null,
// else it must be out's shape. padded_mode = true is refused, as on the device.
inline Status make_unpermute_problem(const Tensor* permuted_tokens, const Tensor* sorted_indices,
                                     const Tensor* probs, bool padded_mode,
                                     const IntArray* restore_shape, Tensor* out,
                                     mpg::detail::Problem* p) {
  p->names = mpg::detail::unpermute_names();
  if (permuted_tokens == nullptr) return error(ErrorCode::kNullPointer, "permuted_tokens is null");
  if (sorted_indices == nullptr) return error(ErrorCode::kNullPointer, "sorted_indices is null");
  if (out == nullptr) return error(ErrorCode::kNullPointer, "out is null");
  if (padded_mode) {
    return error(ErrorCode::kInvalidArgument,
                 "padded_mode = true is not supported by MoeTokenUnpermute (the device refuses "
                 "it too; mpg::unpermute offers Mode::kPadded)");
  }
  if (Status s = arithmetic_dtype("permuted_tokens", *permuted_tokens, &p->dtype); !s.ok()) {
    return s;
  }
  if (out->dtype() != permuted_tokens->dtype()) {
    return error(ErrorCode::kDtypeMismatch, "out dtype ", static_cast<int32_t>(out->dtype()),
                 " differs from permuted_tokens dtype ",
                 static_cast<int32_t>(permuted_tokens->dtype()));
  }
  if (Status s = index_dtype("sorted_indices", *sorted_indices, &p->index_type); !s.ok()) {
    return s;
  }
  p->mode = Mode::kDropless;
  p->topk = 1;
  if (Status s = as_matrix("permuted_tokens", *permuted_tokens, false, &p->grad); !s.ok()) {
    return s;
  }
  if (Status s = as_matrix("out", *out, false, &p->out); !s.ok()) return s;
  if (Status s = as_vector("sorted_indices", *sorted_indices, &p->indices, &p->num_indices);
      !s.ok()) {
    return s;
  }
  if (probs != nullptr) {
    if (Status s = arithmetic_dtype("probs", *probs, &p->weights_dtype); !s.ok()) return s;
    if (Status s = as_matrix("probs", *probs, false, &p->weights); !s.ok()) return s;
    p->weighted = true;
    p->topk = p->weights.cols;
    p->names.topk = "K (probs dim 1)";
  }
  if (restore_shape != nullptr) {
    const std::vector<int64_t>& r = restore_shape->values();
    if (r.size() != 2 || r[0] != p->out.rows || r[1] != p->out.cols) {
      return error(ErrorCode::kShapeMismatch, "restore_shape = ", dims_string(r),
                   " does not describe out, whose shape is ", dims_string(out->dims()));
    }
  }
  return mpg::detail::check_shapes(*p);
}

}  // namespace detail

inline aclnnStatus MoeTokenUnpermuteGetWorkspaceSize(const Tensor* permuted_tokens,
                                                     const Tensor* sorted_indices,
                                                     const Tensor* probs, bool padded_mode,
                                                     const IntArray* restore_shape, Tensor* out,
                                                     uint64_t* workspace_size,
                                                     Executor** executor) {
  if (Status s = detail::check_out_params(workspace_size, executor); !s.ok()) {
    return detail::finish(s);
  }
  mpg::detail::Problem p;
  if (Status s = detail::make_unpermute_problem(permuted_tokens, sorted_indices, probs, padded_mode,
                                                restore_shape, out, &p);
      !s.ok()) {
    return detail::finish(s);
  }
  const auto operands = mpg::detail::operands(p);
  return detail::plan(
      "MoeTokenUnpermute", mpg::detail::index_scratch_bytes(p.mode, p.num_indices, p.grad.rows),
      {operands.begin(), operands.end()},
      [p](uint8_t* workspace) {
        constexpr unsigned kSums = mpg::detail::kSequentialSum | mpg::detail::kWeightedSum;
        return mpg::detail::execute<kSums>(p, workspace, Options{});
      },
      workspace_size, executor);
}

inline aclnnStatus MoeTokenUnpermute(void* workspace, uint64_t workspace_size, Executor* executor) {
  return detail::run("MoeTokenUnpermute", workspace, workspace_size, executor);
}

// ---- MoeTokenUnpermuteGrad --------------------------------------------------------------------
//
// permuted_tokens X [R, H], unpermuted_tokens_grad g [N, H] (X's dtype), sorted_indices S [N*K]
// (int32 or int64, a permutation of [0, N*K)), probs P [N, K] (any float dtype) or null (K = 1),
// restore_shape null or g's shape; outputs permuted_tokens_grad_out dX [N*K, H] (X's dtype) and
// probs_grad_out dP [N, K] (P's dtype), null iff probs is null. padded_mode = true is refused, as
// on the device. Phase one checks shapes, dtypes, pointers and overlaps of each output with every
// input and the other output; phase two checks S (workspace: its bitmap), then writes both.

namespace detail {

inline Status make_unpermute_grad_problem(const Tensor* permuted_tokens,
                                          const Tensor* unpermuted_tokens_grad,
                                          const Tensor* sorted_indices, const Tensor* probs,
                                          bool padded_mode, const IntArray* restore_shape,
                                          Tensor* permuted_tokens_grad_out, Tensor* probs_grad_out,
                                          mpg::detail::UnpermuteGradProblem* p) {
  if (permuted_tokens == nullptr) return error(ErrorCode::kNullPointer, "permuted_tokens is null");
  if (unpermuted_tokens_grad == nullptr) {
    return error(ErrorCode::kNullPointer, "unpermuted_tokens_grad is null");
  }
  if (sorted_indices == nullptr) return error(ErrorCode::kNullPointer, "sorted_indices is null");
  if (permuted_tokens_grad_out == nullptr) {
    return error(ErrorCode::kNullPointer, "permuted_tokens_grad_out is null");
  }
  if (probs != nullptr && probs_grad_out == nullptr) {
    return error(ErrorCode::kNullPointer,
                 "probs_grad_out is null but probs is given: both or neither");
  }
  if (probs == nullptr && probs_grad_out != nullptr) {
    return error(ErrorCode::kInvalidArgument,
                 "probs_grad_out is given but probs is null: both or neither");
  }
  if (padded_mode) {
    return error(ErrorCode::kInvalidArgument,
                 "padded_mode = true is not supported by MoeTokenUnpermuteGrad (the device "
                 "refuses it too)");
  }
  if (Status s = arithmetic_dtype("permuted_tokens", *permuted_tokens, &p->dtype); !s.ok()) {
    return s;
  }
  const auto same_dtype = [&](const char* name, const Tensor& t) -> Status {
    if (t.dtype() == permuted_tokens->dtype()) return {};
    return error(ErrorCode::kDtypeMismatch, name, " dtype ", static_cast<int32_t>(t.dtype()),
                 " differs from permuted_tokens dtype ",
                 static_cast<int32_t>(permuted_tokens->dtype()));
  };
  if (Status s = same_dtype("unpermuted_tokens_grad", *unpermuted_tokens_grad); !s.ok()) return s;
  if (Status s = same_dtype("permuted_tokens_grad_out", *permuted_tokens_grad_out); !s.ok()) {
    return s;
  }
  if (Status s = index_dtype("sorted_indices", *sorted_indices, &p->index_type); !s.ok()) {
    return s;
  }
  if (Status s = as_matrix("permuted_tokens", *permuted_tokens, false, &p->tokens); !s.ok()) {
    return s;
  }
  if (Status s =
          as_matrix("unpermuted_tokens_grad", *unpermuted_tokens_grad, false, &p->tokens_grad);
      !s.ok()) {
    return s;
  }
  if (Status s = as_matrix("permuted_tokens_grad_out", *permuted_tokens_grad_out, false,
                           &p->permuted_grad);
      !s.ok()) {
    return s;
  }
  if (Status s = as_vector("sorted_indices", *sorted_indices, &p->indices, &p->num_indices);
      !s.ok()) {
    return s;
  }
  if (probs != nullptr) {
    if (Status s = arithmetic_dtype("probs", *probs, &p->probs_dtype); !s.ok()) return s;
    if (probs_grad_out->dtype() != probs->dtype()) {
      return error(ErrorCode::kDtypeMismatch, "probs_grad_out dtype ",
                   static_cast<int32_t>(probs_grad_out->dtype()), " differs from probs dtype ",
                   static_cast<int32_t>(probs->dtype()));
    }
    if (Status s = as_matrix("probs", *probs, false, &p->probs); !s.ok()) return s;
    if (Status s = as_matrix("probs_grad_out", *probs_grad_out, false, &p->probs_grad); !s.ok()) {
      return s;
    }
    p->has_probs = true;
    p->probs_grad_given = true;
  }
  if (restore_shape != nullptr) {
    const std::vector<int64_t>& r = restore_shape->values();
    if (r.size() != 2 || r[0] != p->tokens_grad.rows || r[1] != p->tokens_grad.cols) {
      return error(ErrorCode::kShapeMismatch, "restore_shape = ", dims_string(r),
                   " does not describe unpermuted_tokens_grad, whose shape is ",
                   dims_string(unpermuted_tokens_grad->dims()));
    }
  }
  return mpg::detail::check_unpermute_grad_shapes(*p);
}

}  // namespace detail

inline aclnnStatus MoeTokenUnpermuteGradGetWorkspaceSize(
    const Tensor* permuted_tokens, const Tensor* unpermuted_tokens_grad,
    const Tensor* sorted_indices, const Tensor* probs, bool padded_mode,
    const IntArray* restore_shape, Tensor* permuted_tokens_grad_out, Tensor* probs_grad_out,
    uint64_t* workspace_size, Executor** executor) {
  if (Status s = detail::check_out_params(workspace_size, executor); !s.ok()) {
    return detail::finish(s);
  }
  mpg::detail::UnpermuteGradProblem p;
  if (Status s = detail::make_unpermute_grad_problem(
          permuted_tokens, unpermuted_tokens_grad, sorted_indices, probs, padded_mode,
          restore_shape, permuted_tokens_grad_out, probs_grad_out, &p);
      !s.ok()) {
    return detail::finish(s);
  }
  const auto operands = mpg::detail::unpermute_grad_operands(p);
  return detail::plan(
      "MoeTokenUnpermuteGrad", mpg::detail::unpermute_grad_scratch_bytes(p),
      {operands.begin(), operands.end()},
      [p](uint8_t* workspace) {
        return mpg::detail::execute_unpermute_grad(p, workspace, Options{});
      },
      workspace_size, executor);
}

inline aclnnStatus MoeTokenUnpermuteGrad(void* workspace, uint64_t workspace_size,
                                         Executor* executor) {
  return detail::run("MoeTokenUnpermuteGrad", workspace, workspace_size, executor);
}

}  // namespace mpg::aclnn
