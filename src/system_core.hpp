#pragma once
// The compiled runtime behind courier::system: scheduler, timer and registry state.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <concurrentqueue/concurrentqueue.h>

#include "courier/actor.hpp"
#include "courier/scheduler.hpp"

namespace courier::detail {

/// A worker's local run queue: a bounded ring that its owner pushes to and that the owner and
/// thieves pop from with a CAS on `head_` (the Go scheduler's runq).
class run_queue {
 public:
  static constexpr std::uint32_t capacity = 256;

  bool push(actor_base* a) noexcept {  // owner only
    std::uint32_t h = head_.load(std::memory_order_acquire);
    std::uint32_t t = tail_.load(std::memory_order_relaxed);
    if (t - h >= capacity) return false;
    slots_[t % capacity].store(a, std::memory_order_relaxed);
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }

  actor_base* pop() noexcept {  // owner or thief
    std::uint32_t h = head_.load(std::memory_order_acquire);
    for (;;) {
      std::uint32_t t = tail_.load(std::memory_order_acquire);
      if (h == t) return nullptr;
      actor_base* a = slots_[h % capacity].load(std::memory_order_relaxed);
      if (head_.compare_exchange_weak(h, h + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return a;
    }
  }

  bool empty() const noexcept {
    return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
  }

 private:
  alignas(64) std::atomic<std::uint32_t> head_{0};
  alignas(64) std::atomic<std::uint32_t> tail_{0};
  std::atomic<actor_base*> slots_[capacity] = {};
};

class system_core;

struct alignas(64) worker {
  system_core* core = nullptr;
  unsigned index = 0;
  actor_base* next = nullptr;  // owner only: runs before the local queue
  unsigned next_streak = 0;
  std::uint32_t tick = 0;
  std::uint32_t steal_seed = 0;
  run_queue local;
  alignas(64) std::atomic<std::uint32_t> wake_word{0};
  std::thread thread;

  void run();
  actor_base* find_local_work(moodycamel::ConsumerToken& token);
  actor_base* search(moodycamel::ConsumerToken& token);
  void park();
  void push_local(actor_base* a);
};

/// Request time-outs and delayed sends: a binary heap under a mutex, served by one thread that
/// sleeps until the earliest deadline. Neither path is the plain send path.
///
/// With a virtual clock (deterministic systems) there is no thread: time stands still until
/// `advance` moves it, and the timers that come due fire on the caller's thread.
class timer_service {
 public:
  timer_service(system_core* core, bool virtual_clock);
  ~timer_service();
  void start_request(pending_base* p, std::chrono::nanoseconds timeout);
  void cancel_request(pending_base* p) noexcept;
  void start_delayed(actor_base* target, message_header* msg, std::chrono::nanoseconds delay);
  /// Virtual clock only: moves time forward and fires what came due; returns how many fired.
  std::size_t advance(std::chrono::nanoseconds by);
  /// Stops the thread; outstanding requests fail with system_shutdown, delayed messages are dropped.
  void stop();

 private:
  struct entry {
    std::chrono::steady_clock::time_point deadline;
    std::uint64_t seq;
    pending_base* pending;  // a request time-out, or
    actor_base* target;     // a delayed message for target
    message_header* msg;
  };
  bool earlier(const entry& a, const entry& b) const noexcept {
    return a.deadline < b.deadline || (a.deadline == b.deadline && a.seq < b.seq);
  }
  void place(std::size_t pos) noexcept;
  void sift_up(std::size_t pos) noexcept;
  void sift_down(std::size_t pos) noexcept;
  void remove_at(std::size_t pos) noexcept;
  void push(std::chrono::nanoseconds delay, pending_base* p, actor_base* target, message_header* msg);
  void fire(entry& e) noexcept;
  void loop();

  system_core* core_;
  const bool virtual_clock_;
  std::chrono::steady_clock::time_point virtual_now_;  // guarded by mutex_
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<entry> heap_;
  std::vector<entry> due_;
  std::uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

class system_core {
 public:
  explicit system_core(const config& c);
  ~system_core();

  config cfg;
  bool manual;

  // Scheduler.
  std::vector<std::unique_ptr<worker>> workers;
  moodycamel::ConcurrentQueue<actor_base*> injection;
  alignas(64) std::atomic<std::uint64_t> idle_mask{0};
  alignas(64) std::atomic<int> searching{0};
  std::atomic<bool> stopping{false};
  int event_fd = -1;
  std::atomic<bool> fd_signaled{false};

  void start_workers();
  void stop_workers(bool join);
  void wake_one() noexcept;
  void signal_fd() noexcept;
  /// Embedded mode, before running ready actors: clears wake_fd's readiness.
  void drain_wake_fd() noexcept;
  bool has_stealable_work() const noexcept;
  bool run_one(std::uint32_t budget);

  // Lifetime: the system holds one reference and every registered actor one more, so what refs
  // touch (the registry, counters, the timer's state) outlives both the system and its actors.
  // Shutdown stops the threads; the last reference frees the rest.
  std::atomic<std::uint32_t> refs{1};

  // Registry: every actor between spawn and stop, for shutdown.
  std::mutex registry_mutex;
  std::condition_variable registry_empty;
  actor_base* registry_head = nullptr;
  std::size_t live = 0;
  std::atomic<std::uint64_t> next_id{1};

  /// running -> stopping (shutdown asked every actor to stop; later spawns are asked at once)
  /// -> finished (spawn throws). Written under registry_mutex.
  enum class phase_t : int { running, stopping, finished };
  std::atomic<phase_t> phase{phase_t::running};
  /// Cleared when shutdown returns: the user's hooks (and their contexts) may be gone after it.
  std::atomic<bool> hooks_enabled{true};

  std::atomic<std::uint64_t> dead_letters{0};
  std::atomic<std::uint64_t> continuation_failures{0};

  timer_service timers;
};

inline thread_local worker* this_worker = nullptr;

}  // namespace courier::detail
