#pragma once
/// @file
/// Typed handles to actors. `actor_ref<counter>` only sends what `counter` accepts: a wrong send
/// does not compile, and the error names both the actor and the message. Holds `actor_ref`
/// (send, try_send, delayed_send, stop, and the declarations of request and ask), `send_result`
/// and the delayed-send timer record; the request side (`request_handle`, ask's body) is in
/// request.hpp, included at the end. Needs only detail/actor_base.hpp, not actor.hpp.
///
/// Thread-safety: distinct refs are safe to use from any threads; one ref object shared between
/// threads is safe for concurrent const calls (send, request, ask), not for assignment.

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "courier/detail/actor_base.hpp"
#include "courier/detail/pending.hpp"
#include "courier/interface.hpp"
#include "courier/timer.hpp"

namespace courier {

using timespan = std::chrono::nanoseconds;
inline constexpr timespan infinite = timespan::max();

template <class T, class M>
class request_handle;

namespace detail {

/// A delayed send: the message and a reference to its target, held until the deadline.
struct delayed_record : timer_record {
  actor_base* target = nullptr;
  message_header* msg = nullptr;

  delayed_record() noexcept { ops = &table; }

  static std::int64_t fire(timer_record* self) noexcept {
    auto* d = static_cast<delayed_record*>(self);
    std::uint32_t expected = armed;
    if (!d->state.compare_exchange_strong(expected, finished, std::memory_order_acq_rel)) {
      drop(self, error(errc::actor_stopped, "the timer was cancelled"));
      return 0;
    }
    message_header* msg = std::exchange(d->msg, nullptr);
    actor_base* target = std::exchange(d->target, nullptr);
    if (!target->enqueue(msg)) {
      dead_letter(target->core(), target->id(), target->identity().ops->message_name(msg->type));
      target->identity().ops->discard(msg, error(errc::actor_stopped));
    }
    target->release();
    return 0;
  }
  static void drop(timer_record* self, const error& why) noexcept {
    auto* d = static_cast<delayed_record*>(self);
    actor_base* target = std::exchange(d->target, nullptr);
    if (target == nullptr) return;
    message_header* msg = std::exchange(d->msg, nullptr);
    // A cancelled message is simply destroyed; one the system dropped is a dead letter.
    if (d->state.load(std::memory_order_acquire) != cancelled)
      dead_letter(target->core(), target->id(), target->identity().ops->message_name(msg->type));
    target->identity().ops->discard(msg, why);
    target->release();
  }
  static void destroy(timer_record* self) noexcept { pool::destroy(static_cast<delayed_record*>(self)); }
  static constexpr timer_record_ops table{&fire, &drop, &destroy};
};

/// Delivers `msg` to `target` as its message type `type_index` after `delay` (actor_ref::delayed_send;
/// also for code that holds the actor without its type, as a connection's compiled core does).
template <class M>
timer_handle send_after(actor_base* target, std::uint16_t type_index, M msg, std::chrono::nanoseconds delay) {
  auto* slot = make_message<M>(type_index, nullptr, std::move(msg));
  delayed_record* record;
  try {
    record = pool::make<delayed_record>();
  } catch (...) {
    pool::destroy(slot);
    throw;
  }
  target->add_ref();
  record->target = target;
  record->msg = slot;
  record->refs.store(2, std::memory_order_relaxed);  // the timer's and the handle's
  start_timer(target->core(), record, delay);
  return timer_handle(record);
}

}  // namespace detail

namespace detail {

/// What an interface ref keeps beside the actor pointer: the implementing actor's type index for
/// each of the interface's messages. A ref to an actor type needs nothing (the index is static).
struct no_index_map {};
template <class T>
using index_map_for = std::conditional_t<is_interface<T>, const std::uint16_t*, no_index_map>;

}  // namespace detail

/// What `actor_ref::try_send` did with a message.
enum class send_result : std::uint8_t {
  sent,             ///< queued in the actor's mailbox
  full,             ///< the actor's bounded mailbox was at capacity; the message was destroyed
  stopped,          ///< the actor had stopped; the message was destroyed
  empty_reference,  ///< the reference refers to no actor; nothing was sent
};

/// A handle to an actor. `T` is the actor's class, or an interface it implements (see interface.hpp):
/// a ref sends only what `T` accepts, and a request's reply has the type `T` declares.
template <class T>
class actor_ref {
 public:
  actor_ref() noexcept = default;
  actor_ref(const actor_ref& other) noexcept : ptr_(other.ptr_), map_(other.map_) {
    if (ptr_ != nullptr) ptr_->add_ref();
  }
  actor_ref(actor_ref&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), map_(other.map_) {}
  actor_ref& operator=(actor_ref other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(map_, other.map_);
    return *this;
  }
  ~actor_ref() { reset(); }

  /// An interface ref from a ref to an actor that implements the interface; checked at compile
  /// time (the error names the actor, the interface and the first message that does not fit).
  template <class A>
  requires(detail::is_interface<T> && !detail::is_interface<A>) actor_ref(const actor_ref<A>& other)
  noexcept : actor_ref(actor_ref<A>(other)) {}
  template <class A>
  requires(detail::is_interface<T> && !detail::is_interface<A>) actor_ref(actor_ref<A>&& other)
  noexcept {
    static_assert(detail::implementation<A, T>::check());
    map_ = detail::implementation<A, T>::indices;
    ptr_ = other.base();
    other.release_base();
  }

  void reset() noexcept {
    if (auto* p = std::exchange(ptr_, nullptr)) p->release();
  }

  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  /// The actor's id; 0 for an empty reference.
  std::uint64_t id() const noexcept { return ptr_ != nullptr ? ptr_->id() : 0; }
  friend bool operator==(const actor_ref& a, const actor_ref& b) noexcept { return a.ptr_ == b.ptr_; }

  /// One-way send. Returns false when the actor has stopped or its bounded mailbox is full:
  /// the message is destroyed and reported to the system's dead-letter hook (with the reason).
  /// False, with nothing sent, on an empty reference.
  template <class M>
  bool send(M&& msg) const {
    using message = std::remove_cvref_t<M>;
    static_assert(detail::check_accepts<T, message>());
    if (ptr_ == nullptr) [[unlikely]]
      return false;
    auto* slot = detail::make_message<message>(message_index<message>(), nullptr, std::forward<M>(msg));
    const detail::push_result r = ptr_->try_enqueue(slot);
    if (r == detail::push_result::queued) [[likely]]
      return true;
    pool::destroy(slot);
    detail::dead_letter(
        ptr_->core(), ptr_->id(), typeid(message).name(),
        r == detail::push_result::full ? dead_letter_reason::mailbox_full : dead_letter_reason::stopped);
    return false;
  }

  /// One-way send that says what happened. Unlike `send`, a refused message is not reported as a
  /// dead letter: the result tells the caller, who decides (retry later, drop, push back).
  template <class M>
  send_result try_send(M&& msg) const {
    using message = std::remove_cvref_t<M>;
    static_assert(detail::check_accepts<T, message>());
    if (ptr_ == nullptr) [[unlikely]]
      return send_result::empty_reference;
    auto* slot = detail::make_message<message>(message_index<message>(), nullptr, std::forward<M>(msg));
    const detail::push_result r = ptr_->try_enqueue(slot);
    if (r == detail::push_result::queued) [[likely]]
      return send_result::sent;
    pool::destroy(slot);
    return r == detail::push_result::full ? send_result::full : send_result::stopped;
  }

  /// Messages waiting in the actor's mailbox, approximately: for a bounded mailbox, the count
  /// its capacity is checked against (it may still include up to one turn's worth of messages
  /// the actor has just handled, and misses sends in flight); an unbounded mailbox keeps no
  /// count (that would cost every send an atomic add) and reports 0. 0 on an empty reference.
  std::size_t queued() const noexcept { return ptr_ != nullptr ? ptr_->queued() : 0; }

  /// The actor's mailbox capacity; 0 when unbounded (or on an empty reference).
  std::size_t mailbox_capacity() const noexcept { return ptr_ != nullptr ? ptr_->mailbox_capacity() : 0; }

  /// Delivers `msg` after `delay` (per-sender order is not kept across different delays). If the
  /// actor has stopped by then, the message is a dead letter. The handle cancels it (see
  /// timer_handle); an empty handle on an empty reference, with nothing sent.
  template <class M>
  timer_handle delayed_send(M&& msg, timespan delay) const {
    using message = std::remove_cvref_t<M>;
    static_assert(detail::check_accepts<T, message>());
    if (ptr_ == nullptr) return {};
    return detail::send_after<message>(ptr_, message_index<message>(), std::forward<M>(msg), delay);
  }

  /// Asynchronous request: `request(get{}, 1s).then(on_reply, on_error)`. From a handler, the
  /// continuation runs later in that actor, like any message; from any other thread it is queued
  /// on the system's host lane, never run inside the replying actor or the timer: a threaded
  /// system runs it on a worker outside every actor, a manual one inside the host's run calls
  /// (executor.hpp). Only a request settled after shutdown closed the lane runs its continuation
  /// on the settling thread. `then(executor, ...)` hands it to the executor instead. A time-out
  /// started from a handler on a worker thread costs no lock and no allocation: it counts from
  /// the worker's next check of its timers, so it never fires early and may fire late by the
  /// rest of that handler's run plus about a millisecond.
  ///
  /// A request to an actor that has stopped, or that stops with the request still queued, fails
  /// with errc::actor_stopped when it stopped normally (`stop()`), else with its exit reason's
  /// code (stopped_by_request, connection_lost, handler_failed, ...) and text followed by "; the
  /// request was not sent" or "; the message was not handled". `ask` fails the same way.
  template <class M>
  [[nodiscard]] request_handle<T, std::remove_cvref_t<M>> request(M&& msg, timespan timeout = infinite) const {
    static_assert(detail::check_accepts<T, std::remove_cvref_t<M>>());
    return {*this, std::forward<M>(msg), timeout};
  }

  /// Blocking request. Refused with errc::would_deadlock on a worker thread or inside a handler.
  /// On a manual (deterministic or embedded) system the caller drives the system while it waits.
  /// Deterministic systems measure `timeout` on the virtual clock: the caller runs what is
  /// runnable, and when nothing is, moves the clock to the next timer (firing it) if that comes
  /// before the deadline, else to the deadline, and fails with request_timeout; with an infinite
  /// timeout and no timer left it fails with would_deadlock instead of waiting forever.
  /// Returns `result<reply_type_t<T, M>>`.
  template <class M>
  auto ask(M&& msg, timespan timeout) const;

  /// Stops the actor after the message it is handling now (urgent: it overtakes what is queued,
  /// like CAF's exit messages and Akka's `context.stop`). What is still queued is dropped: one-way
  /// messages become dead letters, requests fail with stopped_by_request (see request). Its
  /// monitors see errc::stopped_by_request. Does nothing on an empty reference or a stopped actor.
  void stop() const;

  /// Stops the actor once it has handled the messages already queued (graceful, like Akka's
  /// PoisonPill); messages sent after this call are dropped as by `stop`. Its monitors see
  /// errc::stopped_by_request. Does nothing on an empty reference or a stopped actor.
  void stop_after_queued() const;

  detail::actor_base* base() const noexcept { return ptr_; }

  /// The receiving actor's type index for `M` (an interface ref looks it up in its table).
  template <class M>
  std::uint16_t message_index() const noexcept {
    if constexpr (detail::is_interface<T>)
      return map_[T::template position<M>];
    else
      return T::template type_index<M>;
  }

  /// Adopts a reference the caller already owns (no count change). For an interface ref, `map`
  /// is the implementing actor's index table (detail::implementation<Actor, T>::indices).
  static actor_ref adopt(detail::actor_base* p, detail::index_map_for<T> map = {}) noexcept {
    actor_ref r;
    r.ptr_ = p;
    r.map_ = map;
    return r;
  }
  /// The index table of an interface ref (for registries and proxies that store refs untyped).
  detail::index_map_for<T> index_map() const noexcept { return map_; }

  /// Gives up the reference without releasing it (the caller took it over).
  void release_base() noexcept { ptr_ = nullptr; }

 private:
  detail::actor_base* ptr_ = nullptr;
  [[no_unique_address]] detail::index_map_for<T> map_{};
};

template <class T>
void actor_ref<T>::stop() const {
  if (ptr_ != nullptr) ptr_->request_exit(errc::stopped_by_request, true);
}

template <class T>
void actor_ref<T>::stop_after_queued() const {
  if (ptr_ != nullptr) ptr_->request_exit(errc::stopped_by_request, false);
}

}  // namespace courier

// request_handle and ask's body need actor_ref complete.
#include "courier/request.hpp"
