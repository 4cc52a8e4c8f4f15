#pragma once
/// @file
/// Courier inside an asio program (standalone asio 1.22 or later; built and installed only when
/// CMake finds `asio.hpp`; link `courier::asio`).
///
/// - `embedded_loop` drives an embedded system from an `::asio::io_context`: the thread that runs
///   the io_context runs the actors, between asio's own handlers. It learns that work is ready
///   either from `system::wake_fd()`, watched with a `stream_descriptor` (a system made with
///   `config::embedded()`), or from `config::on_wake` posting to the io_context (a system made
///   with `embedded_config(io)`: no eventfd, so work made on the io thread costs no system call).
///   A turn runs at most `budget` messages; when more is ready the next turn is posted rather than
///   looped, so sockets and timers get their turn too. A `steady_timer` set to
///   `system::next_deadline()` fires time-outs and delayed sends, which have no thread of their
///   own in embedded mode.
/// - `executor` hands a request's continuation to an asio executor with `::asio::post`: the
///   continuation runs on the io_context's thread, never inline on the thread that settled it.
/// - `async_request(ref, msg, timeout, token)` is a request as an asio asynchronous operation with
///   the signature `void(courier::result<R>)`: a callback, `::asio::use_awaitable`, or any token.
///
/// Thread-safety: an `embedded_loop` belongs to the thread that runs its io_context, which must be
/// one thread (the actors run in its handlers, and the system's run calls are for one driving
/// thread at a time); build it anywhere, destroy it on that thread or while the io_context is not
/// running; its `async_shutdown` may be called from any thread. `executor` is a value type, safe
/// to copy and use from any thread. `async_request` may be called from any thread, as `request`
/// may. `embedded_config` may be called from any thread.

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/error.hpp>
#include <asio/execution_context.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/system_executor.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "courier/actor_ref.hpp"
#include "courier/error.hpp"
#include "courier/interface.hpp"
#include "courier/result.hpp"
#include "courier/system.hpp"

namespace courier::asio {

/// Runs a request's continuation on an asio executor: `request(m, 1s).then(courier::asio::executor(io),
/// on_value, on_error)`. `execute` always posts, so the continuation never runs on the replying
/// worker, nor inside the caller of `then`. It does not keep the io_context busy on its own: while
/// a request waits, something else (a work guard, a socket) must keep `run()` from returning;
/// `async_request` holds a work guard for you.
///
/// Thread-safety: a value type; `execute` may be called from any thread.
template <class Executor>
class executor {
 public:
  using inner_executor_type = Executor;

  // A template that only an Executor matches: a plain `const Executor&` overload makes copying
  // this class ask whether it converts to Executor, and asio's any_io_executor answers that by
  // asking whether this class is copyable, which asks again.
  template <class E>
  requires std::is_same_v<std::remove_cvref_t<E>, Executor>
  explicit executor(E&& ex) noexcept(std::is_nothrow_constructible_v<Executor, E&&>) : ex_(std::forward<E>(ex)) {}
  /// The executor of an execution context: `courier::asio::executor(io)`.
  template <class Context>
  requires std::is_convertible_v<Context&, ::asio::execution_context&>
  explicit executor(Context& context) : ex_(context.get_executor()) {}

  template <class F>
  void execute(F&& f) const {
    ::asio::post(ex_, std::forward<F>(f));
  }

  const Executor& get_inner_executor() const noexcept { return ex_; }

 private:
  Executor ex_;
};

template <class Context>
requires std::is_convertible_v<Context&, ::asio::execution_context&> executor(Context&)
->executor<typename Context::executor_type>;
template <class Executor>
requires(!std::is_convertible_v<Executor&, ::asio::execution_context&>) executor(Executor)
->executor<Executor>;

namespace detail {

/// Type-erases async_shutdown's completion handler (move-only; std::move_only_function is C++23).
struct shutdown_completion {
  virtual ~shutdown_completion() = default;
  virtual void complete(const shutdown_report& report) = 0;
};

template <class Handler, class WorkGuard>
struct shutdown_completion_for final : shutdown_completion {
  Handler handler;
  WorkGuard work;  // the handler's executor stays busy until it has run
  shutdown_completion_for(Handler h, WorkGuard w) : handler(std::move(h)), work(std::move(w)) {}
  void complete(const shutdown_report& report) override {
    auto ex = work.get_executor();
    ::asio::post(ex, [h = std::move(handler), report]() mutable { std::move(h)(std::move(report)); });
    work.reset();
  }
};

struct loop_state;

/// The target of config::on_wake for a system made with `embedded_config(io)`: it posts a turn to
/// the loop bound to it, so work made ready on the io thread itself costs no system call. It is
/// owned by the io_context (see wake_service), which therefore outlives every system using it.
struct wake_relay {
  explicit wake_relay(::asio::any_io_executor e) : ex(std::move(e)) {}

  static void wake(void* context) noexcept;  // any thread; defined after loop_state

  ::asio::any_io_executor ex;
  std::mutex mutex;                // on_wake runs on any thread; bind and unbind on the io thread
  std::weak_ptr<loop_state> loop;  // empty until an embedded_loop binds, and again after it stops
};

/// Keeps the relays of an io_context for as long as it lives (asio destroys services last).
class wake_service : public ::asio::execution_context::service {
 public:
  using key_type = wake_service;
  static inline ::asio::execution_context::id id;

  explicit wake_service(::asio::execution_context& context) : ::asio::execution_context::service(context) {}

  wake_relay* make_relay(const ::asio::any_io_executor& ex) {
    std::lock_guard lock(mutex_);
    return &relays_.emplace_back(ex);
  }

 private:
  void shutdown() override {}

  std::mutex mutex_;
  std::list<wake_relay> relays_;  // a list: relays never move, systems hold pointers to them
};

/// What the asio handlers of an embedded_loop share. They hold it by shared_ptr, so the loop may
/// be destroyed while handlers are still queued: they find `closed` and return.
struct loop_state : std::enable_shared_from_this<loop_state> {
  using clock = std::chrono::steady_clock;

  loop_state(const ::asio::any_io_executor& ex, courier::system& s, std::size_t b)
      : sys(&s), budget(b), wake(ex), timer(ex) {}

  // The descriptor must never close Courier's eventfd (the system owns it): release, never close.
  ~loop_state() { release_wake(); }

  void release_wake() noexcept {
    if (!wake.is_open()) return;
    try {
      (void)wake.release();
    } catch (...) {
      // release() only deregisters from the reactor; nothing is left to undo if that fails.
    }
  }

  void start() {
    if (closed) return;
    schedule_turn();  // work may already be ready, or shutdown may have been asked before the first turn
  }

  /// A turn asked for by the relay (config::on_wake), on the io thread.
  void woken() {
    if (closed || posted) return;  // a turn is already on its way
    turn();
  }

  void wait_for_work() {
    if (relay != nullptr) return;  // nothing to wait on: the relay posts when work is ready
    if (closed || waiting) return;
    waiting = true;
    wake.async_wait(::asio::posix::stream_descriptor::wait_read,
                    [self = shared_from_this()](const std::error_code& ec) {
                      self->waiting = false;
                      if (self->closed || ec == ::asio::error::operation_aborted) return;
                      if (ec)
                        throw std::system_error(ec, "courier::asio::embedded_loop: waiting for the wake-up descriptor");
                      self->turn();
                    });
  }

  void schedule_turn() {
    if (closed || posted) return;
    posted = true;
    ::asio::post(wake.get_executor(), [self = shared_from_this()] {
      self->posted = false;
      if (!self->closed) self->turn();
    });
  }

  void turn() {
    run_report ran;
    try {
      ran = sys->poll(budget);
    } catch (...) {
      // The exception leaves io_context::run(); a later run() must still find the loop driving.
      schedule_turn();
      throw;
    }
    after_turn(ran.more);
  }

  void after_turn(bool more) {
    if (closed) return;  // the turn's own code stopped or destroyed the loop
    if (shutting_down && ((!more && sys->stopped()) || clock::now() >= shutdown_deadline)) {
      finish();
      return;
    }
    arm_timer();
    if (more)
      schedule_turn();  // posted, not looped: asio's other handlers run between two budgets
    else
      wait_for_work();
  }

  void arm_timer() {
    auto next = sys->next_deadline();
    if (shutting_down) next = std::min(next, shutdown_deadline);
    if (next == timer_expiry) return;
    timer_expiry = next;
    ++timer_generation;  // a wait that completed before this re-arm must not act on the new expiry
    if (next == clock::time_point::max()) {
      timer.cancel();
      return;
    }
    timer.expires_at(next);
    timer.async_wait([self = shared_from_this(), generation = timer_generation](const std::error_code& ec) {
      if (self->closed || ec == ::asio::error::operation_aborted || generation != self->timer_generation) return;
      self->timer_expiry = clock::time_point::max();
      // A turn, not fire_due_timers() alone: poll fires what is due first and runs it at once,
      // with no round trip through the wake-up; its after_turn re-arms the timer (or finishes a
      // shutdown whose deadline this was).
      self->schedule_turn();
    });
  }

  void begin_shutdown(courier::timespan deadline, std::unique_ptr<shutdown_completion> done) {
    completions.push_back(std::move(done));
    if (finished) {
      complete_all();
      return;
    }
    if (sys == nullptr) {
      // The loop was destroyed before this posted request ran; its system may be gone too.
      report.clean = false;
      report.unfinished = {"(courier::asio::embedded_loop destroyed before async_shutdown began)"};
      finished = true;
      complete_all();
      return;
    }
    if (!shutting_down) {
      shutting_down = true;
      const auto now = clock::now();
      shutdown_deadline = deadline >= clock::time_point::max() - now ? clock::time_point::max() : now + deadline;
      sys->begin_shutdown();
    }
    if (closed) {
      // Not driving any more (stop() was called): finish on this thread, as a blocking shutdown.
      report = sys->shutdown(deadline);
      finished = true;
      complete_all();
      return;
    }
    schedule_turn();  // no actor may be left to wake us: look at once
  }

  void finish() {
    // Every actor has stopped (shutdown returns at once), or the deadline has passed (a zero
    // deadline names the actors left).
    report = sys->shutdown(courier::timespan::zero());
    finished = true;
    close();
    complete_all();
  }

  void complete_all() {
    auto pending = std::move(completions);
    completions.clear();
    for (auto& c : pending) c->complete(report);
  }

  void close() noexcept {
    if (closed) return;
    closed = true;
    try {
      timer.cancel();
    } catch (...) {
      // A timer that cannot be cancelled still finds `closed` when it fires.
    }
    release_wake();
    if (relay != nullptr) {
      std::lock_guard lock(relay->mutex);
      relay->loop.reset();
    }
  }

  courier::system* sys;  // null once the loop is destroyed
  std::size_t budget;
  wake_relay* relay = nullptr;  // set for a system made with embedded_config(): no wake_fd then
  ::asio::posix::stream_descriptor wake;
  ::asio::steady_timer timer;
  clock::time_point timer_expiry = clock::time_point::max();  // max: not armed
  std::uint64_t timer_generation = 0;
  bool closed = false;   // stop() or the destructor: handlers still queued do nothing
  bool waiting = false;  // an async_wait on `wake` is outstanding
  bool posted = false;   // a turn is posted
  bool shutting_down = false;
  bool finished = false;
  clock::time_point shutdown_deadline = clock::time_point::max();
  shutdown_report report;
  std::vector<std::unique_ptr<shutdown_completion>> completions;
};

inline void wake_relay::wake(void* context) noexcept {
  auto* self = static_cast<wake_relay*>(context);
  std::weak_ptr<loop_state> target;
  {
    std::lock_guard lock(self->mutex);
    target = self->loop;
  }
  if (target.expired()) return;  // no loop yet: its first turn, posted when it binds, looks anyway
  try {
    ::asio::post(self->ex, [target = std::move(target)] {
      if (auto loop = target.lock()) loop->woken();
    });
  } catch (...) {
    // Out of memory for the handler: the next wake-up, or the loop's next turn, runs the work.
  }
}

}  // namespace detail

/// A config for an embedded system that an embedded_loop on `io` drives without an eventfd:
/// `on_wake` posts a turn to `io`, so a send from the io thread itself (a session's request, a
/// reply inside a turn) costs no system call. `io` must outlive the system (declare it first);
/// the other fields come from `base`.
inline courier::config embedded_config(::asio::io_context& io, courier::config base = courier::config::embedded()) {
  base.mode = scheduling::embedded;
  base.on_wake = &detail::wake_relay::wake;
  base.wake_user_data = ::asio::use_service<detail::wake_service>(static_cast<::asio::execution_context&>(io))
                            .make_relay(io.get_executor());
  return base;
}

/// Drives an embedded system from an io_context: the io_context's thread runs the actors, the
/// host continuations of requests made outside actors, and the system's timers.
///
/// ```cpp
/// ::asio::io_context io;
/// courier::system sys{courier::asio::embedded_config(io)};  // or config::embedded(): wake_fd
/// courier::asio::embedded_loop loop(io, sys);
/// auto c = sys.spawn<counter>();
/// ::asio::signal_set signals(io, SIGINT);
/// signals.async_wait([&](auto, int) { loop.async_shutdown([](courier::shutdown_report) {}); });
/// io.run();  // returns once the system has shut down and nothing else is left
/// ```
/// The system must outlive the loop (declare it first): the loop polls it, and its wake-up
/// descriptor belongs to the system, so the loop releases it from asio and never closes it. With
/// `embedded_config(io)`, `io` must outlive the system too (declare it before both).
///
/// Thread-safety: see the file comment; one thread, the io_context's.
class embedded_loop {
 public:
  using executor_type = ::asio::any_io_executor;

  /// Starts driving: the first turn is posted, so it runs once the io_context runs. `budget` is
  /// the most messages one turn runs before asio's other handlers get their turn. Throws
  /// std::invalid_argument when `sys` is not in embedded mode, when its config sets an `on_wake`
  /// of its own (no wake_fd then), or when another loop already drives it through
  /// `embedded_config`.
  embedded_loop(const executor_type& ex, courier::system& sys, std::size_t budget = 1024)
      : state_(make_state(ex, sys, budget)) {}
  embedded_loop(::asio::io_context& io, courier::system& sys, std::size_t budget = 1024)
      : embedded_loop(executor_type(io.get_executor()), sys, budget) {}
  embedded_loop(const embedded_loop&) = delete;
  embedded_loop& operator=(const embedded_loop&) = delete;

  /// Stops driving (as `stop`); it does not shut the system down.
  ~embedded_loop() {
    state_->close();
    state_->sys = nullptr;  // the system may go next; queued handlers must not reach it
  }

  executor_type get_executor() const noexcept { return state_->wake.get_executor(); }

  /// True until `stop`, or until an `async_shutdown` has completed.
  bool driving() const noexcept { return !state_->closed; }

  /// Stops driving at once: cancels the timer and releases the wake-up descriptor, so the
  /// io_context no longer waits for the system. Queued turns run nothing.
  void stop() noexcept { state_->close(); }

  /// Shuts the system down without blocking the io_context: asks every actor to stop, keeps driving
  /// until all have stopped (or `deadline` has passed), then calls `system::shutdown`, stops
  /// driving and completes with its report: `void(courier::shutdown_report)`. The handler runs on
  /// its associated executor (the loop's when it has none), never inside this call. It may be
  /// called from any thread, and from inside a turn (a continuation): the work is posted to the
  /// loop. Called again, it completes with the same report. After `stop`, it shuts down blocking,
  /// in a handler on the loop's executor.
  template <class Token>
  auto async_shutdown(courier::timespan deadline, Token&& token) {
    return ::asio::async_initiate<Token, void(shutdown_report)>(
        [state = state_, deadline](auto handler) {
          auto ex = ::asio::get_associated_executor(handler, state->wake.get_executor());
          auto work = ::asio::make_work_guard(ex);
          using completion = detail::shutdown_completion_for<decltype(handler), decltype(work)>;
          std::unique_ptr<detail::shutdown_completion> done =
              std::make_unique<completion>(std::move(handler), std::move(work));
          // Posted: never inside a turn (a continuation may ask for it) nor on another thread.
          ::asio::post(state->wake.get_executor(), [state, deadline, done = std::move(done)]() mutable {
            state->begin_shutdown(deadline, std::move(done));
          });
        },
        token);
  }
  template <class Token>
  auto async_shutdown(Token&& token) {
    return async_shutdown(std::chrono::seconds(5), std::forward<Token>(token));
  }

 private:
  static std::shared_ptr<detail::loop_state> make_state(const executor_type& ex, courier::system& sys,
                                                        std::size_t budget) {
    const courier::config& cfg = sys.settings();
    const bool relayed = cfg.on_wake == &detail::wake_relay::wake;
    if (cfg.mode != scheduling::embedded || (!relayed && sys.wake_fd() < 0))
      throw std::invalid_argument(
          "courier::asio::embedded_loop needs a system in embedded mode, with a wake_fd or made with "
          "courier::asio::embedded_config (not another on_wake)");
    if (budget == 0) throw std::invalid_argument("courier::asio::embedded_loop: a budget of 0 runs nothing");
    auto state = std::make_shared<detail::loop_state>(ex, sys, budget);
    if (relayed) {
      state->relay = static_cast<detail::wake_relay*>(cfg.wake_user_data);
      std::lock_guard lock(state->relay->mutex);
      if (!state->relay->loop.expired())
        throw std::invalid_argument("courier::asio::embedded_loop: this system already has a loop");
      state->relay->loop = state;
    } else {
      state->wake.assign(sys.wake_fd());
    }
    ::asio::post(ex, [state] { state->start(); });
    return state;
  }

  std::shared_ptr<detail::loop_state> state_;
};

namespace detail {

template <class T, class M>
using request_result = courier::result<reply_type_t<T, M>>;

struct initiate_request {
  template <class Handler, class T, class M>
  void operator()(Handler&& handler, const actor_ref<T>& ref, M msg, courier::timespan timeout) const {
    using outcome = request_result<T, M>;
    using handler_type = std::decay_t<Handler>;
    if constexpr (std::is_same_v<::asio::associated_executor_t<handler_type>, ::asio::system_executor>) {
      // No executor of its own: Courier's default lane (inside the requesting actor; from a plain
      // thread, the host lane: poll() on the driving thread, or a worker in threaded mode).
      // then() takes two continuations and exactly one runs: they share the handler.
      auto shared = std::make_shared<handler_type>(std::forward<Handler>(handler));
      ref.request(std::move(msg), timeout)
          .then(
              [shared](auto&&... value) {
                if constexpr (sizeof...(value) == 0)
                  std::move (*shared)(outcome(std::in_place));
                else
                  std::move (*shared)(outcome(std::in_place, std::forward<decltype(value)>(value)...));
              },
              [shared](const courier::error& e) { std::move (*shared)(outcome(failure_tag, e)); });
    } else {
      auto ex = ::asio::get_associated_executor(handler);
      // As asio's own operations do: the handler's io_context does not run out of work while the
      // request is in flight (a coroutine awaiting a reply from a worker would otherwise let run() return).
      auto work = ::asio::make_work_guard(ex);
      ref.request(std::move(msg), timeout)
          .then(courier::asio::executor(ex),
                [h = handler_type(std::forward<Handler>(handler)), work = std::move(work)](outcome r) mutable {
                  work.reset();
                  std::move(h)(std::move(r));
                });
    }
  }
};

}  // namespace detail

/// `ref.request(msg, timeout)` as an asio asynchronous operation completing with
/// `void(courier::result<R>)`, R being what the actor replies to M:
///
/// ```cpp
/// courier::result<int> total = co_await courier::asio::async_request(c, get{}, 1s, ::asio::use_awaitable);
/// courier::asio::async_request(c, get{}, 1s, ::asio::bind_executor(io, [](courier::result<int> r) {}));
/// ```
/// With an associated executor (a coroutine's, or one bound with `bind_executor`) the handler is
/// posted to it, and the executor counts as busy until then. Without one, the handler runs where
/// a `then` continuation would: in the requesting actor, or on the system's host lane (in
/// embedded mode, inside the loop's turn on the io_context's thread). Never inside this call.
/// Failures reach the handler as errors, with one exception: through an empty `ref` and without
/// an executor there is no system to run the handler on, so this throws std::system_error
/// (errc::empty_reference), as `then` does.
template <class T, class M, class Token>
auto async_request(const actor_ref<T>& ref, M&& msg, courier::timespan timeout, Token&& token) {
  using message = std::remove_cvref_t<M>;
  return ::asio::async_initiate<Token, void(detail::request_result<T, message>)>(
      detail::initiate_request{}, token, ref, message(std::forward<M>(msg)), timeout);
}

}  // namespace courier::asio
