#pragma once
/// @file
/// Typed handles to actors. `actor_ref<counter>` only sends what `counter` accepts: a wrong send
/// does not compile, and the error names both the actor and the message.
///
/// Thread-safety: distinct refs are safe to use from any threads; one ref object shared between
/// threads is safe for concurrent const calls (send, request, ask), not for assignment.

#include <chrono>
#include <cstdint>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "courier/actor.hpp"
#include "courier/detail/pending.hpp"

namespace courier {

using timespan = std::chrono::nanoseconds;
inline constexpr timespan infinite = timespan::max();

/// What a request for `M` to actor `T` replies with: the handler's return type, `unit` for void.
template <class T, class M>
using reply_type_t = std::conditional_t<std::is_void_v<decltype(std::declval<T&>().on(std::declval<M&>()))>, unit,
                                        std::remove_cvref_t<decltype(std::declval<T&>().on(std::declval<M&>()))>>;

template <class T, class M>
class request_handle;

/// What `actor_ref::try_send` did with a message.
enum class send_result : std::uint8_t {
  sent,             ///< queued in the actor's mailbox
  full,             ///< the actor's bounded mailbox was at capacity; the message was destroyed
  stopped,          ///< the actor had stopped; the message was destroyed
  empty_reference,  ///< the reference refers to no actor; nothing was sent
};

template <class T>
class actor_ref {
 public:
  actor_ref() noexcept = default;
  actor_ref(const actor_ref& other) noexcept : ptr_(other.ptr_) {
    if (ptr_ != nullptr) ptr_->add_ref();
  }
  actor_ref(actor_ref&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)) {}
  actor_ref& operator=(actor_ref other) noexcept {
    std::swap(ptr_, other.ptr_);
    return *this;
  }
  ~actor_ref() { reset(); }

  void reset() noexcept {
    if (auto* p = std::exchange(ptr_, nullptr)) p->release();
  }

  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  std::uint64_t id() const noexcept { return ptr_->id(); }
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
    auto* slot = detail::make_message<message>(T::template type_index<message>, nullptr, std::forward<M>(msg));
    const detail::push_result r = ptr_->try_enqueue(slot);
    if (r == detail::push_result::queued) [[likely]]
      return true;
    pool::destroy(slot);
    detail::dead_letter(ptr_->core(), ptr_->id(), typeid(message).name(),
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
    auto* slot = detail::make_message<message>(T::template type_index<message>, nullptr, std::forward<M>(msg));
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
  /// actor has stopped by then, the message is a dead letter. False on an empty reference.
  template <class M>
  bool delayed_send(M&& msg, timespan delay) const {
    using message = std::remove_cvref_t<M>;
    static_assert(detail::check_accepts<T, message>());
    if (ptr_ == nullptr) return false;
    auto* slot = detail::make_message<message>(T::template type_index<message>, nullptr, std::forward<M>(msg));
    ptr_->add_ref();
    detail::start_delayed_send(ptr_->core(), ptr_, slot, delay);
    return true;
  }

  /// Asynchronous request: `request(get{}, 1s).then(on_reply, on_error)`. From a handler, the
  /// continuation runs later in that actor, like any message; from any other thread it runs on
  /// the thread that settles the request (the replying worker or the timer).
  template <class M>
  [[nodiscard]] request_handle<T, std::remove_cvref_t<M>> request(M&& msg, timespan timeout = infinite) const {
    static_assert(detail::check_accepts<T, std::remove_cvref_t<M>>());
    return {*this, std::forward<M>(msg), timeout};
  }

  /// Blocking request. Refused with errc::would_deadlock on a worker thread or inside a handler.
  /// On a manual (deterministic or embedded) system the caller drives the system while it waits.
  /// Returns `result<reply_type_t<T, M>>`.
  template <class M>
  auto ask(M&& msg, timespan timeout) const;

  /// Stops the actor after the message it is handling now (urgent: it overtakes what is queued,
  /// like CAF's exit messages and Akka's `context.stop`). What is still queued is dropped: one-way
  /// messages become dead letters, requests fail with actor_stopped. Its monitors see
  /// errc::stopped_by_request. Does nothing on an empty reference or a stopped actor.
  void stop() const;

  /// Stops the actor once it has handled the messages already queued (graceful, like Akka's
  /// PoisonPill); messages sent after this call are dropped as by `stop`. Its monitors see
  /// errc::stopped_by_request. Does nothing on an empty reference or a stopped actor.
  void stop_after_queued() const;

  detail::actor_base* base() const noexcept { return ptr_; }

  /// Adopts a reference the caller already owns (no count change).
  static actor_ref adopt(detail::actor_base* p) noexcept {
    actor_ref r;
    r.ptr_ = p;
    return r;
  }

 private:
  detail::actor_base* ptr_ = nullptr;
};

template <class T, class M>
class [[nodiscard]] request_handle {
 public:
  using reply_type = reply_type_t<T, M>;

  template <class Msg>
  request_handle(const actor_ref<T>& target, Msg&& msg, timespan timeout)
      : target_(target), msg_(std::forward<Msg>(msg)), timeout_(timeout) {}

  /// Sends the request. Exactly one of the two runs: `on_value(reply)` (or `on_value()` for a
  /// unit reply) or `on_error(const courier::error&)`.
  template <class F, class G>
  void then(F on_value, G on_error) && {
    static_assert(std::is_invocable_v<G&, const error&>, "courier: the error continuation takes const courier::error&");
    using pending = detail::callback_pending<reply_type, F, G>;
    detail::actor_base* target = target_.base();
    if (target == nullptr) {  // nowhere to send it: fail at once, on this thread
      on_error(error(errc::empty_reference, "request through an empty actor_ref"));
      return;
    }
    auto* p = pool::make<pending>(std::move(on_value), std::move(on_error));
    p->core = target->core();
    if (detail::actor_base* requester = detail::current_actor) {
      requester->add_ref();
      p->requester = requester;
      p->core = requester->core();  // the requester's clock times its deadline
    }
    if (timeout_ != infinite) {
      p->has_timer = true;
      detail::start_request_timer(p->core, p, timeout_);
    }
    auto* slot = detail::make_message<M>(T::template type_index<M>, p, std::move(msg_));
    const detail::push_result r = target->try_enqueue(slot);
    if (r == detail::push_result::queued) [[likely]]
      return;
    pool::destroy(slot);
    if (r == detail::push_result::full) {
      detail::dead_letter(target->core(), target->id(), typeid(M).name(), dead_letter_reason::mailbox_full);
      detail::reply_error(p, error(errc::mailbox_full, "the target's mailbox was full"));
      return;
    }
    detail::dead_letter(target->core(), target->id(), typeid(M).name());
    detail::reply_error(p, error(errc::actor_stopped, "the target had stopped before the request was sent"));
  }

 private:
  actor_ref<T> target_;
  M msg_;
  timespan timeout_;
};

template <class T>
template <class M>
auto actor_ref<T>::ask(M&& msg, timespan timeout) const {
  using message = std::remove_cvref_t<M>;
  using reply = reply_type_t<T, message>;
  using outcome = result<reply>;
  static_assert(detail::check_accepts<T, message>());
  if (ptr_ == nullptr) return outcome(error(errc::empty_reference, "ask through an empty actor_ref"));
  if (detail::current_actor != nullptr || detail::on_worker_thread())
    return outcome(error(errc::would_deadlock, "ask() blocks; use request(...).then(...) from actors and workers"));
  auto* p = pool::make<detail::ask_pending<reply>>();
  p->core = ptr_->core();
  p->refs.store(2, std::memory_order_relaxed);  // this caller and the request message
  struct releaser {
    detail::pending_base* p;
    ~releaser() { detail::release(p); }
  } guard{p};
  auto* slot = detail::make_message<message>(T::template type_index<message>, p, std::forward<M>(msg));
  if (const detail::push_result r = ptr_->try_enqueue(slot); r != detail::push_result::queued) {
    pool::destroy(slot);
    detail::release(p);
    if (r == detail::push_result::full) {
      detail::dead_letter(ptr_->core(), ptr_->id(), typeid(message).name(), dead_letter_reason::mailbox_full);
      return outcome(error(errc::mailbox_full, "the target's mailbox was full"));
    }
    detail::dead_letter(ptr_->core(), ptr_->id(), typeid(message).name());
    return outcome(error(errc::actor_stopped, "the target had stopped before the request was sent"));
  }
  const auto deadline = timeout == infinite ? std::chrono::steady_clock::time_point::max()
                                            : std::chrono::steady_clock::now() + timeout;
  const bool manual = detail::is_manual(p->core);
  while (p->ready.load(std::memory_order_acquire) == 0) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (manual && detail::run_one(p->core)) continue;
    auto wait = deadline - now;
    if (manual && wait > std::chrono::milliseconds(1)) wait = std::chrono::milliseconds(1);
    detail::futex_wait_for(&p->ready, 0, std::chrono::duration_cast<timespan>(wait));
  }
  if (p->ready.load(std::memory_order_acquire) == 0) {
    std::uint32_t expected = 0;
    if (p->state.compare_exchange_strong(expected, 2, std::memory_order_acq_rel))
      return outcome(error(errc::request_timeout, "no reply before the ask deadline"));
    while (p->ready.load(std::memory_order_acquire) == 0) detail::futex_wait(&p->ready, 0);  // settling now
  }
  if (p->value) return outcome(std::move(*p->value));
  return outcome(p->err);
}

template <class T>
void actor_ref<T>::stop() const {
  if (ptr_ != nullptr) ptr_->request_exit(errc::stopped_by_request, true);
}

template <class T>
void actor_ref<T>::stop_after_queued() const {
  if (ptr_ != nullptr) ptr_->request_exit(errc::stopped_by_request, false);
}

namespace detail {

inline bool deliver_to(actor_base* actor, message_header* msg) noexcept { return actor->enqueue_urgent(msg); }
inline void release_actor(actor_base* actor) noexcept { actor->release(); }

}  // namespace detail
}  // namespace courier
