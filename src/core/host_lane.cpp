#include "host_lane.hpp"

#include <chrono>
#include <exception>
#include <new>

#include "system_core.hpp"

namespace courier::detail {

host_lane* host_lane::create(system_core* core) {
  void* slot = pool::allocate(sizeof(host_lane), alignof(host_lane) > 64 ? alignof(host_lane) : 64);
  auto* lane = ::new (slot) host_lane();
  actor_identity& id = lane->identity();
  id.core = core;
  id.ops = &ops;
  id.id = core->next_id.fetch_add(1, std::memory_order_relaxed);
  return lane;  // its first reference is the core's: records only add and drop their own
}

void host_lane::free(host_lane* lane) noexcept {
  if (message_header* m = lane->mailbox_.close()) {  // unreachable after a clean shutdown; kept safe
    while (m != nullptr) {
      message_header* next = m->next;
      discard_system(m);
      m = next;
    }
  }
  lane->~host_lane();
  pool::deallocate(lane, sizeof(host_lane), alignof(host_lane) > 64 ? alignof(host_lane) : 64);
}

void host_lane::close_after_queued() {
  closing_.store(true, std::memory_order_release);
  request_exit(errc::system_shutdown);
}

bool host_lane::wait_closed(std::chrono::nanoseconds timeout) const noexcept {
  const auto start = std::chrono::steady_clock::now();
  const auto until = timeout >= std::chrono::steady_clock::time_point::max() - start
                         ? std::chrono::steady_clock::time_point::max()
                         : start + timeout;  // saturates: a shutdown without deadline waits on
  while (!closed()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return false;
    futex_wait_for(&closed_, 0, std::chrono::duration_cast<std::chrono::nanoseconds>(until - now));
  }
  return true;
}

void host_lane::run(message_header* msg) noexcept {
  // A continuation is host code: what it throws is the host's problem, reported to the hook; the
  // lane (and every actor) carries on.
  try {
    handle_system(msg);
  } catch (const std::exception& e) {
    continuation_failed(core(), e.what());
  } catch (...) {
    continuation_failed(core(), "unknown exception");
  }
}

void host_lane::finish() noexcept {
  stop_requested_ = true;
  // What arrived while the exit was handled still runs; later replies find the lane closed and run
  // where they settle.
  message_header* m = mailbox_.close();
  while (m != nullptr) {
    message_header* next = m->next;
    if (m->type == exit_type)
      discard_system(m);
    else
      run(m);
    m = next;
  }
  closed_.store(1, std::memory_order_release);
  futex_wake_all(&closed_);
}

resume_result host_lane::resume_impl(actor_base* base, std::uint32_t budget, std::uint32_t& ran) {
  auto* self = static_cast<host_lane*>(base);
  current_actor_scope scope(nullptr);  // continuations run as from a plain thread
  std::uint32_t handled = 0;
  for (;;) {
    message_header* m = self->mailbox_.pop();
    if (m == nullptr) {
      if (self->mailbox_.try_block()) break;
      continue;
    }
    ++handled;
    if (m->type == exit_type) {
      discard_system(m);
      self->finish();
      ran += handled;
      return resume_result::stopped;
    }
    self->run(m);
    if (handled >= budget && !self->closing_.load(std::memory_order_acquire)) {
      ran += handled;
      return self->mailbox_.try_block() ? resume_result::idle : resume_result::reschedule;
    }
  }
  ran += handled;
  return resume_result::idle;
}

void host_lane::discard_impl(message_header* msg, const error&) noexcept { discard_system(msg); }

void host_lane::destroy_impl(actor_base*) noexcept {
  // Unreachable: the core holds the first reference and frees the lane itself (free()).
}

}  // namespace courier::detail
