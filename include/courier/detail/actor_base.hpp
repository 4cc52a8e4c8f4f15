#pragma once
/// @file
/// The part of every actor that does not depend on its message list: `actor_base` (identity,
/// reference count, mailbox, watcher list), the links between actors, and the compile-time checks
/// that name the actor and the message when a send does not type-check. Both actor.hpp (which
/// derives `actor<>` from it) and actor_ref.hpp (which only needs to enqueue into it) include
/// this header; neither includes the other for it. Out-of-line parts live in src/core/actor.cpp.
///
/// Thread-safety: the enqueue functions, add_ref/release, request_exit, queued, add_monitor and
/// has_stopped are safe from any thread; everything else runs on the actor's own thread.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "courier/detail/assert.hpp"
#include "courier/detail/mailbox.hpp"
#include "courier/detail/message.hpp"
#include "courier/detail/pending.hpp"
#include "courier/detail/runtime.hpp"
#include "courier/detail/type_list.hpp"
#include "courier/interface.hpp"
#include "courier/response_promise.hpp"
#include "courier/system_messages.hpp"
#include "courier/timer.hpp"

namespace courier {

template <class T>
class actor_ref;
class system;

namespace detail {

enum class resume_result : std::uint8_t { idle, reschedule, stopped };

/// What a plain thread needs to run an actor that waits on a descriptor (the network layer's client
/// connection): such an actor opts in with a `static constexpr courier::detail::drive_ops
/// courier_drive_ops` member, and then
/// - a plain thread whose request woke it runs its turn itself instead of waking a worker for it
///   (woken_by_push: one turn, bounded by config::throughput; what is left goes to the workers);
///   a one-way send still wakes a worker, so that a flood of sends is written in batches;
/// - a plain thread's `ask` drives it while it waits (drive_while_waiting): it keeps the actor
///   *held* between turns, waits on its descriptor and on its signal descriptor itself, and runs
///   the turns they call for, until its reply came or its deadline passed.
/// The functions are called only by the thread that holds or runs the actor, except `signal`.
struct drive_ops {
  /// What a driver waits on: the actor's descriptor (-1 once there is no more to read on it: a
  /// stream that has ended, or none) and the one a push that finds the actor held makes readable
  /// (-1: none could be made, and the actor cannot be driven).
  struct descriptors {
    int reading = -1;
    int signal = -1;
  };
  /// Takes the descriptor from the poller, so that no worker wakes for it, and says what to wait
  /// on; asked again before each wait.
  descriptors (*hold)(actor_base* self) noexcept;
  /// The descriptor turned readable: queue what the poller would have queued.
  void (*readable)(actor_base* self) noexcept;
  /// Gives the descriptor back to the poller (which reports what arrived meanwhile).
  void (*release)(actor_base* self) noexcept;
  /// From a pusher that got woke_holder (any thread): makes the signal descriptor readable.
  void (*signal)(actor_base* self) noexcept;
};

template <class T>
constexpr const drive_ops* drive_ops_of() noexcept {
  if constexpr (requires { T::courier_drive_ops; })
    return &T::courier_drive_ops;
  else
    return nullptr;
}

/// True on a plain thread (not a worker, not inside a handler) of a threaded system that is not
/// shutting down: where a drivable actor may be run by the thread whose push woke it.
bool may_run_here(const system_core* core) noexcept;
/// A send or request (`request`: a reply is awaited) on this thread woke `actor`: runs it here
/// (the local call path, or a plain thread's request to a drivable actor: one turn, and what is
/// left goes to the workers) or schedules it. A request runs at once on a plain thread, whose
/// caller waits for the answer; a one-way send is left to a worker, so that a flood of them
/// leaves in batches rather than a write each.
void woken_by_push(actor_base* actor, bool request);
/// A push found `actor` held by a driver: signals it.
void wake_holder(actor_base* actor) noexcept;

/// The local call path: while an actor's handler has named `actor` here (inline_call_scope), a
/// push from this thread that wakes `actor` (idle, nothing queued) runs one message of it at once,
/// nested in the handler, instead of scheduling it (the server connection calling the actor it
/// serves: the call's handler, its reply and the reply's encoding happen in one turn).
inline thread_local actor_base* inline_call_target = nullptr;
/// Runs one message of `actor`, whose push on this thread woke it, inside the current handler.
void run_nested(actor_base* actor);

struct actor_ops {
  /// Runs up to `budget` messages; adds how many it ran (system messages included) to `ran`.
  resume_result (*resume)(actor_base* self, std::uint32_t budget, std::uint32_t& ran);
  /// Destroys a user message that will never be handled and fails its request, if any.
  void (*discard)(message_header* msg, const error& why) noexcept;
  void (*destroy)(actor_base* self) noexcept;
  const char* (*name)() noexcept;
  /// The type name of the message with this index in the actor's list (for dead letters).
  const char* (*message_name)(std::uint16_t type) noexcept;
  /// Null unless a plain thread may run and drive the actor (see drive_ops).
  const drive_ops* drive = nullptr;
};

/// What a stopping actor does for one entry of its watcher list.
enum class link_kind : std::uint8_t {
  monitor,        ///< send `down` (type `down_type`) to the watcher
  notify_parent,  ///< the watcher is this linked child's parent: send it a child_exit message
  stop_child,     ///< the watcher is a linked child of this actor: stop it with parent_stopped
};

/// `down_type` of a parent that does not accept `courier::down`.
inline constexpr std::uint16_t no_down_type = 0xffff;

/// A watcher's registration on the actor it monitors (or one side of a parent-child link). The
/// list is pushed to by any thread (CAS on the head) and only unlinked by its owner's thread.
struct monitor_link {
  monitor_link* next;
  actor_base* watcher;  // strong reference
  std::uint16_t down_type;
  link_kind kind = link_kind::monitor;
};

/// What producers read next to the mailbox word: set at spawn, then read-mostly.
struct actor_identity {
  system_core* core = nullptr;
  const actor_ops* ops = nullptr;
  std::uint64_t id = 0;
  actor_base* registry_prev = nullptr;  // guarded by the system's registry mutex
  actor_base* registry_next = nullptr;
  std::atomic<std::uint32_t> refs{1};  // the first reference keeps a running actor alive
};

struct stop_context;

/// The part of every actor that does not depend on its message list. Allocated 64-byte aligned
/// so that the mailbox's two halves land on separate cache lines.
class actor_base {
 public:
  actor_base(const actor_base&) = delete;
  actor_base& operator=(const actor_base&) = delete;

  std::uint64_t id() const noexcept { return mailbox_.shared.id; }
  const char* name() const noexcept { return mailbox_.shared.ops->name(); }
  system_core* core() const noexcept { return mailbox_.shared.core; }

  void add_ref() noexcept { mailbox_.shared.refs.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (mailbox_.shared.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) mailbox_.shared.ops->destroy(this);
  }

  /// Normal lane, never refused for capacity (a graceful stop request, a delayed message):
  /// enqueues and schedules; on a closed mailbox returns false and leaves `msg` to the caller.
  bool enqueue(message_header* msg) noexcept {
    if (this == current_actor && stop_requested_) return false;
    return scheduled(mailbox_.push(msg));
  }

  /// Normal lane for sends and requests: `queued` (scheduled if need be), `full` (a bounded
  /// mailbox at capacity) or `closed`; unless queued, `msg` stays the caller's.
  push_result try_enqueue(message_header* msg) noexcept {
    if (this == current_actor) {  // a message to itself from its own handler: no atomics
      if (stop_requested_) return push_result::closed;
      return mailbox_.push_local(msg);
    }
    const bool request = msg->reply_to != nullptr;
    const push_result r = mailbox_.try_push(msg);
    if (r == push_result::woke_reader) [[unlikely]] {
      woken_by_push(this, request);
      return push_result::queued;
    }
    if (r == push_result::woke_holder) [[unlikely]] {
      wake_holder(this);
      return push_result::queued;
    }
    return r;
  }

  /// For a plain thread's `ask`: try_enqueue, except that a push that woke the actor (woke_reader)
  /// leaves it to the caller, which drives it (drive_while_waiting) or schedules it.
  push_result try_enqueue_for_wait(message_header* msg) noexcept {
    push_result r = mailbox_.try_push(msg);
    if (r == push_result::woke_holder) {
      wake_holder(this);
      return push_result::queued;
    }
    return r;
  }

  /// Whether a plain thread may run and drive this actor (see drive_ops).
  bool drivable() const noexcept { return mailbox_.shared.ops->drive != nullptr; }
  /// For its driver, which holds it: see mailbox::take_hold and mailbox::release_hold.
  void take_hold() noexcept { mailbox_.take_hold(); }
  bool release_hold() noexcept { return mailbox_.release_hold(); }

  /// Urgent lane (replies, stop requests, down): served before anything queued and never
  /// refused for capacity. False (leaving `msg` to the caller) when the actor has stopped.
  bool enqueue_urgent(message_header* msg) noexcept {
    if (this == current_actor && stop_requested_) return false;
    return scheduled(mailbox_.push_urgent(msg));
  }

  resume_result resume(std::uint32_t budget, std::uint32_t& ran) {
    return mailbox_.shared.ops->resume(this, budget, ran);
  }
  resume_result resume(std::uint32_t budget) {
    std::uint32_t ran = 0;
    return resume(budget, ran);
  }

  /// Asks the actor to stop. Graceful (`urgent` false): behind the messages already queued.
  /// Urgent: after the message being handled; what is queued is then dropped (dead letters,
  /// failed requests). A stopped actor ignores it. Its monitors see `down` with `reason` (as its
  /// code, no text) unless the actor had a reason of its own already: the first one wins.
  /// Allocates nothing beyond the pooled message.
  void request_exit(errc reason, bool urgent = false) {
    auto* slot = pool::make<exit_slot>();
    slot->type = exit_type;
    slot->reply_to = nullptr;
    slot->reason = reason;
    if (!(urgent ? enqueue_urgent(slot) : enqueue(slot))) pool::destroy(slot);
  }
  /// The same with a reason that carries text, e.g. `{errc::connection_lost, "the peer closed
  /// the connection"}`: monitors (and a linked parent) see both. Allocates the reason's copy. An
  /// empty reason (no code) stops the actor as a normal stop does. Any thread, as the errc form.
  void request_exit(error reason, bool urgent = false) {
    auto* kept = new error(std::move(reason));
    exit_slot* slot;
    try {
      slot = pool::make<exit_slot>();
    } catch (...) {
      delete kept;
      throw;
    }
    slot->type = exit_type;
    slot->reply_to = nullptr;
    slot->reason_with_text = kept;
    if (!(urgent ? enqueue_urgent(slot) : enqueue(slot))) pool::destroy(slot);
  }

  /// Messages waiting in the normal lane; see mailbox::queued for how approximate. Any thread.
  std::size_t queued() const noexcept { return mailbox_.queued(); }
  std::size_t mailbox_capacity() const noexcept { return mailbox_.capacity(); }
  /// Whether the actor refuses sends for now (see refuse_sends). Any thread.
  bool refusing_sends() const noexcept { return mailbox_.refusing(); }

  /// Adds `link` to the watchers told when this actor stops; false if it already has.
  bool add_monitor(monitor_link* link) noexcept;

  /// Copies the reason this actor stopped with; valid once it has stopped.
  error exit_reason() const;

  /// What a request fails with when this actor's mailbox refused it because the actor had
  /// stopped (any thread, right after the refusal): see stopped_error.
  error refused_request_error(const stop_context& context) const;
  error refused_request_error() const;

  /// True once the actor has stopped (its monitors have been told). Thread-safe.
  bool has_stopped() const noexcept;

  /// Links a just-built `child` (not yet started) to this running parent: the child stops with
  /// parent_stopped when this actor stops; this actor is told when the child stops (see
  /// handle_child_exit). `down_type` is this actor's index of `down`, or no_down_type.
  void link_child(actor_base* child, std::uint16_t down_type);

  actor_identity& identity() noexcept { return mailbox_.shared; }

 protected:
  actor_base() noexcept = default;
  ~actor_base() { delete exit_reason_; }

  /// From the actor's own thread, for a bounded mailbox (an unbounded one cannot refuse; this
  /// does nothing there): while on, every send and request that a full mailbox would refuse is
  /// refused as by a full one, whatever the count (`send` returns false and reports a dead letter
  /// with mailbox_full, `try_send` returns full, a request fails at once with errc::mailbox_full);
  /// stop requests, replies, `down`, timers' ticks and delayed sends still arrive. For an actor
  /// that cannot take more work for now, such as a connection whose output is backed up.
  void refuse_sends(bool on) noexcept { mailbox_.set_refusing(on); }

  /// Replies, failed requests and stop requests: the messages every actor accepts.
  void handle_system(message_header* msg);
  /// Drops the link to a stopped child and reports its exit: `down` when this actor accepts it,
  /// else an abnormal exit stops this actor with the child's reason.
  void handle_child_exit(child_exit_slot* slot);
  /// Tells the parent on the other end of `link` that this actor stopped (from terminate).
  void notify_parent(monitor_link* link, const error& reason);
  /// Removes this actor's link to `child` (this actor's thread only) and drops its reference.
  void unlink_child(actor_base* child) noexcept;
  static void discard_system(message_header* msg) noexcept;

  /// Closes the mailbox, fails what was queued, tells the monitors and leaves the registry. The
  /// caller then drops the actor's own reference, which may free it.
  void terminate(const error& reason) noexcept;

  bool scheduled(push_result r) noexcept {
    if (r == push_result::woke_reader)
      schedule(this);
    else if (r == push_result::woke_holder)
      wake_holder(this);
    return r != push_result::closed;
  }

  template <class Derived, class... Msgs>
  friend class actor_impl_access;
  template <class T>
  friend class courier::actor_ref;
  friend class courier::system;
  friend class system_core;
  friend class timer_service;
  friend void register_actor(system_core*, actor_base*);

  // First cache line: the producers' word plus identity fields that are written rarely.
  // Second line: the consumer's cursor and the fields below, then the derived actor's state.
  // no_unique_address lets stop_requested_ sit in the mailbox's tail padding (Itanium ABI).
  [[no_unique_address]] mailbox<actor_identity> mailbox_;
  bool stop_requested_ = false;
  std::atomic<monitor_link*> monitors_{nullptr};
  error* exit_reason_ = nullptr;  // set (only when abnormal) before monitors_ is closed
};

// An actor with one pointer of state fits a 128-byte pool slot (W4's memory per actor).
static_assert(sizeof(actor_base) <= 112, "courier: actor_base grew past its cache-line budget");

/// A stopped actor's monitor list holds this marker: later monitors get `down` at once.
inline monitor_link* const monitors_closed = reinterpret_cast<monitor_link*>(std::uintptr_t{1});

inline bool actor_base::has_stopped() const noexcept {
  return monitors_.load(std::memory_order_acquire) == monitors_closed;
}

/// When a message met its target stopped, in words: `alone` is the whole text after a normal
/// stop; after a stop with a reason, the reason comes first and `then` follows it, so that the
/// text names one cause, once ("the connection was closed in order; the request was not sent").
struct stop_context {
  const char* alone;
  const char* then;
};
inline constexpr stop_context request_refused{"the target had stopped before the request was sent",
                                              "the request was not sent"};
inline constexpr stop_context message_dropped{"the actor stopped before handling the message",
                                              "the message was not handled"};
inline constexpr stop_context delegate_refused{"the delegate target had stopped", "the request was not delegated"};

/// What a request fails with because its target stopped with `reason`, `context` saying when:
/// errc::actor_stopped with context.alone after a normal stop (no reason), else the reason's
/// code with "<reason's text, or its code's message>; <context.then>", so that a requester
/// learns why (connection_lost and what the connection saw, not only that the actor is gone).
error stopped_error(const error* reason, const stop_context& context);

/// The system that owns `core`; valid while that system exists.
courier::system* system_of(const system_core* core) noexcept;

/// Detects the optional start hook (public, or reachable by befriending courier::actor).
template <class T>
concept has_on_start = requires(T& t) {
  t.on_start();
};
template <class T>
concept has_on_turn_end = requires(T& t) {
  t.on_turn_end();
};
/// An actor with on_turn_end that also ends its turn where a batch taken from its mailbox is used
/// up (`static constexpr bool courier_turn_end_per_batch = true;`): its hook runs before each new
/// batch is taken from other threads, so they have pushed more by then (see net/detail/connection.hpp: a
/// connection writes there, and a flood of sends is taken in batches of up to
/// config::throughput). Messages its handlers sent to their own actor are handled first: they
/// belong to what was handled (a connection's handler that pushes to its peer before its reply
/// is written must have the push written with it, before anyone who saw the reply can answer).
template <class T>
concept ends_turn_per_batch = has_on_turn_end<T> && requires {
  requires T::courier_turn_end_per_batch;
};

/// The message that runs an actor's on_start().
inline start_slot* make_start_slot() {
  auto* slot = pool::make<start_slot>();
  slot->type = start_type;
  slot->reply_to = nullptr;
  return slot;
}

/// Queues the start message of an actor with on_start(); called once, at spawn.
inline void queue_start(actor_base* a) {
  auto* slot = make_start_slot();
  if (!a->enqueue(slot)) pool::destroy(slot);
}

/// queue_start for an actor whose spawner runs it: a new actor's first push wakes it, and that
/// right to run it stays with the caller instead of going to a worker.
inline void queue_start_for_caller(actor_base* a) {
  auto* slot = make_start_slot();
  const push_result r = a->try_enqueue_for_wait(slot);
  if (r != push_result::woke_reader && r != push_result::queued) pool::destroy(slot);
}

/// Names the actor and the message in the compiler's "required from" trail when a send does not
/// type-check, e.g. `courier::detail::actor_does_not_accept<counter, reset>`.
template <class Actor, class Message>
struct actor_does_not_accept {
  static_assert(sizeof(Actor*) == 0,
                "courier: this actor does not accept this message type; add it to the actor's message list "
                "(see actor_does_not_accept<Actor, Message> in the instantiation trail above)");
};

/// The same for a send through an interface ref, e.g. `interface_does_not_declare<counter_api, reset>`.
template <class Interface, class Message>
struct interface_does_not_declare {
  static_assert(sizeof(Interface*) == 0,
                "courier: this interface does not declare this message type; add `Reply(Message)` to it "
                "(see interface_does_not_declare<Interface, Message> in the instantiation trail above)");
};

template <class Actor, class Message>
constexpr bool check_accepts() {
  if constexpr (Actor::template accepts<Message>) {
    return true;
  } else if constexpr (is_interface<Actor>) {
    (void)interface_does_not_declare<Actor, Message>{};
    return false;
  } else {
    (void)actor_does_not_accept<Actor, Message>{};
    return false;
  }
}

/// Names the actor and the message when a declared message has no `on(const Message&)` handler.
template <class Actor, class Message>
struct actor_has_no_handler_for {
  static_assert(sizeof(Actor*) == 0,
                "courier: the actor declares this message type but has no handler `on(const Message&)` for it "
                "(see actor_has_no_handler_for<Actor, Message> in the instantiation trail above)");
};

template <class Actor, class Message>
constexpr bool check_handler() {
  if constexpr (requires(Actor & a, Message & m) { a.on(m); }) {
    return true;
  } else {
    (void)actor_has_no_handler_for<Actor, Message>{};
    return false;
  }
}

template <class R>
inline constexpr bool is_deferred_reply = false;
template <class R>
inline constexpr bool is_deferred_reply<response_promise<R>> = true;
template <class R>
inline constexpr bool is_deferred_reply<delegated<R>> = true;

/// Sets `current_request` around a deferring handler, and clears it even when the handler throws.
struct current_request_scope {
  explicit current_request_scope(message_header* m) noexcept { current_request = m; }
  ~current_request_scope() { current_request = nullptr; }
};

/// Names `target` for the local call path (inline_call_target) for the scope's life, when it is
/// in the same system as the running actor.
struct inline_call_scope {
  actor_base* previous;
  explicit inline_call_scope(actor_base* target) noexcept : previous(inline_call_target) {
    if (target != nullptr && current_actor != nullptr && target->core() == current_actor->core())
      inline_call_target = target;
  }
  ~inline_call_scope() { inline_call_target = previous; }
};

template <class M>
const char* type_name_of() noexcept {
  return typeid(M).name();
}

/// Actors are allocated at least 64-byte aligned (see actor_base), more if the type asks for it.
template <class T>
inline constexpr std::size_t actor_alignment = alignof(T) > pool::max_alignment ? alignof(T) : pool::max_alignment;

struct current_actor_scope {
  actor_base* previous;
  explicit current_actor_scope(actor_base* a) noexcept : previous(current_actor) { current_actor = a; }
  ~current_actor_scope() { current_actor = previous; }
};

/// Hands a reply to its requesting actor (urgent lane); false when that actor has stopped.
inline bool deliver_to(actor_base* actor, message_header* msg) noexcept { return actor->enqueue_urgent(msg); }
inline void release_actor(actor_base* actor) noexcept { actor->release(); }
inline bool actor_has_stopped(const actor_base* actor) noexcept { return actor->has_stopped(); }

}  // namespace detail
}  // namespace courier
