#pragma once
/// @file
/// Courier's one error model: `std::error_code` values in the "courier" category plus an optional
/// human-readable text (`courier::error`), and `result<T>` (result.hpp, E = courier::error) for calls
/// that either produce a value or fail.
///
/// The numbers of `courier::errc` are the runtime codes of the protocol (docs/protocol.md, section 9),
/// so an ERROR frame carries `static_cast<int>(e)` with no translation table. They never change once
/// released: add new codes at the end.
///
/// Thread-safety: courier_category() is an immutable singleton, safe anywhere; error is a value type.

#include <string>
#include <system_error>
#include <utility>

#include "courier/result.hpp"  // IWYU pragma: export

namespace courier {

/// Why an operation on an actor failed. The values are part of the wire protocol: never renumber.
enum class errc {
  no_such_service = 256,     ///< no actor offers the requested service (token) here
  handler_failed = 257,      ///< a handler threw; the text holds the exception's message
  no_such_context = 258,     ///< the request names a context that is not open
  request_timeout = 259,     ///< no reply arrived before the request's deadline (protocol: `timeout`)
  system_shutdown = 260,     ///< the actor system stopped the actor while shutting down (protocol: `shutting_down`)
  actor_stopped = 261,       ///< the target had stopped, or stopped before it replied
  would_deadlock = 262,      ///< a blocking call was made where it could never complete (on a worker)
  stopped_by_request = 263,  ///< the actor was asked to stop from the outside
  empty_reference = 264,     ///< the actor_ref refers to no actor (default-constructed, moved from or reset)
  broken_promise = 265,      ///< a deferred reply was dropped without being fulfilled
  mailbox_full = 266,        ///< the target's mailbox is at its capacity
  name_not_found = 267,      ///< no actor is registered under the name
  interface_mismatch = 268,  ///< the actor does not implement the interface asked for
  name_taken = 269,          ///< another actor is already registered under the name
  invalid_argument = 270,    ///< an argument is outside what the call accepts
  parent_stopped = 271,      ///< the actor was stopped because its parent stopped
  connection_lost = 272,     ///< the connection to a remote peer closed, broke, or its server process exited
  protocol_error = 273,      ///< the remote peer broke the wire protocol (the text names the wire error)
  too_many_contexts = 274,   ///< a child context past the peer's limit of open children
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

/// What result<T>::value() throws for this error: a std::system_error with its code, whose what()
/// holds the text and the code's message. result.hpp finds it by argument-dependent lookup.
[[noreturn]] void throw_result_error(const error& e);

}  // namespace courier

template <>
struct std::is_error_code_enum<courier::errc> : std::true_type {};
