// An actor's system (system_of, behind an actor's system()) and waiting for every actor to stop.

#include <chrono>
#include <mutex>
#include <thread>

#include "courier/system.hpp"
#include "system_core.hpp"

namespace courier {
namespace detail {

courier::system* system_of(const system_core* core) noexcept { return core->owner; }

}  // namespace detail

bool system::await_all_stopped(timespan deadline) {
  if (finished()) return report_.clean;
  if (detail::current_actor != nullptr || detail::on_worker_thread()) return live_actors() == 0;
  // Saturates, as shutdown does: a deadline past the clock's range waits without limit.
  const auto start = std::chrono::steady_clock::now();
  const bool forever = deadline >= std::chrono::steady_clock::time_point::max() - start;
  const auto until = forever ? std::chrono::steady_clock::time_point::max() : start + deadline;
  if (core_->manual) {
    for (;;) {
      if (live_actors() == 0) return true;
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) return false;
      if (detail::drive_once(core_)) continue;  // on the host's thread; elsewhere the host runs it
      // Nothing ready: another thread may still send (or a socket become ready), so wait briefly
      // (on wake_fd, on an embedded system's driving thread) instead of giving up.
      const auto wait = std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(1));
      if (!detail::wait_for_work(core_, std::chrono::duration_cast<std::chrono::nanoseconds>(wait)))
        std::this_thread::sleep_for(wait);
    }
  }
  std::unique_lock lock(core_->registry_mutex);
  auto all_stopped = [this] { return core_->live == 0; };
  if (forever) {
    core_->registry_empty.wait(lock, all_stopped);
    return true;
  }
  return core_->registry_empty.wait_until(lock, until, all_stopped);
}

}  // namespace courier
