#pragma once
/// @file
/// A request waiting for its reply: a pooled record that holds the continuation (or the blocked
/// caller of `ask`), shared by the request message, the reply on its way back and the time-out
/// timer through a reference count. Whoever settles it first (reply, error or time-out) wins the
/// `state` word; the others are discarded.
///
/// Private machinery: the record (`pending_base`), `reply_value` / `reply_error` (how a handler's
/// answer or a failure travels back), `callback_pending` (behind `request(...).then`) and
/// `ask_pending` (behind `ask`). The path of one request is written down in request.hpp.
/// Thread-safety: a record is shared by several threads through its reference count; only the
/// one that wins `claim` touches the continuation or the waiting caller's slot.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "courier/detail/message.hpp"
#include "courier/detail/runtime.hpp"
#include "courier/error.hpp"
#include "courier/pool.hpp"
#include "courier/result.hpp"

namespace courier::detail {

// Defined in detail/actor_base.hpp, once actor_base is complete.
bool deliver_to(actor_base* actor, message_header* msg) noexcept;
void release_actor(actor_base* actor) noexcept;
bool actor_has_stopped(const actor_base* actor) noexcept;

struct pending_ops {
  /// In the requesting actor: takes the reply slot, frees it and runs the continuation.
  void (*deliver)(pending_base* self, message_header* reply);
  void (*discard_reply)(message_header* reply) noexcept;
  /// For requesters that are not actors: runs the continuation with a `R*` on the replying thread.
  void (*complete)(pending_base* self, void* value);
  void (*fail)(pending_base* self, const error& why);
  void (*destroy)(pending_base* self) noexcept;
};

struct pending_base {
  std::atomic<std::uint32_t> refs{1};
  std::atomic<std::uint32_t> state{0};  // 0 waiting, 1 settled, 2 abandoned by a timed-out ask
  // The time-out, when there is one. A request made from a handler on a worker thread sits in
  // that worker's own wheel (`timer_home`, links owned by that worker); any other sits in the
  // system's shared heap (`timer_pos`, guarded by its mutex).
  bool has_timer = false;
  bool timer_linked = false;               // in timer_home's wheel; owner worker only
  bool timer_fresh = false;                // not yet given a deadline (deadline_ns holds the time-out)
  bool host_route = false;                 // `requester` is the system's host lane (a request made outside actors)
  std::atomic<bool> answered{false};       // a deferred reply was given (or failed): the promises' flag
  std::atomic<std::uint16_t> promises{0};  // live response_promise copies of this request
  std::int32_t timer_pos = -1;
  local_timers* timer_home = nullptr;
  pending_base* timer_prev = nullptr;
  pending_base* timer_next = nullptr;
  pending_base* cancel_next = nullptr;  // on timer_home's cancel inbox (another thread's cancel)
  std::int64_t deadline_ns = 0;
  actor_base* requester = nullptr;  // strong reference: the requesting actor, or the host lane;
                                    // null for `ask` and for continuations given an executor
  system_core* core = nullptr;
  const pending_ops* ops = nullptr;
};

/// True once no answer can reach whoever made the request: a time-out settled it (state 1 with no
/// answer given), an `ask` caller gave up (state 2), or the requesting actor has stopped, so its
/// continuation can never run. The host lane is never counted as gone: after it closes, a
/// plain thread's continuation runs on the settling thread. Any thread; three atomic loads.
inline bool requester_gone(const pending_base* p) noexcept {
  const std::uint32_t s = p->state.load(std::memory_order_acquire);
  if (s == 2) return true;
  if (s == 1 && !p->answered.load(std::memory_order_acquire)) return true;
  return p->requester != nullptr && !p->host_route && actor_has_stopped(p->requester);
}

inline void release(pending_base* p) noexcept {
  if (p->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) p->ops->destroy(p);
}

/// True for the one caller that settles the request; that caller also stops its timer.
inline bool claim(pending_base* p) noexcept {
  std::uint32_t expected = 0;
  if (!p->state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return false;
  if (p->has_timer) cancel_request_timer(p->core, p);
  return true;
}

template <class R>
struct response_slot : message_header {
  R value;
  response_slot(pending_base* p, R&& v) : message_header{nullptr, p, response_type}, value(std::move(v)) {}
};

/// Runs code on behalf of a requester that is not an actor: an executor's `execute` (which only
/// hands the continuation over), or, once the host lane has closed at shutdown, the continuation
/// itself, on the thread that settles the request. It runs as if from a plain thread (no current
/// actor, so requests made there are plain-thread requests too), and an exception it throws is
/// reported to the system's hook instead of failing the actor whose turn it borrows.
template <class F>
void run_detached_continuation(system_core* core, F&& run) noexcept {
  actor_base* const previous = current_actor;
  current_actor = nullptr;
  try {
    run();
  } catch (const std::exception& e) {
    continuation_failed(core, e.what());
  } catch (...) {
    continuation_failed(core, "unknown exception");
  }
  current_actor = previous;
}

/// Sends a handler's return value back; consumes the reference the request message held.
template <class R>
void reply_value(pending_base* p, R&& value) {
  if (p->requester != nullptr) {
    auto* slot = pool::make<response_slot<R>>(p, std::move(value));
    if (!deliver_to(p->requester, slot)) {
      // A stopped requesting actor needs no answer; a closed host lane (after shutdown) still
      // owes its plain thread exactly one continuation: it runs here.
      if (p->host_route && claim(p))
        run_detached_continuation(p->core, [&] { p->ops->deliver(p, slot); });
      else
        pool::destroy(slot);
      release(p);
    }
    return;
  }
  struct releaser {
    pending_base* p;
    ~releaser() { release(p); }
  } guard{p};
  if (claim(p)) run_detached_continuation(p->core, [&] { p->ops->complete(p, &value); });
}

/// Fails a request; consumes one reference (the request message's or the timer's).
inline void reply_error(pending_base* p, const error& why) noexcept {
  if (p->requester != nullptr) {
    auto* slot = pool::make<error_slot>();
    slot->type = error_response_type;
    slot->reply_to = p;
    slot->err = why;
    if (!deliver_to(p->requester, slot)) {
      pool::destroy(slot);
      if (p->host_route && claim(p)) run_detached_continuation(p->core, [&] { p->ops->fail(p, why); });
      release(p);
    }
    return;
  }
  if (claim(p)) run_detached_continuation(p->core, [&] { p->ops->fail(p, why); });
  release(p);
}

template <class F, class R>
void invoke_continuation(F& f, R&& value) {
  if constexpr (std::is_same_v<std::decay_t<R>, unit> && std::is_invocable_v<F&>)
    f();
  else
    f(std::move(value));
}

/// The continuation of `request(...).then(on_value, on_error)`.
template <class R, class F, class G>
struct callback_pending : pending_base {
  F on_value;
  G on_error;

  callback_pending(F f, G g) : on_value(std::move(f)), on_error(std::move(g)) { ops = &table; }

  static void deliver(pending_base* self, message_header* reply) {
    auto* slot = static_cast<response_slot<R>*>(reply);
    R value = std::move(slot->value);
    pool::destroy(slot);
    invoke_continuation(static_cast<callback_pending*>(self)->on_value, std::move(value));
  }
  static void discard_reply(message_header* reply) noexcept { pool::destroy(static_cast<response_slot<R>*>(reply)); }
  static void complete(pending_base* self, void* value) {
    invoke_continuation(static_cast<callback_pending*>(self)->on_value, std::move(*static_cast<R*>(value)));
  }
  static void fail(pending_base* self, const error& why) { static_cast<callback_pending*>(self)->on_error(why); }
  static void destroy(pending_base* self) noexcept {
    actor_base* requester = self->requester;
    system_core* host_core = self->host_route ? self->core : nullptr;
    pool::destroy(static_cast<callback_pending*>(self));
    if (requester != nullptr) release_actor(requester);
    if (host_core != nullptr) release_core(host_core);  // last: it may free the host lane
  }
  static constexpr pending_ops table{&deliver, &discard_reply, &complete, &fail, &destroy};
};

/// The continuation of `then(executor, ...)`: whoever settles the request hands one callable to
/// the executor (it holds the sink, the outcome and a reference on the system's shared state, so
/// it may run after the system is gone); the callable runs the sink and reports an exception it
/// throws to the system's hook.
template <class R, class E, class S>
struct executor_pending : pending_base {
  E ex;
  S sink;

  executor_pending(E e, S s) : ex(std::move(e)), sink(std::move(s)) { ops = &table; }

  class run_later {
   public:
    /// `core` may be null (a request through an empty ref): exceptions then go to stderr.
    run_later(S s, result<R> outcome, system_core* core) noexcept(std::is_nothrow_move_constructible_v<S>)
        : sink_(std::move(s)), outcome_(std::move(outcome)), core_(core) {
      if (core_ != nullptr) retain_core(core_);
    }
    run_later(run_later&& other) noexcept(std::is_nothrow_move_constructible_v<S>)
        : sink_(std::move(other.sink_)),
          outcome_(std::move(other.outcome_)),
          core_(std::exchange(other.core_, nullptr)) {}
    // Copyable when the continuation is, for executors that store std::function. Only one copy
    // is expected to run; each holds its own reference.
    run_later(const run_later& other) requires std::is_copy_constructible_v<S> && std::is_copy_constructible_v<R>
        : sink_(other.sink_), outcome_(other.outcome_), core_(other.core_) {
      if (core_ != nullptr) retain_core(core_);
    }
    run_later& operator=(run_later&&) = delete;
    ~run_later() {
      if (core_ != nullptr) release_core(core_);
    }
    void operator()() {
      try {
        sink_(std::move(outcome_));
      } catch (const std::exception& e) {
        continuation_failed(core_, e.what());
      } catch (...) {
        continuation_failed(core_, "unknown exception");
      }
    }

   private:
    S sink_;
    result<R> outcome_;
    system_core* core_;
  };

  static void post(pending_base* self, result<R>&& outcome) {
    auto* p = static_cast<executor_pending*>(self);
    p->ex.execute(run_later(std::move(p->sink), std::move(outcome), p->core));
  }
  static void deliver(pending_base*, message_header* reply) { discard_reply(reply); }  // no requester: unused
  static void discard_reply(message_header* reply) noexcept { pool::destroy(static_cast<response_slot<R>*>(reply)); }
  static void complete(pending_base* self, void* value) {
    post(self, result<R>(std::in_place, std::move(*static_cast<R*>(value))));
  }
  static void fail(pending_base* self, const error& why) { post(self, result<R>(failure_tag, why)); }
  static void destroy(pending_base* self) noexcept { pool::destroy(static_cast<executor_pending*>(self)); }
  static constexpr pending_ops table{&deliver, &discard_reply, &complete, &fail, &destroy};
};

/// The blocked caller of `ask`: the reply is written here and the caller woken through `ready`.
template <class R>
struct ask_pending : pending_base {
  /// not_ready, then ready once settled; sleeping while the caller waits on it (futex): only
  /// then does settling pay a wake-up (a driving caller settles its own call and never sleeps).
  static constexpr std::uint32_t not_ready = 0, ready_now = 1, sleeping = 2;
  std::atomic<std::uint32_t> ready{not_ready};
  std::optional<R> value;
  error err;

  ask_pending() { ops = &table; }

  static void deliver(pending_base*, message_header* reply) { discard_reply(reply); }
  static void discard_reply(message_header* reply) noexcept { pool::destroy(static_cast<response_slot<R>*>(reply)); }
  static void complete(pending_base* self, void* value) {
    auto* a = static_cast<ask_pending*>(self);
    try {
      a->value.emplace(std::move(*static_cast<R*>(value)));
    } catch (...) {
      a->err = error(errc::handler_failed, "the reply could not be moved to the caller of ask");
    }
    a->settle();
  }
  static void fail(pending_base* self, const error& why) {
    auto* a = static_cast<ask_pending*>(self);
    a->err = why;
    a->settle();
  }
  void settle() noexcept {
    if (ready.exchange(ready_now, std::memory_order_acq_rel) == sleeping) futex_wake_all(&ready);
  }
  /// The caller, before it sleeps on `ready` with sleeping as the expected value: false once settled.
  bool announce_sleep() noexcept {
    std::uint32_t expected = not_ready;
    return ready.compare_exchange_strong(expected, sleeping, std::memory_order_acq_rel) || expected == sleeping;
  }
  bool is_ready() const noexcept { return ready.load(std::memory_order_acquire) == ready_now; }
  static void destroy(pending_base* self) noexcept { pool::destroy(static_cast<ask_pending*>(self)); }
  static constexpr pending_ops table{&deliver, &discard_reply, &complete, &fail, &destroy};
};

}  // namespace courier::detail
