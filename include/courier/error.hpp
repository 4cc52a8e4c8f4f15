#pragma once
/// @file
/// Courier's one error model: `std::error_code` values in the "courier" category plus an
/// optional human-readable text, and `result<T>` for calls that either produce a value or fail.

#include <optional>
#include <string>
#include <system_error>
#include <utility>

namespace courier {

/// Why an operation on an actor failed.
enum class errc {
  actor_stopped = 1,  ///< the target had stopped, or stopped before it replied
  request_timeout,    ///< no reply arrived before the request's deadline
  handler_failed,     ///< a handler threw; the text holds the exception's message
  would_deadlock,     ///< a blocking call was made where it could never complete (on a worker)
  system_shutdown,    ///< the actor system stopped the actor while shutting down
  stopped_by_request, ///< the actor was asked to stop from the outside
  empty_reference,    ///< the actor_ref refers to no actor (default-constructed, moved from or reset)
  mailbox_full = 266, ///< the target's bounded mailbox was at capacity
};

/// The "courier" error category. Thread-safe: a stateless singleton.
const std::error_category& courier_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), courier_category()}; }

/// An error code with the text that explains this occurrence (for example a handler's exception
/// message). Copying it allocates only when the text is long; errors are off the hot path.
struct error {
  std::error_code code;
  std::string text;

  error() = default;
  error(errc e, std::string why = {}) : code(make_error_code(e)), text(std::move(why)) {}
  error(std::error_code c, std::string why = {}) : code(c), text(std::move(why)) {}

  /// "courier: actor stopped (while handling add)" style text for logs and test output.
  std::string describe() const;

  explicit operator bool() const noexcept { return static_cast<bool>(code); }
  friend bool operator==(const error& e, errc c) noexcept { return e.code == make_error_code(c); }
};

/// Either a value or an error; what `ask` returns. Not thread-safe (a plain value type).
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : value_(std::move(value)) {}
  result(error err) : error_(std::move(err)) {}

  bool has_value() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T* operator->() { return &*value_; }
  const error& err() const noexcept { return error_; }

 private:
  std::optional<T> value_;
  error error_;
};

/// The reply of a handler that returns nothing.
struct unit {
  friend bool operator==(unit, unit) noexcept { return true; }
};

template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(unit) {}
  result(error err) : error_(std::move(err)) {}
  bool has_value() const noexcept { return !error_; }
  explicit operator bool() const noexcept { return has_value(); }
  const error& err() const noexcept { return error_; }

 private:
  error error_;
};

}  // namespace courier

template <>
struct std::is_error_code_enum<courier::errc> : std::true_type {};
