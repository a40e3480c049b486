// status.h — errors as values at module boundaries.
//
// `Status` carries a machine-readable code and a human message; `Result<T>` is either a T or a
// non-OK Status (a small stand-in for C++23 std::expected, which g++ 12 lacks).
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "feedguard/common/enum_names.h"

namespace feedguard {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // malformed input, out-of-range value
  kNotFound,         // pod, cgroup, file, object does not exist
  kAlreadyExists,
  kPermissionDenied,    // EACCES/EPERM; v1 cpuset not a subset of the parent
  kFailedPrecondition,  // the world is not in the state the operation needs (e.g. EBUSY)
  kUnavailable,         // transient: connection refused, server restarting
  kUnimplemented,       // the kernel or peer lacks a feature (e.g. no cpu.idle)
  kAborted,             // conflict (HTTP 409), retry after re-reading
  kDeadlineExceeded,
  kResourceExhausted,
  kInternal,
};

inline constexpr EnumNames<StatusCode, 12> kStatusCodeNames{
    {{StatusCode::kOk, "OK"},
     {StatusCode::kInvalidArgument, "InvalidArgument"},
     {StatusCode::kNotFound, "NotFound"},
     {StatusCode::kAlreadyExists, "AlreadyExists"},
     {StatusCode::kPermissionDenied, "PermissionDenied"},
     {StatusCode::kFailedPrecondition, "FailedPrecondition"},
     {StatusCode::kUnavailable, "Unavailable"},
     {StatusCode::kUnimplemented, "Unimplemented"},
     {StatusCode::kAborted, "Aborted"},
     {StatusCode::kDeadlineExceeded, "DeadlineExceeded"},
     {StatusCode::kResourceExhausted, "ResourceExhausted"},
     {StatusCode::kInternal, "Internal"}}};
static_assert(EnumTableComplete(kStatusCodeNames));

constexpr std::string_view StatusCodeName(StatusCode code) {
  return NameOf(kStatusCodeNames, code, "Unknown");
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const {
    return ok() ? "OK" : std::string(StatusCodeName(code_)) + ": " + message_;
  }
  // Returns a copy whose message is prefixed with `context: `.
  Status Annotate(std::string_view context) const {
    if (ok()) return *this;
    return Status(code_, std::string(context) + ": " + message_);
  }
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Result<T>: a value or an error. Construct from a T or from a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace feedguard

// Propagates a non-OK Status out of the enclosing function.
#define FG_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::feedguard::Status fg_status_ = (expr); \
    if (!fg_status_.ok()) return fg_status_; \
  } while (0)

#define FG_CONCAT_INNER_(a, b) a##b
#define FG_CONCAT_(a, b) FG_CONCAT_INNER_(a, b)
// FG_ASSIGN_OR_RETURN(auto x, ResultReturningCall());
#define FG_ASSIGN_OR_RETURN(lhs, rexpr)                                                         \
  auto FG_CONCAT_(fg_result_, __LINE__) = (rexpr);                                              \
  if (!FG_CONCAT_(fg_result_, __LINE__).ok()) return FG_CONCAT_(fg_result_, __LINE__).status(); \
  lhs = std::move(FG_CONCAT_(fg_result_, __LINE__)).value()
