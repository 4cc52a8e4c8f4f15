#pragma once
/// @file
/// The actor system: spawns actors, owns the scheduler and the timer, and shuts down in bounded time.
///
/// Once shutdown has begun, `spawn` throws; after `shutdown`, the run functions run nothing. `dead_letters` goes on
/// counting sends through references that outlive the shutdown.
///
/// Thread-safety: `spawn`, `registry`, `dead_letters`, `continuation_failures` and `live_actors`
/// may be called from any thread, including from handlers, also while `shutdown` runs (`spawn`
/// then throws system_shutdown, so that a spawner cannot hold shutdown off until its deadline).
/// `await_all_stopped` is for a thread that is not a worker. `run_one`, `poll`,
/// `run_until_idle` and `fire_due_timers` (manual modes) are for one driving thread at a time;
/// `next_deadline`, `wake_fd` and `stopped` for any thread. `begin_shutdown`, `shutdown` and the
/// destructor are for the owning thread.
///
/// Actor references stay safe to use after `shutdown` and after the system is destroyed: every
/// operation then fails cleanly (`send` returns false, requests fail with actor_stopped or
/// system_shutdown). The small state they touch is reference-counted; the threads are gone.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "courier/actor.hpp"
#include "courier/actor_ref.hpp"
#include "courier/config.hpp"
#include "courier/registry.hpp"

namespace courier {

/// What shutdown found: `clean` when every actor stopped before the deadline; otherwise
/// `unfinished` names the actors that did not ("<type>#<id>").
struct shutdown_report {
  bool clean = true;
  std::vector<std::string> unfinished;
};

/// What a run call did: the messages it ran (replies, failed requests and host continuations
/// count too) and whether work is still ready; while it is, wake_fd stays readable.
struct run_report {
  std::size_t messages = 0;
  bool more = false;
};

/// One message handled by `system::run_step` (deterministic mode): which actor ran, and what.
struct step {
  std::uint64_t actor = 0;         // the id of the actor that handled it (actor_ref::id())
  const char* message_type = "";   // typeid(M).name() for a message M the actor accepts, as
                                   // dead letters name it; "" when the actor only stopped
  bool system_message = false;     // a reply, a failed request's error, a stop, on_start, ...
  bool host_continuation = false;  // the host lane ran a continuation of a request made
                                   // outside any actor (then `actor` is the lane's id)
};

namespace detail {
template <class... Ts>
struct first_of {
  using type = void;
};
template <class T, class... Ts>
struct first_of<T, Ts...> {
  using type = T;
};
template <class... Ts>
using first_of_t = typename first_of<Ts...>::type;
struct caller_starts_access;
}  // namespace detail

/// Per-spawn settings: `sys.spawn<T>(courier::spawn_options{.mailbox_capacity = 1000}, args...)`.
struct spawn_options {
  /// Bounds the actor's mailbox: sends beyond it are refused (`send` returns false and reports a
  /// dead letter with reason mailbox_full, `try_send` returns send_result::full, a request fails
  /// with errc::mailbox_full). 0 takes `T::mailbox_capacity` if the actor declares one
  /// (`static constexpr std::size_t mailbox_capacity = N;`), else unbounded. Replies, stop
  /// requests and `down` are never refused. At most 2^32 - 1.
  std::size_t mailbox_capacity = 0;
};

class system {
 public:
  explicit system(config cfg = {});
  /// How many systems this process has made and not yet destroyed. A process that forks must
  /// have none: after fork only the calling thread exists in the child, so a system's workers,
  /// pool locks and reactor (shared with the parent) are not safe to use there. Courier's
  /// process-per-session server modes check it (net/server.hpp).
  static std::size_t alive() noexcept;
  system(const system&) = delete;
  system& operator=(const system&) = delete;
  /// Shuts down with a 5 s deadline if `shutdown` was not called; unfinished actors are printed.
  ~system();

  /// Builds a `T` in a pooled slot (aligned to max(64, alignof(T))) and starts it. `T`'s
  /// constructor must not send (its reference does not exist yet); give `T` an `on_start()`
  /// instead, which runs on the actor's thread before its first message and may send and spawn.
  /// Throws std::system_error (errc::system_shutdown) once shutdown has begun (`shutdown` or
  /// `begin_shutdown`), from a handler as from any thread: a handler that lets it escape stops
  /// its actor with handler_failed, as any throw does. The mailbox is bounded when `T` declares
  /// `static constexpr std::size_t mailbox_capacity = N;`, else unbounded.
  template <class T, class... Args>
  requires(!std::is_same_v<std::remove_cvref_t<detail::first_of_t<Args...>>, spawn_options>) actor_ref<T> spawn(
      Args&&... args) {
    return spawn_as<T>(spawn_options{}, nullptr, detail::no_down_type, std::forward<Args>(args)...);
  }

  /// As above, with per-spawn settings (a mailbox capacity that overrides the type's).
  template <class T, class... Args>
  actor_ref<T> spawn(spawn_options options, Args&&... args) {
    return spawn_as<T>(options, nullptr, detail::no_down_type, std::forward<Args>(args)...);
  }

  /// The named registry of this system.
  courier::registry& registry() noexcept { return registry_; }

  /// Waits until every actor has stopped (true) or `deadline` has passed (false); it does not ask
  /// them to stop. Manual systems are driven from the calling thread meanwhile, as `ask` does.
  /// Returns false at once from a handler or a worker thread, where waiting would deadlock.
  bool await_all_stopped(timespan deadline);

  /// Asks every actor to stop (after the messages already queued), waits up to `deadline` for
  /// them (`courier::infinite`: without limit), then stops the timer, runs the host
  /// continuations still queued (manual modes: on this thread, which must be the host's) and
  /// stops the workers. Actors still running at the deadline (a handler that never returns) are
  /// reported, not waited for: their threads are left to finish on their own. Later calls return
  /// the first call's report. After it, a request's continuation runs on the thread that settles
  /// the request (there is no loop left to queue it to).
  shutdown_report shutdown(timespan deadline = std::chrono::seconds(5));

  /// The loop contract of the manual modes (embedded and deterministic), for one driving thread
  /// at a time; README "Embedding" has a host loop written against it.
  /// - `poll(budget)` fires the timers that are due (embedded), then runs ready actors, at most
  ///   `budget` messages in all (each turn at most config::throughput), and says how many it ran
  ///   and whether work remains. A host that must stay responsive polls with a small budget and
  ///   comes back while `more` is true.
  /// - `run_one()` runs at most one message; `run_until_idle()` runs until nothing is ready (no
  ///   budget: for tests and for hosts that own nothing else) and returns the messages it ran.
  /// - Every run call clears wake_fd on its way in and leaves it readable on its way out exactly
  ///   when work is still ready (level-triggered; a send from another thread makes it readable).
  ///   With a `net::node` (embedded), every run call first dispatches the sockets that are ready
  ///   (without waiting), and a ready socket makes wake_fd readable too.
  /// - Host continuations (requests made outside any actor, time-outs included) run inside these
  ///   calls, on this thread (executor.hpp).
  /// - The calling thread becomes the driving thread: `ask` and `inbox::receive` on it run the
  ///   loop while they wait; on other threads they wait for the host to run it.
  static constexpr std::size_t default_poll_budget = 1024;
  run_report poll(std::size_t budget = default_poll_budget);
  bool run_one();
  std::size_t run_until_idle();
  /// Embedded mode has no timer thread: time-outs, delayed sends and periodic ticks fire when the
  /// host calls this (or any run call) at or after `next_deadline()`. Returns how many fired; the
  /// messages they sent are then ready to run. Other modes: 0.
  std::size_t fire_due_timers();
  /// Embedded: the earliest timer's deadline, time_point::max() when none (the host arms its own
  /// timer with it, as with libuv's uv_backend_timeout). Read it again after every run call; a
  /// timer started on another thread that becomes the earliest makes wake_fd readable. Other
  /// modes: time_point::max().
  std::chrono::steady_clock::time_point next_deadline() const noexcept;
  /// Deterministic mode only (std::logic_error otherwise): `run_one`, telling what it ran, so a
  /// test can read like a protocol trace. Empty when nothing was ready. It looks at the message
  /// the chosen actor will handle next (urgent ones first) before running it; the send and
  /// dispatch paths are unchanged.
  std::optional<step> run_step();
  /// Deterministic mode runs on a virtual clock: time-outs, delayed sends and periodic ticks come
  /// due only when this moves time forward; they fire on the calling thread (messages are then
  /// ready for `run_one`). Returns how many timers fired; does nothing in the other modes. The
  /// clock saturates at its end (`advance_time(timespan::max())` fires every timer); a negative
  /// step throws std::invalid_argument and leaves the clock where it was.
  std::size_t advance_time(timespan by);

  /// Embedded mode: a descriptor readable while work is ready (see the loop contract above; watch
  /// it level- or edge-triggered). It is an epoll set around an eventfd; a `net::node` adds its
  /// reactor to it, so it is readable while one of the node's sockets is ready too, and the run
  /// calls serve those sockets first. The number stays the same for the system's whole life. Courier owns it until the
  /// system is destroyed: a host that wraps it (asio's stream_descriptor, a libuv poll handle) must release it, never
  /// close it, and stop watching it before the system's destructor closes it. -1 in the other modes, and when
  /// config::on_wake is set (the host is told through the callback instead).
  int wake_fd() const noexcept;

  /// Starts a shutdown without blocking: asks every actor to stop (after what is queued), as
  /// `shutdown` does first. A host loop keeps running (poll) until `stopped()`, then calls
  /// `shutdown()`, which then returns at once. Later calls do nothing.
  void begin_shutdown();
  /// True once shutdown has begun, every actor has stopped and (manual modes) nothing is left to
  /// run, host continuations included. Any thread.
  bool stopped() const noexcept;

  std::uint64_t dead_letters() const noexcept;
  /// Requests dropped without `.then`: each was sent as a one-way message and its reply dropped.
  std::uint64_t unawaited_requests() const noexcept;
  /// Continuations of requests made outside any actor that threw (see config::on_continuation_error).
  std::uint64_t continuation_failures() const noexcept;
  std::size_t live_actors() const noexcept;
  std::size_t worker_count() const noexcept;
  const config& settings() const noexcept;

 private:
  template <class Derived, class... Msgs>
  friend class actor;
  friend detail::system_core* detail::core_of(system& sys) noexcept;
  friend struct detail::caller_starts_access;

  /// spawn, optionally linked to `parent` (then `parent_down_type` is its index of `down`).
  /// `caller_starts`: the start is queued but not scheduled (see caller_starts_access).
  template <class T, bool caller_starts = false, class... Args>
  actor_ref<T> spawn_as(spawn_options options, detail::actor_base* parent, std::uint16_t parent_down_type,
                        Args&&... args) {
    static_assert(std::is_base_of_v<detail::actor_base, T>, "courier: spawn<T> needs T derived from courier::actor");
    std::size_t capacity = options.mailbox_capacity;
    if constexpr (requires { T::mailbox_capacity; }) {
      static_assert(T::mailbox_capacity > 0 && T::mailbox_capacity <= 0xffffffffu,
                    "courier: an actor's mailbox_capacity must be between 1 and 2^32 - 1");
      if (capacity == 0) capacity = T::mailbox_capacity;
    }
    if (capacity > 0xffffffffu)
      throw std::system_error(make_error_code(std::errc::invalid_argument), "courier: mailbox capacity above 2^32 - 1");
    constexpr std::size_t alignment = detail::actor_alignment<T>;  // see actor_base: cache-line layout
    void* slot = pool::allocate(sizeof(T), alignment);
    T* object;
    try {
      object = ::new (slot) T(std::forward<Args>(args)...);
    } catch (...) {
      pool::deallocate(slot, sizeof(T), alignment);
      throw;
    }
    detail::actor_base* base = object;
    base->identity().core = core_;
    base->mailbox_.set_capacity(static_cast<std::uint32_t>(capacity));
    object->self_ = actor_ref<T>::adopt(base);  // the keep-alive reference
    base->add_ref();                            // the caller's
    try {
      detail::register_actor(core_, base);
    } catch (...) {
      object->~T();  // drops the keep-alive reference; the caller's is never handed out
      pool::deallocate(slot, sizeof(T), alignment);
      throw;
    }
    auto ref = actor_ref<T>::adopt(base);
    if (parent != nullptr) parent->link_child(base, parent_down_type);  // before its first message
    if constexpr (caller_starts) {
      static_assert(detail::has_on_start<T>, "courier: an actor its spawner starts needs an on_start()");
      detail::queue_start_for_caller(base);
    } else if constexpr (detail::has_on_start<T>) {
      detail::queue_start(base);
    }
    return ref;
  }

  bool finished() const noexcept;  // shutdown has finished (any thread)
  void ask_everyone_to_stop();     // begin_shutdown's work, owning thread

  detail::system_core* core_;  // never null; the system holds one reference on it
  config settings_;
  bool shut_down_ = false;       // owning thread only
  bool shutdown_begun_ = false;  // owning thread only
  shutdown_report report_;
  courier::registry registry_;  // names hold references: emptied by shutdown
};

namespace detail {
/// For a plain thread that waits on the actor it spawns (the network layer's connect, waiting for
/// its handshake): the actor's start is queued but not scheduled, so the spawner holds the right
/// to run it, as a push that woke it would give (woken_by_push). It must run it
/// (drive_while_waiting) or schedule it.
struct caller_starts_access {
  template <class T, class... Args>
  static actor_ref<T> spawn(system& sys, spawn_options options, Args&&... args) {
    return sys.template spawn_as<T, true>(options, nullptr, no_down_type, std::forward<Args>(args)...);
  }
};
}  // namespace detail

template <class Derived, class... Msgs>
template <class T, class... Args>
actor_ref<T> actor<Derived, Msgs...>::spawn(Args&&... args) {
  return system().template spawn<T>(std::forward<Args>(args)...);
}

template <class Derived, class... Msgs>
template <class T, class... Args>
actor_ref<T> actor<Derived, Msgs...>::spawn_linked(Args&&... args) {
  std::uint16_t down_type = detail::no_down_type;
  if constexpr (accepts<down>) down_type = type_index<down>;
  return system().template spawn_as<T>(spawn_options{}, this, down_type, std::forward<Args>(args)...);
}

}  // namespace courier
