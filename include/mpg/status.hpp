// mpg: the outcome of a call. Caller errors are values, never exceptions or aborts.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

namespace mpg {

// Each kind of caller error the library detects. The two-phase API folds them into the
// vendor's two codes with to_aclnn_status():
//   kNullPointer                        -> 161001 (ACLNN_ERR_PARAM_NULLPTR)
//   every other error                   -> 161002 (ACLNN_ERR_PARAM_INVALID)
enum class ErrorCode : int32_t {
  kOk = 0,
  kNullPointer,        // a required tensor, data pointer, out-parameter or executor is null
  kUnsupportedDtype,   // element dtype not float32/float16/bfloat16, index dtype not int32/int64
  kDtypeMismatch,      // permuted_output_grad and out dtypes differ
  kInvalidArgument,    // num_topk < 1, unsupported layout or option value
  kShapeMismatch,      // wrong rank, len(S) % K != 0, out not [N, H], H differs, R > N*K
  kIndexOutOfRange,    // an S value outside the mode's range (includes -1 in dropless mode)
  kDuplicateIndex,     // an S value that appears twice
  kOverlap,            // out shares memory with permuted_output_grad or sorted_indices
  kWorkspaceTooSmall,  // workspace smaller than asked for, or null with a non-zero size
  kUnsupportedIsa,     // a forced SIMD path the CPU (or this build) does not have
};

constexpr const char* name_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kNullPointer: return "null pointer";
    case ErrorCode::kUnsupportedDtype: return "unsupported dtype";
    case ErrorCode::kDtypeMismatch: return "dtype mismatch";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kShapeMismatch: return "shape mismatch";
    case ErrorCode::kIndexOutOfRange: return "index out of range";
    case ErrorCode::kDuplicateIndex: return "duplicate index";
    case ErrorCode::kOverlap: return "overlap";
    case ErrorCode::kWorkspaceTooSmall: return "workspace too small";
    case ErrorCode::kUnsupportedIsa: return "unsupported ISA";
  }
  return "unknown";
}

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  // Names the argument, the rule broken, and the offending value and position; "" when ok.
  const std::string& message() const { return message_; }
  // "ok", or the code's name and the message: "index out of range: sorted_indices[3] = 9 ...".
  std::string to_string() const {
    if (ok()) return name_of(code_);
    return std::string(name_of(code_)) + ": " + message_;
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& status) {
  return os << status.to_string();
}

inline constexpr int32_t kAclnnSuccess = 0;
inline constexpr int32_t kAclnnErrParamNullptr = 161001;
inline constexpr int32_t kAclnnErrParamInvalid = 161002;

constexpr int32_t to_aclnn_status(ErrorCode code) {
  if (code == ErrorCode::kOk) return kAclnnSuccess;
  return code == ErrorCode::kNullPointer ? kAclnnErrParamNullptr : kAclnnErrParamInvalid;
}

}  // namespace mpg
