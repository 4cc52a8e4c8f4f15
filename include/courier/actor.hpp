#pragma once
/// @file
/// Typed actors: `class counter : public courier::actor<counter, add, get>` with handlers
/// `void on(const add&)` and `int on(const get&)` (a return value is the reply).
///
/// Dispatch is a switch over the message's compile-time index in the actor's list: no virtual
/// call, map look-up or type-erased box per message. The runtime resumes an actor through one
/// function pointer per batch, never per message.
///
/// Optional hooks, found at compile time (declare them public): `void on_start()` runs on the
/// actor's thread before its first message and may send and spawn (a constructor must not send:
/// the actor's reference does not exist yet); `void on_stop()` runs when it stops. Actors without
/// on_start pay nothing for it.
///
/// Thread-safety: an actor's handlers run on one thread at a time (the actor's own); its state
/// needs no locks. Other threads interact with it only through `actor_ref`.

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
#include "courier/detail/runtime.hpp"
#include "courier/detail/pending.hpp"
#include "courier/detail/type_list.hpp"
#include "courier/interface.hpp"
#include "courier/detail/mailbox.hpp"
#include "courier/detail/message.hpp"
#include "courier/response_promise.hpp"
#include "courier/system_messages.hpp"
#include "courier/timer.hpp"

namespace courier {

template <class T>
class actor_ref;
class system;

namespace detail {

enum class resume_result : std::uint8_t { idle, reschedule, stopped };

struct actor_ops {
  resume_result (*resume)(actor_base* self, std::uint32_t budget);
  /// Destroys a user message that will never be handled and fails its request, if any.
  void (*discard)(message_header* msg, const error& why) noexcept;
  void (*destroy)(actor_base* self) noexcept;
  const char* (*name)() noexcept;
  /// The type name of the message with this index in the actor's list (for dead letters).
  const char* (*message_name)(std::uint16_t type) noexcept;
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
    push_result r = mailbox_.try_push(msg);
    if (r == push_result::woke_reader) {
      schedule(this);
      return push_result::queued;
    }
    return r;
  }

  /// Urgent lane (replies, stop requests, down): served before anything queued and never
  /// refused for capacity. False (leaving `msg` to the caller) when the actor has stopped.
  bool enqueue_urgent(message_header* msg) noexcept {
    if (this == current_actor && stop_requested_) return false;
    return scheduled(mailbox_.push_urgent(msg));
  }

  resume_result resume(std::uint32_t budget) { return mailbox_.shared.ops->resume(this, budget); }

  /// Asks the actor to stop. Graceful (`urgent` false): behind the messages already queued.
  /// Urgent: after the message being handled; what is queued is then dropped (dead letters,
  /// failed requests). A stopped actor ignores it.
  void request_exit(errc reason, bool urgent = false) {
    auto* slot = pool::make<exit_slot>();
    slot->type = exit_type;
    slot->reply_to = nullptr;
    slot->reason = reason;
    if (!(urgent ? enqueue_urgent(slot) : enqueue(slot))) pool::destroy(slot);
  }

  /// Messages waiting in the normal lane; see mailbox::queued for how approximate. Any thread.
  std::size_t queued() const noexcept { return mailbox_.queued(); }
  std::size_t mailbox_capacity() const noexcept { return mailbox_.capacity(); }

  /// Adds `link` to the watchers told when this actor stops; false if it already has.
  bool add_monitor(monitor_link* link) noexcept;

  /// Copies the reason this actor stopped with; valid once it has stopped.
  error exit_reason() const;

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
    if (r == push_result::woke_reader) schedule(this);
    return r != push_result::closed;
  }

  template <class Derived, class... Msgs>
  friend class actor_impl_access;
  template <class T>
  friend class courier::actor_ref;
  friend class courier::system;
  friend class system_core;
  friend class timer_service;
  friend bool register_actor(system_core*, actor_base*);

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

/// The system that owns `core`; valid while that system exists.
courier::system* system_of(const system_core* core) noexcept;

/// Detects the optional start hook (public, or reachable by befriending courier::actor).
template <class T>
concept has_on_start = requires(T& t) { t.on_start(); };

/// Queues the start message of an actor with on_start(); called once, at spawn.
inline void queue_start(actor_base* a) {
  auto* slot = pool::make<start_slot>();
  slot->type = start_type;
  slot->reply_to = nullptr;
  if (!a->enqueue(slot)) pool::destroy(slot);
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
  if constexpr (requires(Actor& a, Message& m) { a.on(m); }) {
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

}  // namespace detail

/// Base of every actor. `Derived` handles each of `Msgs...` with a member `on(const M&)`; the
/// return type is the reply type for requests (void replies with `unit`).
template <class Derived, class... Msgs>
class actor : public detail::actor_base {
  static_assert(sizeof...(Msgs) > 0, "courier: an actor accepts at least one message type");
  static_assert(sizeof...(Msgs) < detail::first_system_type, "courier: too many message types");
  static_assert(detail::all_distinct<Msgs...>(), "courier: an actor's message list names a type twice");

 public:
  using message_types = detail::type_list<Msgs...>;

  template <class M>
  static constexpr bool accepts = detail::index_of<M, Msgs...>() < sizeof...(Msgs);

  template <class M>
  static constexpr std::uint16_t type_index = static_cast<std::uint16_t>(detail::index_of<M, Msgs...>());

 protected:
  actor() noexcept { mailbox_.shared.ops = &ops; }

  /// A reference to this actor (no reference count traffic).
  const actor_ref<Derived>& self() const noexcept { return self_; }

  /// Stops this actor after the current message; queued messages are discarded (their requests
  /// fail with actor_stopped) and monitors receive `down` with no error.
  void stop() noexcept {
    COURIER_ASSERT(detail::current_actor == this, "actor::stop() is for the actor's own handlers; use ref.stop()");
    stop_requested_ = true;
  }

  /// Delivers `courier::down` to this actor when `target` stops (at once if it already has).
  template <class T>
  void monitor(const actor_ref<T>& target);

  /// Takes over the reply of the request being handled, to answer it later (see
  /// response_promise.hpp). Call it from a handler that returns `response_promise<R>`; for a one-way
  /// message, outside such a handler, or when called twice for one request, the promise is empty.
  template <class R>
  response_promise<R> make_response_promise() noexcept {
    COURIER_ASSERT(detail::current_actor == this, "make_response_promise() is for the actor's own handlers");
    return response_promise<R>::adopt(detail::take_current_reply());
  }

  /// Forwards `msg` to `target` with the current request's reply route: `target`'s reply (or
  /// failure) goes straight to the original requester. From a handler that returns `delegated<R>`;
  /// elsewhere (or for a one-way message) it is a plain send. If `target` has stopped, the original
  /// request fails with errc::actor_stopped (a one-way message is a dead letter).
  template <class T, class M>
  delegated<reply_type_t<T, std::remove_cvref_t<M>>> delegate(const actor_ref<T>& target, M&& msg);

  /// The system this actor runs in; valid while that system exists. Not from the constructor.
  courier::system& system() const noexcept { return *detail::system_of(core()); }

  /// Spawns `T` into this actor's system, like `system().spawn<T>(args...)`. From handlers,
  /// on_start and on_stop; not from the constructor. Defined in system.hpp.
  template <class T, class... Args>
  actor_ref<T> spawn(Args&&... args);

  /// Spawns `T` linked to this actor: the child stops with errc::parent_stopped when this actor
  /// stops, and this actor hears when the child stops. If this actor accepts `courier::down`,
  /// it receives `down` for the child as a monitor would (every exit; `reason` is empty when
  /// the child stopped normally). Otherwise an abnormal exit of the child (any non-empty
  /// reason: a throwing handler, stopped_by_request, ...) stops this actor with the child's
  /// reason, as in Erlang and CAF; a normal exit is silent. Each side's link is an entry in the
  /// other's watcher list, dropped when either stops (this actor unlinks a child when it hears
  /// of its exit: a walk of its watcher list). Defined in system.hpp.
  template <class T, class... Args>
  actor_ref<T> spawn_linked(Args&&... args);

  /// A heartbeat: delivers a copy of `msg` to this actor every `period` until the handle cancels
  /// it or the actor stops. One tick at a time: while a tick is queued or being handled, the
  /// ticks that come due are skipped, not piled up. Throws std::invalid_argument for a period
  /// <= 0. Ticks are pooled: no heap allocation per tick in steady state.
  template <class M>
  timer_handle send_periodic(std::chrono::nanoseconds period, M msg);

 private:
  friend class system;
  template <class T>
  friend class actor_ref;

  static detail::resume_result resume_impl(detail::actor_base* base, std::uint32_t budget);
  static void discard_impl(detail::message_header* msg, const error& why) noexcept;
  static void destroy_impl(detail::actor_base* base) noexcept;

  template <std::size_t... I>
  void dispatch(detail::message_header*& msg, std::index_sequence<I...>);
  template <std::size_t I>
  void handle(detail::message_header*& msg);
  template <std::size_t... I>
  static void discard_typed(detail::message_header* msg, std::index_sequence<I...>) noexcept;

  static const char* type_name() noexcept { return typeid(Derived).name(); }
  static const char* message_name(std::uint16_t type) noexcept {
    static constexpr const char* (*names[])() noexcept = {&detail::type_name_of<Msgs>...};
    return type < sizeof...(Msgs) ? names[type]() : "courier system message";
  }
  static constexpr detail::actor_ops ops{&resume_impl, &discard_impl, &destroy_impl, &type_name, &message_name};

  actor_ref<Derived> self_;  // adopts the keep-alive reference; dropped when the actor stops
};

}  // namespace courier

#include "courier/actor_ref.hpp"

namespace courier {

template <class Derived, class... Msgs>
template <class T>
void actor<Derived, Msgs...>::monitor(const actor_ref<T>& target) {
  static_assert(detail::check_accepts<Derived, down>(), "courier: a monitoring actor must accept courier::down");
  detail::actor_base* watched = target.base();
  if (watched == nullptr) return;
  add_ref();
  auto* link = pool::make<detail::monitor_link>(nullptr, static_cast<detail::actor_base*>(this), type_index<down>);
  if (!watched->add_monitor(link)) {
    pool::destroy(link);
    release();
    auto* msg = detail::make_message<down>(type_index<down>, nullptr, watched->id(), watched->exit_reason());
    if (!enqueue_urgent(msg)) pool::destroy(msg);
  }
}

namespace detail {

/// How a periodic timer learns that its tick was handled: each tick is sent as a request, and
/// the request's record is released (reaches zero references) once the tick was handled or
/// dropped, on that thread. That is the last thing the reply path does with it, so the owner
/// may go away from there on.
struct periodic_ack : pending_base {
  timer_record* owner = nullptr;
  std::atomic<bool> in_flight{false};

  periodic_ack() noexcept {
    ops = &table;
    refs.store(0, std::memory_order_relaxed);  // one per tick in flight
  }
  // Ticks have no requesting actor, so no reply message is ever built, and nothing waits.
  static void deliver(pending_base*, message_header*) {}
  static void discard_reply(message_header*) noexcept {}
  static void complete(pending_base*, void*) {}
  static void fail(pending_base*, const error&) {}
  static void destroy(pending_base* self) noexcept {
    auto* a = static_cast<periodic_ack*>(self);
    timer_record* owner = a->owner;
    a->in_flight.store(false, std::memory_order_release);
    release(owner);  // the tick's reference; may free the ack with its owner
  }
  static constexpr pending_ops table{&deliver, &discard_reply, &complete, &fail, &destroy};
};

template <class M>
struct periodic_record : timer_record {
  periodic_ack ack;
  actor_base* target = nullptr;  // strong reference until the timer ends
  std::int64_t period = 0;
  std::uint16_t type = 0;
  M msg;

  explicit periodic_record(M m) : msg(std::move(m)) {
    ops = &table;
    ack.owner = this;
  }

  static std::int64_t fire(timer_record* self) noexcept {
    auto* r = static_cast<periodic_record*>(self);
    if (r->state.load(std::memory_order_acquire) != armed) {
      drop(self, error());
      return 0;
    }
    if (r->ack.in_flight.load(std::memory_order_acquire)) return r->period;  // the last tick is not handled yet
    message_slot<M>* tick;
    try {
      tick = make_message<M>(r->type, &r->ack, r->msg);
    } catch (...) {
      return r->period;  // out of memory or a throwing copy: this tick is skipped
    }
    r->ack.in_flight.store(true, std::memory_order_relaxed);
    r->ack.state.store(0, std::memory_order_relaxed);
    r->ack.refs.store(1, std::memory_order_relaxed);
    r->refs.fetch_add(1, std::memory_order_relaxed);  // the tick's
    if (r->target->enqueue(tick)) return r->period;
    // The actor stopped: the timer ends with it.
    pool::destroy(tick);
    r->ack.refs.store(0, std::memory_order_relaxed);
    r->ack.in_flight.store(false, std::memory_order_relaxed);
    r->refs.fetch_sub(1, std::memory_order_relaxed);  // the timer still holds one: never the last
    std::uint32_t expected = armed;
    r->state.compare_exchange_strong(expected, finished, std::memory_order_acq_rel);
    drop(self, error());
    return 0;
  }
  static void drop(timer_record* self, const error&) noexcept {
    auto* r = static_cast<periodic_record*>(self);
    if (actor_base* target = std::exchange(r->target, nullptr)) target->release();
  }
  static void destroy(timer_record* self) noexcept { pool::destroy(static_cast<periodic_record*>(self)); }
  static constexpr timer_record_ops table{&fire, &drop, &destroy};
};

}  // namespace detail

template <class Derived, class... Msgs>
template <class M>
timer_handle actor<Derived, Msgs...>::send_periodic(std::chrono::nanoseconds period, M msg) {
  static_assert(detail::check_accepts<Derived, M>());
  if (period.count() <= 0) throw std::invalid_argument("courier: send_periodic needs a period > 0");
  auto* r = pool::make<detail::periodic_record<M>>(std::move(msg));
  r->period = period.count();
  r->type = type_index<M>;
  add_ref();
  r->target = this;
  r->refs.store(2, std::memory_order_relaxed);  // the timer's and the handle's
  detail::start_timer(core(), r, period);
  return timer_handle(r);
}

template <class Derived, class... Msgs>
template <std::size_t I>
void actor<Derived, Msgs...>::handle(detail::message_header*& msg) {
  using M = detail::nth_type<I, Msgs...>;
  auto* slot = static_cast<detail::message_slot<M>*>(msg);
  Derived& self = static_cast<Derived&>(*this);
  using R = decltype(self.on(slot->value));
  if constexpr (std::is_void_v<R>) {
    detail::pending_base* reply = msg->reply_to;
    self.on(slot->value);
    pool::destroy(slot);
    msg = nullptr;
    if (reply != nullptr) detail::reply_value(reply, unit{});
  } else if constexpr (detail::is_deferred_reply<std::remove_cvref_t<R>>) {
    R deferred = [&] {
      detail::current_request_scope scope(msg);
      return self.on(slot->value);
    }();
    // A route still in the message was never taken: the handler returned without a promise for it.
    detail::pending_base* untaken = msg->reply_to;
    pool::destroy(slot);
    msg = nullptr;
    if (untaken != nullptr)
      detail::reply_error(untaken, error(errc::broken_promise, "the handler deferred its reply but made no promise for it"));
    (void)deferred;
  } else {
    detail::pending_base* reply = msg->reply_to;
    detail::reply_of_t<R> r = self.on(slot->value);  // a reference return is copied into the reply
    pool::destroy(slot);
    msg = nullptr;
    if (reply != nullptr) detail::reply_value(reply, std::move(r));
  }
}

template <class Derived, class... Msgs>
template <class T, class M>
delegated<reply_type_t<T, std::remove_cvref_t<M>>> actor<Derived, Msgs...>::delegate(const actor_ref<T>& target,
                                                                                    M&& msg) {
  using message = std::remove_cvref_t<M>;
  static_assert(detail::check_accepts<T, message>());
  detail::actor_base* to = target.base();
  if (to == nullptr) {
    if (detail::pending_base* p = detail::take_current_reply())
      detail::reply_error(p, error(errc::empty_reference, "delegate through an empty actor_ref"));
    return {};
  }
  // The slot is built before the route is taken, so a throwing copy leaves the request to the handler.
  auto* slot = detail::make_message<message>(target.template message_index<message>(), nullptr, std::forward<M>(msg));
  slot->reply_to = detail::take_current_reply();
  const detail::push_result r = to->try_enqueue(slot);
  if (r == detail::push_result::queued) return {};
  detail::pending_base* p = slot->reply_to;
  pool::destroy(slot);
  // A request is not a dead letter (the requester is told); a one-way message is.
  const bool full = r == detail::push_result::full;
  if (p != nullptr)
    detail::reply_error(p, full ? error(errc::mailbox_full, "the delegate target's mailbox was full")
                                : error(errc::actor_stopped, "the delegate target had stopped"));
  else
    detail::dead_letter(to->core(), to->id(), typeid(message).name(),
                        full ? dead_letter_reason::mailbox_full : dead_letter_reason::stopped);
  return {};
}

template <class Derived, class... Msgs>
template <std::size_t... I>
void actor<Derived, Msgs...>::dispatch(detail::message_header*& msg, std::index_sequence<I...>) {
  const std::uint16_t type = msg->type;
  (void)((type == I ? (handle<I>(msg), true) : false) || ...);
}

template <class Derived, class... Msgs>
template <std::size_t... I>
void actor<Derived, Msgs...>::discard_typed(detail::message_header* msg, std::index_sequence<I...>) noexcept {
  const std::uint16_t type = msg->type;
  (void)((type == I ? (pool::destroy(static_cast<detail::message_slot<detail::nth_type<I, Msgs...>>*>(msg)), true)
                    : false) ||
         ...);
}

template <class Derived, class... Msgs>
void actor<Derived, Msgs...>::discard_impl(detail::message_header* msg, const error& why) noexcept {
  if (msg->type >= detail::first_system_type) {
    discard_system(msg);
    return;
  }
  detail::pending_base* reply = msg->reply_to;
  discard_typed(msg, std::index_sequence_for<Msgs...>{});
  if (reply != nullptr) detail::reply_error(reply, why);
}

template <class Derived, class... Msgs>
detail::resume_result actor<Derived, Msgs...>::resume_impl(detail::actor_base* base, std::uint32_t budget) {
  static_assert((detail::check_handler<Derived, Msgs>() && ...));
  auto* self = static_cast<actor*>(base);
  detail::current_actor_scope scope(base);
  detail::message_header* msg = nullptr;
  std::uint32_t handled = 0;
  error failure;
  try {
    for (;;) {
      msg = self->mailbox_.pop();
      if (msg == nullptr) {
        if (self->mailbox_.try_block()) return detail::resume_result::idle;
        continue;
      }
      if (msg->type < detail::first_system_type) [[likely]] {
        self->dispatch(msg, std::index_sequence_for<Msgs...>{});
      } else {
        detail::message_header* system_msg = msg;
        msg = nullptr;
        if constexpr (detail::has_on_start<Derived>) {
          if (system_msg->type == detail::start_type) {
            pool::destroy(static_cast<detail::start_slot*>(system_msg));
            static_cast<Derived*>(self)->on_start();
          } else {
            self->handle_system(system_msg);
          }
        } else {
          self->handle_system(system_msg);
        }
      }
      if (self->stop_requested_) [[unlikely]]
        break;
      if (++handled == budget) {
        // Going idle here, when nothing is queued, saves the scheduler a resume that finds nothing.
        if (self->mailbox_.try_block()) return detail::resume_result::idle;
        return detail::resume_result::reschedule;
      }
    }
  } catch (const std::exception& e) {
    failure = error(errc::handler_failed, e.what());
  } catch (...) {
    failure = error(errc::handler_failed, "unknown exception");
  }
  if (msg != nullptr) discard_impl(msg, failure);
  if (!failure && self->exit_reason_ != nullptr) failure = *self->exit_reason_;  // stopped from outside
  if constexpr (requires(Derived& d) { d.on_stop(); }) {
    try {
      static_cast<Derived*>(self)->on_stop();
    } catch (...) {
    }
  }
  self->terminate(failure);
  actor_ref<Derived> keep_alive = std::move(self->self_);  // may free the actor as it goes
  return detail::resume_result::stopped;
}

template <class Derived, class... Msgs>
void actor<Derived, Msgs...>::destroy_impl(detail::actor_base* base) noexcept {
  auto* derived = static_cast<Derived*>(static_cast<actor*>(base));
  detail::system_core* core = base->core();
  derived->~Derived();
  pool::deallocate(derived, sizeof(Derived), detail::actor_alignment<Derived>);
  detail::release_core(core);  // the actor's reference on its system's shared state
}

}  // namespace courier
