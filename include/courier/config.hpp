#pragma once
/// @file
/// How an actor system runs its actors, chosen once when the system is built.
///
/// - `threaded`: N worker threads, each with a local run queue and a "next" slot (an actor woken by
///   the running actor runs next on the same worker, so a ping-pong pair stays on one core), a
///   shared injection queue (moodycamel), stealing when idle, and parking (futex) after a short
///   spin, so an idle system uses no CPU.
/// - `deterministic`: no threads and a virtual clock; the test drives the system one message at
///   a time with `run_one()`, inspects state between steps, and moves time with
///   `system::advance_time()`, so time-outs and delayed sends fire exactly when it says.
/// - `embedded`: no threads at all; a host program's own loop drives Courier through the loop
///   contract in system.hpp: `poll(budget)`, `run_one()`, `run_until_idle()`, readiness on
///   `wake_fd()` (a pollable descriptor) or `on_wake`, and real-time timers that the host fires by
///   `next_deadline()` with `fire_due_timers()` (or any run call). Continuations of requests the
///   host makes run inside those calls, on the host's thread.
///
/// Thread-safety: a config is a plain value.

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace courier {

class error;

enum class scheduling : std::uint8_t { threaded, deterministic, embedded };

/// Why a message was not delivered.
enum class dead_letter_reason : std::uint8_t {
  stopped,           ///< its target had stopped (or stopped with the message still queued)
  mailbox_full,      ///< its target's bounded mailbox was at capacity (or refusing, see actor_base::refuse_sends)
  invalid_argument,  ///< its target could not take it as it was: a remote connection could not encode it
                     ///< within the limits its peer announced (the failure a request gets as errc::invalid_argument)
};

/// A message that could not be delivered.
struct dead_letter_info {
  std::uint64_t target_id;
  const char* message_type;  ///< typeid name of the message
  dead_letter_reason reason = dead_letter_reason::stopped;
};

struct config {
  scheduling mode = scheduling::threaded;
  /// Worker threads in threaded mode; 0 means std::thread::hardware_concurrency(), at most 64.
  /// Above 64, the system's constructor throws std::invalid_argument.
  std::size_t workers = 0;
  /// Messages an actor may handle per turn before it yields its worker (fairness).
  std::uint32_t throughput = 128;
  /// Rounds of looking for work (stealing, the injection queue) before a worker parks.
  std::uint32_t spin_rounds = 64;
  /// With a network node attached: a worker whose turn wrote to a socket and that then runs out
  /// of work keeps looking at the sockets (without waiting, yielding its CPU between looks) for
  /// this long before it parks, since the peer's answer is likely on its way. On hosts where
  /// waking a sleeping CPU costs more than a round trip (virtual machines: 30 us and more) it is
  /// what keeps a call's latency near the wire's; it costs at most this much CPU per write, and
  /// only CPU nothing else wanted. 0: park at once.
  std::chrono::microseconds io_spin{100};
  /// Called for every dead letter, on the sending thread, until `shutdown` returns. Must not block.
  void (*on_dead_letter)(const dead_letter_info&, void* user_data) = nullptr;
  void* dead_letter_user_data = nullptr;
  /// Called when a continuation of a request made outside any actor throws (on the host lane or
  /// through an executor, see executor.hpp; the exception is caught there and harms no actor).
  /// Null: one line on stderr. Called until `shutdown` returns. Must not block.
  void (*on_continuation_error)(const error& what, void* user_data) = nullptr;
  void* continuation_error_user_data = nullptr;
  /// Manual modes, for hosts without descriptors or that would rather post to their own loop
  /// (libuv's uv_async_send is the model): called when work becomes ready, on the thread that
  /// made it ready (any thread, possibly inside a handler), once until the next run call. It
  /// must only schedule a run call (post to the host's loop), never run one itself. Also called
  /// when a timer started outside a run call becomes the earliest (read next_deadline() again).
  /// Called until `shutdown` returns. With it set, an embedded system makes no wake_fd (-1), so
  /// a wake-up from the host's own thread costs no system call.
  void (*on_wake)(void* user_data) = nullptr;
  void* wake_user_data = nullptr;

  static constexpr config deterministic() {
    config c;
    c.mode = scheduling::deterministic;
    c.throughput = 1;
    return c;
  }
  static constexpr config embedded() {
    config c;
    c.mode = scheduling::embedded;
    return c;
  }
};

}  // namespace courier
