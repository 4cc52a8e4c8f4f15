#pragma once
/// @file
/// The slot layout: what travels through a mailbox: a small header (the intrusive queue link, the type index and
/// the reply route) followed in the same pooled slot by the message, a plain struct.
///
/// Thread-safety: a message belongs to exactly one thread at a time; handing it over through a
/// mailbox publishes it (release/acquire on the mailbox word).

#include <cstdint>
#include <utility>

#include "courier/error.hpp"
#include "courier/pool.hpp"

namespace courier::detail {

struct pending_base;
class actor_base;

/// Type indices at and above this one are Courier's own: replies, errors and stop requests.
inline constexpr std::uint16_t first_system_type = 0xfff0;
inline constexpr std::uint16_t response_type = 0xfff0;
inline constexpr std::uint16_t error_response_type = 0xfff1;
inline constexpr std::uint16_t exit_type = 0xfff2;
inline constexpr std::uint16_t start_type = 0xfff3;       // queued at spawn only for actors with on_start()
inline constexpr std::uint16_t child_exit_type = 0xfff4;  // a linked child tells its parent it stopped

struct message_header {
  message_header* next;    // the mailbox's link; written before the publishing CAS
  pending_base* reply_to;  // set when the sender waits for a reply
  std::uint16_t type;      // index into the receiving actor's message list
  bool urgent = false;     // set by the mailbox's urgent lane (in the padding: no size cost)
};

template <class M>
struct message_slot : message_header {
  M value;

  template <class... Args>
  explicit message_slot(std::uint16_t type_index, pending_base* reply, Args&&... args)
      : message_header{nullptr, reply, type_index}, value{std::forward<Args>(args)...} {}
};

template <class M, class... Args>
message_slot<M>* make_message(std::uint16_t type_index, pending_base* reply, Args&&... args) {
  return pool::make<message_slot<M>>(type_index, reply, std::forward<Args>(args)...);
}

/// Carries a failed request's error back to the requesting actor.
struct error_slot : message_header {
  error err;
};

/// A stop request from the outside (system shutdown or `actor_ref::stop`). A reason with text
/// (`request_exit(error)`) lives on the heap, so the common code-only stop stays a small pooled
/// slot that allocates nothing.
struct exit_slot : message_header {
  errc reason{};
  error* reason_with_text = nullptr;  // owned; when set it is the reason and `reason` is unused

  exit_slot() = default;
  exit_slot(const exit_slot&) = delete;
  exit_slot& operator=(const exit_slot&) = delete;
  ~exit_slot() { delete reason_with_text; }
};

/// Runs the actor's on_start() before its first message.
struct start_slot : message_header {};

/// A linked child stopped. `child` stays valid while the parent's link holds it, which is until
/// the parent handles this message or stops.
struct child_exit_slot : message_header {
  actor_base* child;
  std::uint64_t id;
  error reason;
  std::uint16_t down_type;  // the parent's index of `down`, or no_down_type
};

}  // namespace courier::detail
