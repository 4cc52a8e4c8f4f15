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
/// on_start pay nothing for it. `void on_turn_end()` runs after the last message of a turn (when
/// the mailbox is found empty or the turn's budget is spent), before the actor goes idle: a
/// connection flushes the frames its handlers queued there, so a burst leaves in one write. A
/// `stop()` there takes effect as the hook returns, as in a handler.
///
/// This header holds `actor<>` and its template bodies (dispatch, monitor, delegate,
/// send_periodic); the message-list-independent part is `detail::actor_base`
/// (detail/actor_base.hpp). It includes actor_ref.hpp, which does not include it back.
/// `spawn` and `spawn_linked` are defined in system.hpp.
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

#include "courier/actor_ref.hpp"
#include "courier/detail/actor_base.hpp"
#include "courier/detail/pending.hpp"
#include "courier/detail/type_list.hpp"
#include "courier/response_promise.hpp"
#include "courier/system_messages.hpp"
#include "courier/timer.hpp"

namespace courier {

class system;

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
  /// The same, with a reason: monitors (and linked parents) see `down` with `reason`, as after
  /// `request_exit(reason)`, but without a message: it takes effect after the current message or
  /// hook (on_turn_end included). The first reason given wins.
  void stop(errc reason) {
    COURIER_ASSERT(detail::current_actor == this, "actor::stop() is for the actor's own handlers; use ref.stop()");
    if (exit_reason_ == nullptr) exit_reason_ = new error(reason);
    stop_requested_ = true;
  }
  /// The same with a reason that carries text, e.g. `stop({errc::connection_lost, "the peer
  /// closed the connection"})`: `down.reason` holds both, and requests to this actor fail with
  /// them from then on (see actor_ref::request). The first reason given wins; an empty one (no
  /// code) stops as `stop()` does.
  void stop(error reason) {
    COURIER_ASSERT(detail::current_actor == this, "actor::stop() is for the actor's own handlers; use ref.stop()");
    if (exit_reason_ == nullptr && reason) exit_reason_ = new error(std::move(reason));
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
  /// request fails as a request to it would (actor_ref::request: actor_stopped after a normal
  /// stop, else its exit reason's code); a one-way message is a dead letter.
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

  static detail::resume_result resume_impl(detail::actor_base* base, std::uint32_t budget, std::uint32_t& ran);
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
  static constexpr detail::actor_ops ops{&resume_impl, &discard_impl, &destroy_impl,
                                         &type_name,   &message_name, detail::drive_ops_of<Derived>()};

  actor_ref<Derived> self_;  // adopts the keep-alive reference; dropped when the actor stops
};

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
      detail::reply_error(untaken,
                          error(errc::broken_promise, "the handler deferred its reply but made no promise for it"));
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
                                : to->refused_request_error(detail::delegate_refused));
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
detail::resume_result actor<Derived, Msgs...>::resume_impl(detail::actor_base* base, std::uint32_t budget,
                                                           std::uint32_t& ran) {
  static_assert((detail::check_handler<Derived, Msgs>() && ...));
  auto* self = static_cast<actor*>(base);
  detail::current_actor_scope scope(base);
  detail::message_header* msg = nullptr;
  std::uint32_t handled = 0;
  struct count_on_return {
    std::uint32_t& ran;
    const std::uint32_t& handled;
    ~count_on_return() { ran += handled; }
  } count_guard{ran, handled};
  error failure;
  // Goes idle when nothing is queued. try_block still reads the mailbox after publishing "idle",
  // when another worker may already run this actor, stop it and drop its last reference: a
  // reference of our own keeps the memory alive until it is done (its release may free it here).
  auto go_idle = [self]() noexcept {
    self->add_ref();
    const bool idle = self->mailbox_.try_block(detail::hold_on_idle == self);
    self->release();
    return idle;
  };
  std::uint32_t turn_start = 0;  // `handled` when on_turn_end last ran
  try {
    for (;;) {
      if constexpr (detail::ends_turn_per_batch<Derived>) {
        if (handled != turn_start && self->mailbox_.batch_used_up()) {
          turn_start = handled;
          static_cast<Derived*>(self)->on_turn_end();
          if (self->stop_requested_) [[unlikely]]
            break;
        }
      }
      msg = self->mailbox_.pop();
      if (msg == nullptr) {
        if constexpr (detail::has_on_turn_end<Derived>) {
          // Before try_block: once the actor is idle, another worker may already be running it.
          if (handled != turn_start) {
            turn_start = handled;
            static_cast<Derived*>(self)->on_turn_end();
            if (self->stop_requested_) [[unlikely]]
              break;  // stop() in the hook: now, not at the next message
          }
        }
        if (go_idle()) return detail::resume_result::idle;
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
      ++handled;
      if (self->stop_requested_) [[unlikely]]
        break;
      if (handled == budget) {
        if constexpr (detail::has_on_turn_end<Derived>) {
          turn_start = handled;
          static_cast<Derived*>(self)->on_turn_end();
          if (self->stop_requested_) [[unlikely]]
            break;
        }
        // Going idle here, when nothing is queued, saves the scheduler a resume that finds nothing.
        if (go_idle()) return detail::resume_result::idle;
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
  if constexpr (requires(Derived & d) { d.on_stop(); }) {
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
