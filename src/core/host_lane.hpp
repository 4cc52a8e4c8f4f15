#pragma once
// The host lane: where continuations of requests made outside any actor run (executor.hpp).

#include <atomic>
#include <cstdint>

#include "courier/detail/actor_base.hpp"

namespace courier::detail {

/// An actor-like queue with no message list of its own: it only receives replies and errors of
/// requests whose requester is "the host" (a thread that is not an actor), and runs their
/// continuations as from a plain thread (no current actor), catching what they throw. Being an
/// actor to the scheduler is what puts host continuations where the host runs Courier: inside
/// `poll()` in embedded mode (a reply or a time-out only queues here and signals wake_fd), on a
/// worker but outside the replying actor in threaded mode.
///
/// Lifetime: owned by the system's shared state (system_core), which frees it. A request routed
/// here holds a reference on that state, so the lane outlives every record that points at it.
/// Shutdown closes it after everything queued ran; a reply that finds it closed runs its
/// continuation on the settling thread instead (pending.hpp), so none is ever lost.
class host_lane final : public actor_base {
 public:
  static host_lane* create(system_core* core);
  static void free(host_lane* lane) noexcept;

  /// Shutdown: closes the lane behind what is queued now. Any thread.
  void close_after_queued();
  /// True once the lane has closed (its last continuation ran). Any thread.
  bool closed() const noexcept { return closed_.load(std::memory_order_acquire) != 0; }
  /// Blocks until closed() or `timeout` passes; true if closed.
  bool wait_closed(std::chrono::nanoseconds timeout) const noexcept;

 private:
  host_lane() noexcept = default;
  static resume_result resume_impl(actor_base* base, std::uint32_t budget, std::uint32_t& ran);
  static void discard_impl(message_header* msg, const error& why) noexcept;
  static void destroy_impl(actor_base* base) noexcept;
  static const char* type_name() noexcept { return "courier::host_lane"; }
  static const char* message_name(std::uint16_t) noexcept { return "courier continuation"; }
  static constexpr actor_ops ops{&resume_impl, &discard_impl, &destroy_impl, &type_name, &message_name};

  void run(message_header* msg) noexcept;
  void finish() noexcept;

  std::atomic<std::uint32_t> closed_{0};
  // Set by close_after_queued: from then on a turn ignores its budget and runs on to the exit, so
  // a shutdown called from inside a continuation (the lane is mid-turn, not in the run queue,
  // and the run calls stop running anything once shutdown has finished) cannot strand the rest.
  std::atomic<bool> closing_{false};
};

}  // namespace courier::detail
