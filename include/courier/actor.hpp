#pragma once
/// @file
/// Typed actors: `class counter : public courier::actor<counter, add, get>` with handlers
/// `void on(const add&)` and `int on(const get&)` (a return value is the reply).
///
/// Dispatch is a switch over the message's compile-time index in the actor's list: no virtual
/// call, map look-up or type-erased box per message. The runtime resumes an actor through one
/// function pointer per batch, never per message.
///
/// Thread-safety: an actor's handlers run on one thread at a time (the actor's own); its state
/// needs no locks. Other threads interact with it only through `actor_ref`.

#include <atomic>
#include <cstdint>
#include <exception>
#include <new>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "courier/detail/core.hpp"
#include "courier/detail/pending.hpp"
#include "courier/detail/type_list.hpp"
#include "courier/mailbox.hpp"
#include "courier/message.hpp"

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

/// A watcher's registration on the actor it monitors.
struct monitor_link {
  monitor_link* next;
  actor_base* watcher;  // strong reference
  std::uint16_t down_type;
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

  actor_identity& identity() noexcept { return mailbox_.shared; }

 protected:
  actor_base() noexcept = default;
  ~actor_base() { delete exit_reason_; }

  /// Replies, failed requests and stop requests: the messages every actor accepts.
  void handle_system(message_header* msg);
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

/// Names the actor and the message in the compiler's "required from" trail when a send does not
/// type-check, e.g. `courier::detail::actor_does_not_accept<counter, reset>`.
template <class Actor, class Message>
struct actor_does_not_accept {
  static_assert(sizeof(Actor*) == 0,
                "courier: this actor does not accept this message type; add it to the actor's message list "
                "(see actor_does_not_accept<Actor, Message> in the instantiation trail above)");
};

template <class Actor, class Message>
constexpr bool check_accepts() {
  if constexpr (!Actor::template accepts<Message>) {
    (void)actor_does_not_accept<Actor, Message>{};
    return false;
  } else {
    return true;
  }
}

template <class M>
const char* type_name_of() noexcept {
  return typeid(M).name();
}

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
  void stop() noexcept { stop_requested_ = true; }

  /// Delivers `courier::down` to this actor when `target` stops (at once if it already has).
  template <class T>
  void monitor(const actor_ref<T>& target);

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

template <class Derived, class... Msgs>
template <std::size_t I>
void actor<Derived, Msgs...>::handle(detail::message_header*& msg) {
  using M = detail::nth_type<I, Msgs...>;
  auto* slot = static_cast<detail::message_slot<M>*>(msg);
  detail::pending_base* reply = msg->reply_to;
  Derived& self = static_cast<Derived&>(*this);
  using R = decltype(self.on(slot->value));
  if constexpr (std::is_void_v<R>) {
    self.on(slot->value);
    pool::destroy(slot);
    msg = nullptr;
    if (reply != nullptr) detail::reply_value(reply, unit{});
  } else {
    R r = self.on(slot->value);
    pool::destroy(slot);
    msg = nullptr;
    if (reply != nullptr) detail::reply_value(reply, std::move(r));
  }
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
        self->handle_system(system_msg);
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
  derived->~Derived();
  pool::deallocate(derived, sizeof(Derived), pool::max_alignment);
}

}  // namespace courier
