#pragma once
/// @file
/// Handles to delayed sends and periodic timers: `auto h = ref.delayed_send(msg, 5s); h.cancel();`.
///
/// A handle shares a small pooled record with the timer (a reference count), so it stays safe to
/// use after the timer fired, after the target stopped and after the system shut down: `cancel`
/// then returns false and `active` false.
///
/// Thread-safety: distinct handles are safe to use from any threads, including handles to the
/// same timer; one handle object shared between threads is safe for concurrent const calls and
/// `cancel`, not for assignment.

#include <atomic>
#include <cstdint>
#include <utility>

#include "courier/error.hpp"

namespace courier {

class timer_handle;

namespace detail {

class system_core;
struct timer_record;

struct timer_record_ops {
  /// The deadline passed while the timer was armed: delivers. Returns the period to fire again
  /// after, or zero when the timer is finished (it then has released what it carried).
  std::int64_t (*fire)(timer_record* self) noexcept;
  /// The timer ends without firing again (cancelled, or the system stopped): destroys what it
  /// carries. `why` is the error a dropped message is discarded with.
  void (*drop)(timer_record* self, const error& why) noexcept;
  void (*destroy)(timer_record* self) noexcept;
};

/// What a delayed send or periodic timer and its handles share. `state` decides the race between
/// firing and cancelling: whoever moves it from armed first wins.
struct timer_record {
  static constexpr std::uint32_t armed = 0, finished = 1, cancelled = 2;

  std::atomic<std::uint32_t> refs{1};  // the timer's; handles add theirs
  std::atomic<std::uint32_t> state{armed};
  std::int32_t heap_pos = -1;  // guarded by the timer's mutex
  system_core* core = nullptr;
  const timer_record_ops* ops = nullptr;
};

inline void release(timer_record* r) noexcept {
  if (r->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) r->ops->destroy(r);
}

/// Eagerly removes a cancelled timer from the system's timer (only when the caller knows the
/// system is alive: a handler of that system is running).
void remove_cancelled_timer(system_core* core, timer_record* r) noexcept;
bool runs_in_system(const system_core* core) noexcept;

}  // namespace detail

/// A delayed send or a periodic timer. An empty (default-constructed) handle is never active.
class timer_handle {
 public:
  timer_handle() noexcept = default;
  /// Adopts one reference to `r` (null for an empty handle).
  explicit timer_handle(detail::timer_record* r) noexcept : rec_(r) {}
  timer_handle(const timer_handle& other) noexcept : rec_(other.rec_) {
    if (rec_ != nullptr) rec_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  timer_handle(timer_handle&& other) noexcept : rec_(std::exchange(other.rec_, nullptr)) {}
  timer_handle& operator=(timer_handle other) noexcept {
    std::swap(rec_, other.rec_);
    return *this;
  }
  ~timer_handle() { reset(); }

  /// Forgets the timer without cancelling it.
  void reset() noexcept {
    if (auto* r = std::exchange(rec_, nullptr)) detail::release(r);
  }

  /// Stops the timer: true when it was still armed (a delayed message is then destroyed, neither
  /// delivered nor a dead letter; a periodic timer sends no further tick). False when it had
  /// already fired (a delayed send), ended (its actor stopped, the system shut down) or been
  /// cancelled. Called from a handler of the timer's system, the message is destroyed at once;
  /// from other threads, when its deadline comes or at shutdown.
  bool cancel() noexcept {
    if (rec_ == nullptr) return false;
    std::uint32_t expected = detail::timer_record::armed;
    if (!rec_->state.compare_exchange_strong(expected, detail::timer_record::cancelled, std::memory_order_acq_rel))
      return false;
    if (detail::runs_in_system(rec_->core)) detail::remove_cancelled_timer(rec_->core, rec_);
    return true;
  }

  /// True while the timer may still fire: a delayed send not yet delivered, a periodic timer not
  /// cancelled. A periodic timer whose actor stopped notices at its next period.
  bool active() const noexcept {
    return rec_ != nullptr && rec_->state.load(std::memory_order_acquire) == detail::timer_record::armed;
  }

  explicit operator bool() const noexcept { return rec_ != nullptr; }

 private:
  detail::timer_record* rec_ = nullptr;
};

}  // namespace courier
