#pragma once
/// @file
/// The narrow interface between the header-only actor templates and the compiled runtime
/// (scheduler, timers, registry). Nothing here is public API.

#include <chrono>
#include <cstdint>

#include "courier/scheduler.hpp"

namespace courier::detail {

class actor_base;
class system_core;
struct message_header;
struct pending_base;

/// Puts an actor whose mailbox just went from idle to non-empty on a run queue: the current
/// worker's "next" slot when called from a worker of the same system, else the injection queue.
void schedule(actor_base* actor);

void register_actor(system_core* core, actor_base* actor);
void unregister_actor(system_core* core, actor_base* actor) noexcept;

/// A message that was not delivered (its target had stopped, or its bounded mailbox was full):
/// counted, passed to the configured hook.
void dead_letter(system_core* core, std::uint64_t target_id, const char* message_type,
                 dead_letter_reason reason = dead_letter_reason::stopped) noexcept;

/// The timer takes one reference on `pending` and drops it when the deadline passes (failing the
/// request with request_timeout) or when `cancel_request_timer` removes it first.
void start_request_timer(system_core* core, pending_base* pending, std::chrono::nanoseconds timeout);
void cancel_request_timer(system_core* core, pending_base* pending) noexcept;

/// Delivers `msg` to `target` after `delay`; the timer owns `msg` and one reference on `target`.
void start_delayed_send(system_core* core, actor_base* target, message_header* msg, std::chrono::nanoseconds delay);

/// True on a worker thread of any system: blocking there could deadlock the scheduler.
bool on_worker_thread() noexcept;

/// Manual (deterministic or embedded) systems are driven by the host; `ask` drives them itself.
bool is_manual(const system_core* core) noexcept;
bool run_one(system_core* core);

/// The actor whose handler runs on this thread right now, if any: requests made from a handler
/// deliver their replies to that actor's mailbox.
inline thread_local actor_base* current_actor = nullptr;

/// futex wait/wake on a 32-bit word; `wait_for` returns false on time-out.
bool futex_wait_for(const void* word, std::uint32_t expected, std::chrono::nanoseconds timeout) noexcept;
void futex_wait(const void* word, std::uint32_t expected) noexcept;
void futex_wake_all(const void* word) noexcept;
void futex_wake_one(const void* word) noexcept;

}  // namespace courier::detail
