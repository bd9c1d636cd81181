// mpg's host shim of aclnn/acl_meta.h: tensors, integer arrays, scalars and executors (see
// acl/acl_base.h for the shim as a whole). They wrap mpg::aclnn's descriptors; the aclnn* op
// functions (aclnnop/aclnn_<op>.h) forward to mpg::aclnn, the same code as mpg's two-phase API.
#ifndef MPG_ACL_HOST_ACLNN_ACL_META_H_
#define MPG_ACL_HOST_ACLNN_ACL_META_H_

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "acl/acl_base.h"
#include "mpg/aclnn.hpp"

using aclnnStatus = int32_t;

#ifndef ACLNN_SUCCESS
#define ACLNN_SUCCESS 0
#endif
#ifndef ACLNN_ERR_PARAM_NULLPTR
#define ACLNN_ERR_PARAM_NULLPTR 161001
#endif
#ifndef ACLNN_ERR_PARAM_INVALID
#define ACLNN_ERR_PARAM_INVALID 161002
#endif
static_assert(ACLNN_SUCCESS == mpg::kAclnnSuccess &&
                  ACLNN_ERR_PARAM_NULLPTR == mpg::kAclnnErrParamNullptr &&
                  ACLNN_ERR_PARAM_INVALID == mpg::kAclnnErrParamInvalid,
              "the shim's status codes are mpg's");
static_assert(
    static_cast<int32_t>(ACL_FLOAT) == static_cast<int32_t>(mpg::aclnn::DataType::kFloat) &&
        static_cast<int32_t>(ACL_FLOAT16) == static_cast<int32_t>(mpg::aclnn::DataType::kFloat16) &&
        static_cast<int32_t>(ACL_INT8) == static_cast<int32_t>(mpg::aclnn::DataType::kInt8) &&
        static_cast<int32_t>(ACL_INT32) == static_cast<int32_t>(mpg::aclnn::DataType::kInt32) &&
        static_cast<int32_t>(ACL_INT64) == static_cast<int32_t>(mpg::aclnn::DataType::kInt64) &&
        static_cast<int32_t>(ACL_BF16) == static_cast<int32_t>(mpg::aclnn::DataType::kBFloat16),
    "aclDataType values are passed to mpg::aclnn::DataType unchanged");

// A tensor as the device runtime describes it: a view (dims, strides, offset, in elements) on a
// storage (format, storage dims) at some data address. The ops compute on the view, through
// mpg::aclnn's descriptor; format and storage are what the shim checks before forwarding.
struct aclTensor {
  struct DestroyView {
    void operator()(const mpg::aclnn::Tensor* view) const { mpg::aclnn::DestroyTensor(view); }
  };
  std::unique_ptr<mpg::aclnn::Tensor, DestroyView> view;
  int64_t offset = 0;
  aclFormat format = ACL_FORMAT_ND;
  std::vector<int64_t> storage_dims;
};

// A single value of some dtype (the vendor's ops take some attributes as scalars).
struct aclScalar {
  aclDataType dtype = ACL_DT_UNDEFINED;
  std::vector<unsigned char> bytes;  // the value, copied
};

// Opaque here as in the vendor's headers: an aclIntArray* is an mpg::aclnn::IntArray* and an
// aclOpExecutor* an mpg::aclnn::Executor*, passed through unchanged so that mpg's own checks
// (for example, an executor already consumed) see the very pointer the program holds.
struct aclIntArray;
struct aclOpExecutor;

namespace mpg::acl_host::detail {

inline mpg::aclnn::Tensor* view_of(const aclTensor* tensor) {
  return tensor == nullptr ? nullptr : tensor->view.get();
}
inline const mpg::aclnn::IntArray* int_array_of(const aclIntArray* array) {
  return reinterpret_cast<const mpg::aclnn::IntArray*>(array);
}
inline aclOpExecutor* to_acl(mpg::aclnn::Executor* executor) {
  return reinterpret_cast<aclOpExecutor*>(executor);
}
inline mpg::aclnn::Executor* executor_of(aclOpExecutor* executor) {
  return reinterpret_cast<mpg::aclnn::Executor*>(executor);
}

inline std::string dims_string(const int64_t* dims, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}
inline std::string dims_string(const std::vector<int64_t>& dims) {
  return dims_string(dims.data(), dims.size());
}

// An op argument: its name in mpg's messages, and whether the op accepts null for it.
struct Argument {
  const char* name;
  const aclTensor* tensor;
  bool optional = false;
};

// What the host can compute on: format ND, and a view that lies inside its storage (the device
// would read or write past the buffer). Returns 161002 with a message naming the argument, or 0.
inline aclnnStatus check_host_tensor(const char* function, const Argument& a) {
  const aclTensor& t = *a.tensor;
  if (t.format != ACL_FORMAT_ND) {
    return fail(ACLNN_ERR_PARAM_INVALID, function,
                std::string(a.name) + " format = " + std::to_string(static_cast<int>(t.format)) +
                    ": only ACL_FORMAT_ND (2) is computed on the host");
  }
  int64_t storage = 1;
  for (const int64_t d : t.storage_dims) {
    if (d < 0 || __builtin_mul_overflow(storage, d, &storage)) {
      return fail(ACLNN_ERR_PARAM_INVALID, function,
                  std::string(a.name) + " storage dims " + dims_string(t.storage_dims) +
                      " must be >= 0 and their product must fit in int64");
    }
  }
  const std::vector<int64_t>& dims = t.view->dims();
  const std::vector<int64_t>& strides = t.view->strides();
  int64_t last = t.offset;  // the last element the view reaches
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] <= 0 || strides[i] < 0) return ACLNN_SUCCESS;  // empty, or the op refuses it
    int64_t step = 0;
    if (__builtin_mul_overflow(dims[i] - 1, strides[i], &step) ||
        __builtin_add_overflow(last, step, &last)) {
      last = INT64_MAX;
      break;
    }
  }
  if (last >= storage) {
    return fail(ACLNN_ERR_PARAM_INVALID, function,
                std::string(a.name) + " view (shape " + dims_string(dims) + ", strides " +
                    dims_string(strides) + ", offset " + std::to_string(t.offset) +
                    ") reaches element " + std::to_string(last) + ", outside its storage of " +
                    std::to_string(storage) + " elements (storage dims " +
                    dims_string(t.storage_dims) + ")");
  }
  return ACLNN_SUCCESS;
}

// The start of every phase one: the shim's own checks on the tensor arguments. A missing
// required argument or out-parameter is left to mpg, which reports it first (161001), as the
// device does.
inline aclnnStatus check_arguments(const char* function, std::initializer_list<Argument> arguments,
                                   const uint64_t* workspace_size, aclOpExecutor** executor) {
  if (executor != nullptr) *executor = nullptr;
  if (executor == nullptr || workspace_size == nullptr) return ACLNN_SUCCESS;
  for (const Argument& a : arguments) {
    if (a.tensor == nullptr && !a.optional) return ACLNN_SUCCESS;
  }
  for (const Argument& a : arguments) {
    if (a.tensor == nullptr) continue;
    if (const aclnnStatus s = check_host_tensor(function, a); s != ACLNN_SUCCESS) return s;
  }
  return ACLNN_SUCCESS;
}

// Passes mpg's status on and, on failure, records mpg's message for aclGetRecentErrMsg().
inline aclnnStatus forwarded(const char* function, aclnnStatus status) {
  if (status == ACLNN_SUCCESS) return status;
  return fail(status, function, mpg::aclnn::GetLastErrorMessage());
}

// Phase one of every op: the shim's checks, then mpg's phase one through `plan`, which takes
// the mpg::aclnn::Executor** to fill.
template <class Plan>
aclnnStatus plan(const char* function, std::initializer_list<Argument> arguments,
                 uint64_t* workspace_size, aclOpExecutor** executor, Plan&& plan) {
  if (const aclnnStatus s = check_arguments(function, arguments, workspace_size, executor);
      s != ACLNN_SUCCESS) {
    return s;
  }
  mpg::aclnn::Executor* planned = nullptr;
  const aclnnStatus s = plan(executor == nullptr ? nullptr : &planned);
  if (executor != nullptr) *executor = to_acl(planned);
  return forwarded(function, s);
}

inline size_t scalar_bytes(aclDataType dtype) {
  switch (dtype) {
    case ACL_INT8:
    case ACL_UINT8:
    case ACL_BOOL: return 1;
    case ACL_FLOAT16:
    case ACL_BF16:
    case ACL_INT16:
    case ACL_UINT16: return 2;
    case ACL_FLOAT:
    case ACL_INT32:
    case ACL_UINT32: return 4;
    case ACL_INT64:
    case ACL_UINT64:
    case ACL_DOUBLE:
    case ACL_COMPLEX64: return 8;
    case ACL_COMPLEX128: return 16;
    default: return 0;
  }
}

}  // namespace mpg::acl_host::detail

extern "C" {

// stride may be null (contiguous row-major). Returns nullptr for a descriptor mpg cannot hold
// (aclGetRecentErrMsg() says why). Format and storage are checked by the op that uses the tensor.
inline aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum,
                                  aclDataType dataType, const int64_t* stride, int64_t offset,
                                  aclFormat format, const int64_t* storageDims,
                                  uint64_t storageDimsNum, void* tensorData) {
  namespace shim = mpg::acl_host::detail;
  if (storageDims == nullptr && storageDimsNum > 0) {
    shim::fail(0, "aclCreateTensor", "storageDims is null");
    return nullptr;
  }
  if (storageDimsNum > 8) {
    shim::fail(0, "aclCreateTensor",
               "storageDimsNum = " + std::to_string(storageDimsNum) + " must be <= 8");
    return nullptr;
  }
  mpg::aclnn::Tensor* view =
      mpg::aclnn::CreateTensor(viewDims, viewDimsNum, static_cast<mpg::aclnn::DataType>(dataType),
                               stride, offset, tensorData);
  if (view == nullptr) {
    shim::fail(0, "aclCreateTensor", mpg::aclnn::GetLastErrorMessage());
    return nullptr;
  }
  auto* tensor = new (std::nothrow) aclTensor;
  if (tensor == nullptr) {
    mpg::aclnn::DestroyTensor(view);
    shim::fail(0, "aclCreateTensor", "out of memory");
    return nullptr;
  }
  tensor->view.reset(view);
  tensor->offset = offset;
  tensor->format = format;
  tensor->storage_dims.assign(storageDims, storageDims + storageDimsNum);
  return tensor;
}

inline aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
  delete tensor;
  return ACLNN_SUCCESS;
}

// The values are copied. Returns nullptr when value is null and size > 0.
inline aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  mpg::aclnn::IntArray* array = mpg::aclnn::CreateIntArray(value, size);
  if (array == nullptr) {
    mpg::acl_host::detail::fail(0, "aclCreateIntArray", mpg::aclnn::GetLastErrorMessage());
  }
  return reinterpret_cast<aclIntArray*>(array);
}

inline aclnnStatus aclDestroyIntArray(const aclIntArray* array) {
  mpg::aclnn::DestroyIntArray(mpg::acl_host::detail::int_array_of(array));
  return ACLNN_SUCCESS;
}

// The value is copied (as many bytes as dataType has). Returns nullptr when value is null or
// dataType has no fixed size.
inline aclScalar* aclCreateScalar(void* value, aclDataType dataType) {
  namespace shim = mpg::acl_host::detail;
  const size_t bytes = shim::scalar_bytes(dataType);
  if (value == nullptr || bytes == 0) {
    shim::fail(0, "aclCreateScalar",
               value == nullptr ? std::string("value is null")
                                : "dataType = " + std::to_string(static_cast<int>(dataType)) +
                                      " has no fixed size");
    return nullptr;
  }
  auto* scalar = new (std::nothrow) aclScalar;
  if (scalar == nullptr) return nullptr;
  scalar->dtype = dataType;
  scalar->bytes.resize(bytes);
  std::memcpy(scalar->bytes.data(), value, bytes);
  return scalar;
}

inline aclnnStatus aclDestroyScalar(const aclScalar* scalar) {
  delete scalar;
  return ACLNN_SUCCESS;
}

}  // extern "C"

#endif  // MPG_ACL_HOST_ACLNN_ACL_META_H_
