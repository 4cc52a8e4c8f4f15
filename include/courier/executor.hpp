#pragma once
/// @file
/// Where a request's continuation runs: `request(...).then(executor, on_value, on_error)`.
///
/// An executor is any object with a public `execute(f)` taking a nullary callable:
/// `courier::asio::executor(io)` (asio.hpp; asio's own executors spell it
/// `asio::execution::execute(ex, f)`, so they need that adapter), or a hand-written queue.
/// Courier calls `execute` once per request, on the thread that settles it (the replying actor's
/// worker, the timer, or the caller of `then` for an error known at once), with a callable that
/// runs the continuation. So `execute` must hand the callable over (post it) and return: one that
/// runs it inline runs host code inside the replying actor's turn, which is what `then` without an
/// executor never does. An exception thrown by the continuation is caught inside the callable and
/// reported to config::on_continuation_error; an exception thrown by `execute` itself too.
///
/// Without an executor, `then(on_value, on_error)` picks the default:
/// - from an actor's handler: the continuation runs in that actor, as one of its messages;
/// - from any other thread: it is queued on the system's host lane, never run inline in `then`
///   and never inside the replying actor. Embedded and deterministic systems run the host lane
///   inside the host's `poll()` / `run_one()` / `run_until_idle()` (time-outs included); a
///   threaded system runs it on a worker, outside every actor.
///
/// Thread-safety: the executor is copied into the request and used from the settling thread.

#include <concepts>
#include <utility>

namespace courier {

namespace detail {
/// A stand-in for the callable Courier hands to `execute`: nullary, move-only, returns void.
struct executor_probe {
  executor_probe() = default;
  executor_probe(executor_probe&&) = default;
  executor_probe& operator=(executor_probe&&) = default;
  void operator()() {}
};
}  // namespace detail

template <class E>
concept executor = std::copy_constructible<E> && requires(const E& e, detail::executor_probe f) {
  e.execute(std::move(f));
};

}  // namespace courier
