#pragma once
/// @file
/// The narrow interface between the header-only actor templates and the compiled runtime
/// (scheduler, timers, registry). Nothing here is public API.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "courier/config.hpp"

namespace courier {
class system;
}

namespace courier::detail {

class actor_base;
class local_timers;
class system_core;
struct message_header;
struct pending_base;
struct timer_record;

/// Puts an actor whose mailbox just went from idle to non-empty on a run queue: the current
/// worker's "next" slot when called from a worker of the same system, else the injection queue.
void schedule(actor_base* actor);

/// Adds the actor to the registry and takes a reference on `core` for it (dropped by
/// `release_core` when the actor is destroyed). Throws std::system_error(system_shutdown) once
/// shutdown has begun: shutdown ends when the registry is empty, which a spawner that kept
/// adding actors would hold off until the deadline.
void register_actor(system_core* core, actor_base* actor);
void unregister_actor(system_core* core, actor_base* actor) noexcept;
void release_core(system_core* core) noexcept;
/// One more reference on `core` (a continuation handed to an executor holds one until it ran).
void retain_core(system_core* core) noexcept;

/// The system's host lane: the actor-like queue on which continuations of requests made outside
/// any actor run (see executor.hpp). Never null while the system is running.
actor_base* host_lane_of(system_core* core) noexcept;

/// A continuation of a requester that is not an actor threw: counted and reported to the hook.
void continuation_failed(system_core* core, const char* what) noexcept;

/// A request dropped without `.then`: it was sent one-way; counted for system::unawaited_requests().
void count_unawaited_request(system_core* core) noexcept;

/// A message that was not delivered (its target had stopped, or its bounded mailbox was full):
/// counted, passed to the configured hook.
void dead_letter(system_core* core, std::uint64_t target_id, const char* message_type,
                 dead_letter_reason reason = dead_letter_reason::stopped) noexcept;

/// The timer takes one reference on `pending` and drops it when the deadline passes (failing the
/// request with request_timeout) or when `cancel_request_timer` removes it first.
void start_request_timer(system_core* core, pending_base* pending, std::chrono::nanoseconds timeout);
void cancel_request_timer(system_core* core, pending_base* pending) noexcept;

/// Starts a delayed send or periodic timer; takes one reference on `record` (the timer's).
void start_timer(system_core* core, timer_record* record, std::chrono::nanoseconds delay);

/// The clock the system's timers run on (virtual in deterministic mode), in nanoseconds.
std::int64_t timer_now_ns(system_core* core) noexcept;
bool uses_virtual_clock(const system_core* core) noexcept;
/// Virtual clock, nothing runnable: moves time to the earliest timer, or to `limit` if that comes
/// first, and fires what came due. False when the clock already stands at `limit`.
bool advance_idle(system_core* core, std::int64_t limit);

/// True on a worker thread of any system: blocking there could deadlock the scheduler.
bool on_worker_thread() noexcept;

/// A source of readiness (the network layer's reactor) that the system polls, so no thread of its
/// own is needed to watch the sockets.
/// - Threaded: the workers poll it when they would otherwise park, so the thread that the socket
///   wakes runs what it woke (Go's netpoller): readiness turned into messages lands in that
///   worker's own queue, not another's.
/// - Embedded (with wake_fd): `fd` joins the descriptor behind wake_fd, so the host's loop wakes
///   for socket readiness too, and the driving thread polls it without waiting in its run calls
///   and blocking waits (libuv's backend fd: one descriptor to watch for everything).
struct io_poller {
  void* context = nullptr;
  /// Waits up to `timeout_ms` (-1: until something happens, 0: only look) and dispatches what is
  /// ready; returns how many handlers it called. Called by one parked worker at a time, with 0 by
  /// busy workers now and then, and (embedded) with 0 by the driving thread.
  std::size_t (*poll)(void* context, int timeout_ms) noexcept = nullptr;
  /// Makes a poll() in progress return; any thread.
  void (*wake)(void* context) noexcept = nullptr;
  /// Dispatches readability of one registration (a `source` given to poll_io_after_turn) without
  /// asking the kernel, as poll() would had it reported it; 0 when the registration is gone. For
  /// a worker that expects the answer there (await_answer); null where the poller cannot.
  std::size_t (*report)(void* context, std::uint64_t source) noexcept = nullptr;
  /// Readable while poll(0) has something to dispatch (an epoll descriptor); -1 if there is none,
  /// and then an embedded system cannot take the poller.
  int fd = -1;
};

/// From a handler that has just written to a socket: the worker running it looks at the io_poller
/// (without waiting) once this turn ends, before it takes other work or parks. The peer's answer
/// to what was written may already be on its way, and the poll is what hears it soonest: a worker
/// that parks may find another already waiting in the poller, and a busy one looks only every 64
/// turns. Anywhere else (a plain thread, a manual system) it does nothing. `poller` (an
/// io_poller's context) and `source` name the registration written to, which the worker may
/// report readable without a poll when answers have lately been there after it yielded.
void poll_io_after_turn(const void* poller = nullptr, std::uint64_t source = 0) noexcept;
/// From a connection's turn started by readiness: whether its read found bytes (a worker that
/// reported the socket readable without a poll learns whether doing so still pays).
void note_io_read(bool found) noexcept;

/// The system behind a `courier::system`, for layers built on the runtime (the network layer).
system_core* core_of(courier::system& sys) noexcept;
/// Installs `poller` (which must outlive its detachment); false when the system already has one,
/// is deterministic, or is embedded without a wake_fd (config::on_wake) or the poller without an
/// fd: then the caller needs a thread of its own to poll.
bool attach_io_poller(system_core* core, const io_poller* poller) noexcept;
/// Removes the poller and returns once no worker is inside it any more.
void detach_io_poller(system_core* core) noexcept;

/// Manual (deterministic or embedded) systems are driven by the host; `ask` drives them itself.
bool is_manual(const system_core* core) noexcept;
/// For a blocking wait on a manual system (`ask`, `await_all_stopped`): on the thread that drives
/// it (deterministic: always), fires due timers and runs at most one message, and (embedded, with
/// an io_poller) dispatches socket readiness when nothing else was ready (and every 64th call);
/// true if it did anything. On any other thread of an embedded system it runs nothing and
/// returns false, so host code only ever runs on the host's thread.
bool drive_once(system_core* core);

/// For a blocking wait (`ask`, `inbox::receive`, `await_all_stopped`) on the driving thread of an
/// embedded system with a wake_fd, after drive_once found nothing to do: sleeps until wake_fd is
/// readable (work, socket readiness) or `timeout` or the earliest timer has passed, and returns
/// true. False at once anywhere else: the caller waits its own way.
bool wait_for_work(system_core* core, std::chrono::nanoseconds timeout) noexcept;

/// The actor whose handler runs on this thread right now, if any: requests made from a handler
/// deliver their replies to that actor's mailbox.
inline thread_local actor_base* current_actor = nullptr;

/// The actor that a plain thread drives (drive_while_waiting) while it runs the actor's turn: it
/// goes held instead of idle when its mailbox is empty.
inline thread_local actor_base* hold_on_idle = nullptr;

/// For `ask` on a plain thread, whose push woke a drivable `actor` (see drive_ops in
/// actor_base.hpp): runs it and waits on its descriptor until `ready` is set or `deadline_ns`
/// (steady clock) has passed, then hands it back to the workers. Returns at once (leaving the
/// caller to wait as usual) where it cannot drive.
void drive_while_waiting(actor_base* actor, const std::atomic<std::uint32_t>& ready, std::int64_t deadline_ns);

/// futex wait/wake on a 32-bit word; `wait_for` returns false on time-out.
bool futex_wait_for(const void* word, std::uint32_t expected, std::chrono::nanoseconds timeout) noexcept;
void futex_wait(const void* word, std::uint32_t expected) noexcept;
void futex_wake_all(const void* word) noexcept;
void futex_wake_one(const void* word) noexcept;

}  // namespace courier::detail
