// mpg: the two-phase API of aclnnMoeTokenPermuteGrad (SPEC section 5), on host memory.
//
//   uint64_t workspace_size = 0;
//   mpg::aclnn::Executor* executor = nullptr;
//   Status s = MoeTokenPermuteGradGetWorkspaceSize(grad, indices, topk, padded, out,
//                                                  &workspace_size, &executor);
//   // allocate workspace_size bytes (any alignment)
//   s = MoeTokenPermuteGrad(workspace, workspace_size, executor);   // frees executor
//
// Phase one checks everything knowable from shapes, dtypes and pointers and sizes the workspace
// (the scratch that phase two uses to check the index values for range and duplicates). Phase
// two checks the index values, then computes with mpg::permute_grad's fast path. out is written
// only when every check passed. The workspace must not overlap out or the inputs (161002).
// Tensors are described, not owned: their data must stay alive until phase two returns; the
// descriptors themselves may be destroyed after phase one.
//
// Executor lifetime: one executor is created by each successful phase one and consumed by
// exactly one phase two, which frees it whether it succeeds or fails. Passing an executor that
// was already consumed (or never created) returns 161002 instead of touching freed memory. As in
// the vendor API there is no separate destroy call: an executor never run stays allocated.
//
// Status codes: 161001 for a null tensor, data pointer, out-parameter or executor; 161002 for
// every other error (mpg::ErrorCode says which, and GetLastErrorMessage() says why).
#pragma once

#ifndef MPG_INSIDE_PUBLIC_HEADER
#define MPG_INSIDE_PUBLIC_HEADER
#endif

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "mpg/detail/execute.hpp"
#include "mpg/detail/problem.hpp"
#include "mpg/detail/validate.hpp"
#include "mpg/options.hpp"
#include "mpg/status.hpp"
#include "mpg/types.hpp"

namespace mpg::aclnn {

using Status = int32_t;
inline constexpr Status kSuccess = kAclnnSuccess;
inline constexpr Status kErrParamNullptr = kAclnnErrParamNullptr;
inline constexpr Status kErrParamInvalid = kAclnnErrParamInvalid;

enum class DataType : int32_t { kFloat = 0, kFloat16 = 1, kInt32 = 3, kInt64 = 9, kBFloat16 = 27 };

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

// One validated call, waiting for its workspace.
class Executor {
 public:
  Executor(const detail::Problem& problem, uint64_t workspace_size)
      : problem_(problem), workspace_size_(workspace_size) {}
  const detail::Problem& problem() const { return problem_; }
  uint64_t workspace_size() const { return workspace_size_; }

 private:
  detail::Problem problem_;
  uint64_t workspace_size_;
};

namespace detail {

using mpg::detail::error;

inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

// Returns the status code of s and records its message for GetLastErrorMessage().
inline Status finish(const mpg::Status& s) {
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

inline bool element_dtype(DataType d, DType* out) {
  switch (d) {
    case DataType::kFloat: *out = DType::kFloat32; return true;
    case DataType::kFloat16: *out = DType::kFloat16; return true;
    case DataType::kBFloat16: *out = DType::kBFloat16; return true;
    case DataType::kInt32:
    case DataType::kInt64: break;
  }
  return false;
}

inline std::string dims_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// A 2-D (or, for padded G, 3-D [E, C, H]) tensor as rows x H with a row stride. Columns must be
// contiguous; [E, C, H] must have C rows evenly spaced across experts to flatten into [E*C, H].
inline mpg::Status as_matrix(const char* name, const Tensor& t, bool allow_3d,
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

inline mpg::Status make_problem(const Tensor* grad, const Tensor* indices, int64_t num_topk,
                                bool padded_mode, Tensor* out, mpg::detail::Problem* p) {
  if (grad == nullptr) return error(ErrorCode::kNullPointer, "permuted_output_grad is null");
  if (indices == nullptr) return error(ErrorCode::kNullPointer, "sorted_indices is null");
  if (out == nullptr) return error(ErrorCode::kNullPointer, "out is null");
  if (!element_dtype(grad->dtype(), &p->dtype)) {
    return error(ErrorCode::kUnsupportedDtype, "permuted_output_grad dtype ",
                 static_cast<int>(grad->dtype()),
                 " is not supported: must be float32 (0), float16 (1) or bfloat16 (27)");
  }
  if (out->dtype() != grad->dtype()) {
    return error(ErrorCode::kDtypeMismatch, "out dtype ", static_cast<int>(out->dtype()),
                 " differs from permuted_output_grad dtype ", static_cast<int>(grad->dtype()));
  }
  if (indices->dtype() == DataType::kInt32) {
    p->index_type = IndexType::kInt32;
  } else if (indices->dtype() == DataType::kInt64) {
    p->index_type = IndexType::kInt64;
  } else {
    return error(ErrorCode::kUnsupportedDtype, "sorted_indices dtype ",
                 static_cast<int>(indices->dtype()),
                 " is not supported: must be int32 (3) or int64 (9)");
  }
  p->mode = padded_mode ? Mode::kPadded : Mode::kDropless;
  p->topk = num_topk;
  if (mpg::Status s = as_matrix("permuted_output_grad", *grad, padded_mode, &p->grad); !s.ok()) {
    return s;
  }
  if (mpg::Status s = as_matrix("out", *out, false, &p->out); !s.ok()) return s;
  const auto& d = indices->dims();
  if (d.size() != 1) {
    return error(ErrorCode::kShapeMismatch, "sorted_indices has rank ", d.size(), " (shape ",
                 dims_string(d), "): must be 1");
  }
  if (d[0] < 0) {
    return error(ErrorCode::kShapeMismatch, "sorted_indices dim 0 = ", d[0], " must be >= 0");
  }
  if (d[0] > 1 && indices->strides()[0] != 1) {
    return error(ErrorCode::kInvalidArgument, "sorted_indices stride = ", indices->strides()[0],
                 ": must be 1 (contiguous)");
  }
  p->indices = indices->data();
  p->num_indices = d[0];
  return mpg::detail::check_shapes(*p);
}

// Phase two writes the workspace while it checks the indices: a workspace laid over out or an
// input would write out early or corrupt the input. Three range checks, so always done.
inline mpg::Status check_workspace(const mpg::detail::Problem& p, const void* workspace,
                                   uint64_t bytes) {
  using mpg::detail::ByteRows;
  const ByteRows scratch{reinterpret_cast<uintptr_t>(workspace), 1, static_cast<int64_t>(bytes), 0};
  const auto overlaps = [&](const ByteRows& other) {
    return mpg::detail::overlaps(scratch, other);
  };
  if (overlaps(mpg::detail::byte_rows(p.out, p.elem_size()))) {
    return error(ErrorCode::kOverlap, "workspace overlaps out in memory");
  }
  if (overlaps(mpg::detail::byte_rows(p.grad, p.elem_size()))) {
    return error(ErrorCode::kOverlap, "workspace overlaps permuted_output_grad in memory");
  }
  const int64_t index_bytes = p.num_indices * size_of(p.index_type);
  if (overlaps({reinterpret_cast<uintptr_t>(p.indices), 1, index_bytes, 0})) {
    return error(ErrorCode::kOverlap, "workspace overlaps sorted_indices in memory");
  }
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
  const auto element_size = [](DataType d) -> int64_t {
    return d == DataType::kInt64 ? 8 : d == DataType::kFloat || d == DataType::kInt32 ? 4 : 2;
  };
  std::vector<int64_t> dims(view_dims, view_dims + num_dims);
  std::vector<int64_t> st(num_dims);
  for (uint64_t i = num_dims, run = 1; i-- > 0;) {
    st[i] = strides ? strides[i] : static_cast<int64_t>(run);
    run *= static_cast<uint64_t>(dims[i] > 0 ? dims[i] : 1);
  }
  auto* base = static_cast<char*>(data);
  if (base != nullptr) base += offset * element_size(dtype);
  return new Tensor(std::move(dims), std::move(st), dtype, base);
}

inline void DestroyTensor(const Tensor* tensor) {
  delete tensor;
}

inline Status MoeTokenPermuteGradGetWorkspaceSize(const Tensor* permuted_output_grad,
                                                  const Tensor* sorted_indices, int64_t num_topk,
                                                  bool padded_mode, Tensor* out,
                                                  uint64_t* workspace_size, Executor** executor) {
  if (executor == nullptr) {
    return detail::finish(detail::error(ErrorCode::kNullPointer, "executor is null"));
  }
  *executor = nullptr;
  if (workspace_size == nullptr) {
    return detail::finish(detail::error(ErrorCode::kNullPointer, "workspace_size is null"));
  }
  mpg::detail::Problem problem;
  if (mpg::Status s = detail::make_problem(permuted_output_grad, sorted_indices, num_topk,
                                           padded_mode, out, &problem);
      !s.ok()) {
    return detail::finish(s);
  }
  *workspace_size =
      mpg::detail::index_scratch_bytes(problem.mode, problem.num_indices, problem.grad.rows);
  *executor = new Executor(problem, *workspace_size);
  detail::LiveExecutors::instance().add(*executor);
  return detail::finish({});
}

inline Status MoeTokenPermuteGrad(void* workspace, uint64_t workspace_size, Executor* executor) {
  if (executor == nullptr) {
    return detail::finish(detail::error(ErrorCode::kNullPointer, "executor is null"));
  }
  if (!detail::LiveExecutors::instance().remove(executor)) {
    return detail::finish(detail::error(
        ErrorCode::kInvalidArgument,
        "executor was not returned by MoeTokenPermuteGradGetWorkspaceSize, or was already used "
        "(each executor runs once)"));
  }
  const std::unique_ptr<Executor> owned(executor);  // freed on every path from here
  if (workspace_size < owned->workspace_size() ||
      (workspace == nullptr && owned->workspace_size() > 0)) {
    return detail::finish(detail::error(
        ErrorCode::kWorkspaceTooSmall, "workspace ", workspace == nullptr ? "is null, " : "", "of ",
        workspace_size, " bytes is smaller than the ", owned->workspace_size(),
        " bytes MoeTokenPermuteGradGetWorkspaceSize asked for"));
  }
  if (mpg::Status s = detail::check_workspace(owned->problem(), workspace, owned->workspace_size());
      !s.ok()) {
    return detail::finish(s);
  }
  return detail::finish(
      mpg::detail::execute(owned->problem(), static_cast<uint8_t*>(workspace), Options{}));
}

// Why the last call on this thread failed; "" after a success.
inline const char* GetLastErrorMessage() {
  return detail::last_error().c_str();
}

}  // namespace mpg::aclnn
