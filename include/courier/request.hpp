#pragma once
/// @file
/// The request side of `actor_ref`: `request_handle` (what `ref.request(msg, timeout)` returns)
/// with its `then`, and the body of the blocking `ref.ask(msg, timeout)`.
///
/// The path of a request:
/// 1. `then` (or `ask`) makes a pending record (detail/pending.hpp: `callback_pending` or
///    `ask_pending`) and sends the message with `reply_to` pointing at it: the reply route. A
///    time-out, if any, starts a timer on the record (the worker's wheel from a handler, the
///    shared timer otherwise).
/// 2. The target's handler runs; its return value (or a `response_promise`, or a `delegate`d
///    actor's reply, see response_promise.hpp) goes to `detail::reply_value`, a thrown exception
///    or a refused message to `detail::reply_error`.
/// 3. The reply goes back: to a requesting actor's mailbox (urgent lane, as a response
///    message), where the continuation later runs like any message; a plain thread's goes to
///    the system's host lane, an actor-like queue that the host's poll() runs (embedded) or a
///    worker runs outside every actor (threaded); with an executor, the settling thread hands
///    the continuation to it; `ask`'s caller is woken through a futex.
/// 4. Claim: the first of reply, failure and time-out wins the record's `state` word (one CAS:
///    in the requesting actor when it handles the reply, on the settling thread otherwise); the
///    others find it claimed and drop what they carry.
///
/// Thread-safety: a request_handle belongs to the thread that made it (`then` consumes it);
/// `ask` may be called concurrently from any threads that are not workers or inside handlers.

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <system_error>
#include <type_traits>
#include <utility>

#include "courier/actor_ref.hpp"
#include "courier/detail/actor_base.hpp"
#include "courier/detail/pending.hpp"
#include "courier/error.hpp"
#include "courier/executor.hpp"
#include "courier/interface.hpp"
#include "courier/result.hpp"

namespace courier {

/// A request not sent yet: `.then(on_value, on_error)` sends it. Dropped without `.then`, it is
/// sent one-way (see the destructor). Move-only.
template <class T, class M>
class [[nodiscard]] request_handle {
 public:
  using reply_type = reply_type_t<T, M>;

  template <class Msg>
  request_handle(const actor_ref<T>& target, Msg&& msg, timespan timeout)
      : target_(target), msg_(std::forward<Msg>(msg)), timeout_(timeout) {}
  request_handle(request_handle&&) = default;
  request_handle& operator=(request_handle&&) = delete;

  /// A request dropped without `.then` is not lost: it is sent as a one-way message (its reply is
  /// dropped) and counted in `system::unawaited_requests()`.
  ~request_handle() {
    detail::actor_base* target = target_.base();
    if (target == nullptr) return;
    detail::count_unawaited_request(target->core());
    try {
      (void)target_.send(std::move(msg_));
    } catch (...) {
      // The message could not be copied: nothing was sent, and a destructor must not throw.
    }
  }

  /// Sends the request. Exactly one of the two runs: `on_value(reply)` (or `on_value()` for a
  /// unit reply) or `on_error(const courier::error&)`. Where it runs (executor.hpp): in the
  /// requesting actor when called from a handler, else on the system's host lane (inside the
  /// host's poll() in embedded mode); never inline here. Throws std::system_error
  /// (errc::empty_reference) through an empty ref, which has no system to run anything on.
  template <class F, class G>
  requires(!executor<F>) void then(F on_value, G on_error) && {
    static_assert(std::is_invocable_v<G&, const error&>, "courier: the error continuation takes const courier::error&");
    using pending = detail::callback_pending<reply_type, F, G>;
    detail::actor_base* target = target_.base();
    if (target == nullptr)
      throw std::system_error(make_error_code(errc::empty_reference), "courier: request through an empty actor_ref");
    auto* p = pool::make<pending>(std::move(on_value), std::move(on_error));
    detail::actor_base* requester = detail::current_actor;
    if (requester == nullptr) {
      detail::system_core* core = target->core();
      detail::retain_core(core);  // keeps the lane (owned by the core) alive for this record
      requester = detail::host_lane_of(core);
      p->host_route = true;
    }
    requester->add_ref();
    p->requester = requester;
    p->core = requester->core();  // the requester's clock times its deadline
    send(p);
  }

  /// Sends the request; its continuation is handed to `ex.execute(...)` on the thread that
  /// settles it (see executor.hpp). Exactly one of `on_value` / `on_error` runs there.
  template <executor E, class F, class G>
  void then(E ex, F on_value, G on_error) && {
    static_assert(std::is_invocable_v<G&, const error&>, "courier: the error continuation takes const courier::error&");
    std::move(*this).then(std::move(ex),
                          [f = std::move(on_value), g = std::move(on_error)](result<reply_type>&& r) mutable {
                            if (r.has_value())
                              detail::invoke_continuation(f, std::move(*r));
                            else
                              g(r.err());
                          });
  }

  /// As above with one continuation that takes the outcome: `on_result(courier::result<R>)`.
  /// Through an empty ref the outcome is errc::empty_reference, handed to the executor at once.
  template <executor E, class S>
  requires std::is_invocable_v<S&, result<reply_type> &&> void then(E ex, S on_result) && {
    using pending = detail::executor_pending<reply_type, E, S>;
    detail::actor_base* target = target_.base();
    if (target == nullptr) {
      using run_later = typename pending::run_later;
      ex.execute(
          run_later(std::move(on_result),
                    result<reply_type>(failure_tag, error(errc::empty_reference, "request through an empty actor_ref")),
                    nullptr));
      return;
    }
    auto* p = pool::make<pending>(std::move(ex), std::move(on_result));
    p->core = target->core();
    send(p);
  }

 private:
  /// Sends the message with `p` as its reply route and starts the time-out; consumes the handle.
  void send(detail::pending_base* p) {
    const actor_ref<T> target_ref = std::move(target_);  // sent: the destructor has nothing left to do
    detail::actor_base* target = target_ref.base();
    // The message first: if its constructor throws, nothing else has been taken yet.
    detail::message_slot<M>* slot;
    try {
      slot = detail::make_message<M>(target_ref.template message_index<M>(), p, std::move(msg_));
    } catch (...) {
      p->ops->destroy(p);
      throw;
    }
    if (timeout_ != infinite) {
      p->has_timer = true;
      detail::start_request_timer(p->core, p, timeout_);
    }
    const detail::push_result r = target->try_enqueue(slot);
    if (r == detail::push_result::queued) [[likely]]
      return;
    // Not a dead letter: the requester learns of it through its error continuation.
    pool::destroy(slot);
    if (r == detail::push_result::full) {
      detail::reply_error(p, error(errc::mailbox_full, "the target's mailbox was full"));
      return;
    }
    detail::reply_error(p, target->refused_request_error());
  }

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
  if (ptr_ == nullptr) return outcome(failure_tag, error(errc::empty_reference, "ask through an empty actor_ref"));
  if (detail::current_actor != nullptr || detail::on_worker_thread())
    return outcome(failure_tag,
                   error(errc::would_deadlock, "ask() blocks; use request(...).then(...) from actors and workers"));
  // One deadline for the whole ask, from its start: the part driven here and the part waited out
  // below share it (a wait that began afresh after the driving ended would double the time-out).
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = timeout >= std::chrono::steady_clock::time_point::max() - start
                            ? std::chrono::steady_clock::time_point::max()
                            : start + timeout;  // saturates: courier::infinite waits without limit
  auto* p = pool::make<detail::ask_pending<reply>>();
  p->core = ptr_->core();
  struct releaser {
    detail::pending_base* p;
    ~releaser() { detail::release(p); }
  } guard{p};  // this caller's reference; the message's is added once the message exists
  auto* slot = detail::make_message<message>(message_index<message>(), p, std::forward<M>(msg));
  p->refs.store(2, std::memory_order_relaxed);
  // Not a dead letter when refused: the caller learns of it from the result. A push that woke a
  // drivable actor (a client connection) leaves it to this thread, which drives it while it waits.
  const detail::push_result r = ptr_->try_enqueue_for_wait(slot);
  if (r == detail::push_result::woke_reader) {
    if (ptr_->drivable() && detail::may_run_here(p->core)) {
      const std::int64_t driven_until =
          deadline == std::chrono::steady_clock::time_point::max()
              ? INT64_MAX
              : std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
      detail::drive_while_waiting(ptr_, p->ready, driven_until);
    } else {
      detail::schedule(ptr_);
    }
  } else if (r != detail::push_result::queued) {
    pool::destroy(slot);
    detail::release(p);
    if (r == detail::push_result::full)
      return outcome(failure_tag, error(errc::mailbox_full, "the target's mailbox was full"));
    return outcome(failure_tag, ptr_->refused_request_error());
  }
  // Usually answered by now (a drive above read it): then there is no wait to set up.
  if (!p->is_ready() && detail::uses_virtual_clock(p->core)) {
    // Deterministic: the deadline is on the virtual clock. Run what is runnable; when nothing is,
    // move the clock to the next timer (or to the deadline) so the wait always ends.
    const std::int64_t now = detail::timer_now_ns(p->core);
    const std::int64_t limit =
        timeout.count() >= INT64_MAX - now ? INT64_MAX : now + std::max<std::int64_t>(timeout.count(), 0);
    while (!p->is_ready()) {
      if (detail::drive_once(p->core)) continue;
      if (detail::advance_idle(p->core, limit)) continue;
      std::uint32_t expected = 0;
      if (p->state.compare_exchange_strong(expected, 2, std::memory_order_acq_rel)) {
        if (timeout == infinite)
          return outcome(failure_tag,
                         error(errc::would_deadlock, "ask on a deterministic system: nothing left to run or fire"));
        return outcome(failure_tag, error(errc::request_timeout, "no reply before the ask deadline (virtual clock)"));
      }
    }
    if (p->value) return outcome(std::in_place, std::move(*p->value));
    return outcome(failure_tag, p->err);
  }
  const bool manual = detail::is_manual(p->core);
  while (!p->is_ready()) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    // A manual system is driven from here on its driving thread (a reply, a timer); elsewhere the
    // host drives it and this thread only waits.
    if (manual && detail::drive_once(p->core)) continue;
    auto wait = deadline - now;
    if (manual && wait > std::chrono::milliseconds(1)) wait = std::chrono::milliseconds(1);
    // The driving thread of an embedded system sleeps on wake_fd, which new work and socket
    // readiness wake; the 1 ms bound catches a reply settled on another thread (a futex wake).
    if (manual && detail::wait_for_work(p->core, std::chrono::duration_cast<timespan>(wait))) continue;
    if (p->announce_sleep()) detail::futex_wait_for(&p->ready, p->sleeping, std::chrono::duration_cast<timespan>(wait));
  }
  if (!p->is_ready()) {
    std::uint32_t expected = 0;
    if (p->state.compare_exchange_strong(expected, 2, std::memory_order_acq_rel))
      return outcome(failure_tag, error(errc::request_timeout, "no reply before the ask deadline"));
    while (!p->is_ready()) {  // settling now
      if (p->announce_sleep()) detail::futex_wait(&p->ready, p->sleeping);
    }
  }
  if (p->value) return outcome(std::in_place, std::move(*p->value));
  return outcome(failure_tag, p->err);
}

}  // namespace courier
