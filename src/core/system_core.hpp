#pragma once
// The compiled runtime behind courier::system: scheduler, timer and registry state.

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <concurrentqueue/concurrentqueue.h>

#include "courier/actor.hpp"
#include "courier/config.hpp"
#include "courier/timer.hpp"

namespace courier::detail {

/// A worker's local run queue: a bounded ring (the Go scheduler's runq) that only its owner pushes
/// to. The owner pops the newest actor (LIFO, as CAF's and Tokio's workers do) and, now and then,
/// the oldest; thieves pop the oldest. Newest-first keeps a tree of spawns depth-first, so only a
/// path of it is alive at once (skynet: tens of actors instead of most of a million), and it runs
/// what was just woken while its messages are still in cache.
///
/// The owner's newest-end pop races thieves only for the last actor (Chase-Lev's deque): it
/// reserves the slot by moving `tail_` back, then reads `head_`; both sides use sequentially
/// consistent operations on `head_` and `tail_`, so one of them sees the other (no fences, which
/// ThreadSanitizer would not model). `tail_ - head_` is read as signed: while the owner reserves
/// the last slot, `tail_` may be one below `head_`.
class run_queue {
 public:
  static constexpr std::uint32_t capacity = 256;

  bool push(actor_base* a) noexcept {  // owner only
    std::uint32_t h = head_.load(std::memory_order_acquire);
    std::uint32_t t = tail_.load(std::memory_order_relaxed);
    if (t - h >= capacity) return false;
    slots_[t % capacity].store(a, std::memory_order_relaxed);
    tail_.store(t + 1, std::memory_order_seq_cst);
    return true;
  }

  /// The oldest actor: owner or thief.
  actor_base* pop() noexcept {
    std::uint32_t h = head_.load(std::memory_order_seq_cst);
    for (;;) {
      std::uint32_t t = tail_.load(std::memory_order_seq_cst);
      if (static_cast<std::int32_t>(t - h) <= 0) return nullptr;
      actor_base* a = slots_[h % capacity].load(std::memory_order_relaxed);
      if (head_.compare_exchange_weak(h, h + 1, std::memory_order_seq_cst, std::memory_order_seq_cst)) return a;
    }
  }

  /// The newest actor: owner only.
  actor_base* pop_newest() noexcept {
    const std::uint32_t t = tail_.load(std::memory_order_relaxed) - 1;
    if (static_cast<std::int32_t>(t + 1 - head_.load(std::memory_order_relaxed)) <= 0) return nullptr;
    tail_.store(t, std::memory_order_seq_cst);  // reserve the newest slot
    std::uint32_t h = head_.load(std::memory_order_seq_cst);
    const auto left = static_cast<std::int32_t>(t - h);
    if (left > 0) return slots_[t % capacity].load(std::memory_order_relaxed);  // no thief can reach it
    actor_base* a = nullptr;
    if (left == 0) {  // the last one: a thief may be taking it too; the CAS on head decides
      a = slots_[t % capacity].load(std::memory_order_relaxed);
      if (!head_.compare_exchange_strong(h, h + 1, std::memory_order_seq_cst, std::memory_order_seq_cst)) a = nullptr;
    }
    tail_.store(t + 1, std::memory_order_seq_cst);  // empty now: head_ is t + 1 either way
    return a;
  }

  /// How many wait (owner: exact; others: a moment's view).
  std::uint32_t size() const noexcept {
    const auto n =
        static_cast<std::int32_t>(tail_.load(std::memory_order_acquire) - head_.load(std::memory_order_acquire));
    return n > 0 ? static_cast<std::uint32_t>(n) : 0;
  }

  bool empty() const noexcept { return size() == 0; }

 private:
  alignas(64) std::atomic<std::uint32_t> head_{0};
  alignas(64) std::atomic<std::uint32_t> tail_{0};
  std::atomic<actor_base*> slots_[capacity] = {};
};

class system_core;
class host_lane;
struct worker;

/// Monotonic nanoseconds on the clock every timer uses.
inline std::int64_t steady_now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// `now + delay`, saturated at the clock's end instead of overflowing.
inline std::int64_t saturating_deadline(std::int64_t now, std::chrono::nanoseconds delay) noexcept {
  const std::int64_t d = delay.count() < 0 ? 0 : delay.count();
  return d >= INT64_MAX - now ? INT64_MAX : now + d;
}

/// One worker's request time-outs: a hashed timing wheel (Varghese & Lauck) of intrusive lists
/// threaded through the pending records themselves, so starting and cancelling cost a few
/// pointer writes, no lock, no allocation, no clock read and no wake-up of anyone. The worker
/// checks it in its loop and parks no longer than its earliest slot.
///
/// A clock read costs more than the rest of a request (30-100 ns on virtual machines), so a new
/// time-out goes on a "fresh" list first and its deadline counts from the next check, which
/// reads the clock once for all of them: a time-out never fires early, and late by at most the
/// rest of the handler that made the request plus one slot (~1 ms).
///
/// Thread-safety: everything but `remote_cancel` is for the owning worker only. Another thread
/// that settles a request (a reply handled after the requester moved to another worker) hands
/// the record back through a lock-free inbox; the owner unlinks it on its next check, and until
/// then a time-out that comes due finds the request settled and only drops its reference.
class local_timers {
 public:
  static constexpr unsigned slot_count = 256;
  static constexpr unsigned tick_shift = 20;  // ~1.05 ms per slot; a turn of the wheel is ~268 ms

  explicit local_timers(worker* owner) noexcept : owner_(owner) {}

  void start(pending_base* p, std::chrono::nanoseconds timeout) noexcept;  // the timer's reference taken
  void cancel(pending_base* p) noexcept;
  void remote_cancel(pending_base* p) noexcept;
  /// Fires what came due and applies remote cancels.
  void poll() noexcept;
  /// Nanoseconds until the next slot with entries is due, or -1 when the wheel is empty.
  std::int64_t wait_hint() const noexcept;
  bool needs_poll() const noexcept { return count_ != 0 || cancels_.load(std::memory_order_relaxed) != nullptr; }
  /// For park, after it published its idle bit: a remote cancel is waiting to be applied.
  bool has_cancels() const noexcept { return cancels_.load(std::memory_order_seq_cst) != nullptr; }
  /// The worker is leaving: fails every request still waiting with system_shutdown; later remote
  /// cancels find the inbox closed and leave the record alone.
  void close() noexcept;

 private:
  void link(pending_base* p) noexcept;
  void unlink(pending_base* p) noexcept;
  void drain_cancels() noexcept;
  static void expire(pending_base* p, const error& why) noexcept;

  worker* owner_;
  pending_base* slots_[slot_count] = {};
  pending_base* fresh_ = nullptr;
  std::size_t count_ = 0;  // fresh or in a slot
  std::uint64_t current_tick_ = static_cast<std::uint64_t>(steady_now_ns()) >> tick_shift;
  alignas(64) std::atomic<pending_base*> cancels_{nullptr};
};

struct alignas(64) worker {
  system_core* core = nullptr;
  unsigned index = 0;
  actor_base* next = nullptr;  // owner only: runs before the local queue
  unsigned next_streak = 0;
  std::uint32_t tick = 0;
  std::uint32_t steal_seed = 0;
  bool poll_after_turn = false;         // the turn wrote to a socket: look at the poller before the next
  std::uint32_t writes_unlooked = 0;    // writing turns since the poller was last looked at
  std::int64_t answer_due_until = 0;    // steady ns: a socket written to may be answered before this
  const void* answer_poller = nullptr;  // the io_poller context of the last socket written to
  std::uint64_t answer_source = 0;      // and its registration there (0: none known)
  bool reported_unlooked = false;       // the turn running now was started by such a report
  std::int64_t io_spin_ns = 0;          // config::io_spin
  run_queue local;
  local_timers timers{this};
  alignas(64) std::atomic<std::uint32_t> wake_word{0};
  std::thread thread;

  void run();
  actor_base* find_local_work(moodycamel::ConsumerToken& token);
  actor_base* search(moodycamel::ConsumerToken& token, std::uint32_t rounds);
  void park();
  bool park_in_poller(std::uint32_t seen, std::int64_t hint_ns);
  std::size_t poll_io_now();
  bool await_answer();
  bool report_answer_source();
  void after_writing_turn();
  void push_local(actor_base* a);
  /// An actor that used up its turn or its next-slot streak: to the back of the shared queue.
  void requeue(actor_base* a);
};

/// The shared timer: request time-outs started outside a worker's handlers, delayed sends and
/// periodic timers. A binary heap under a mutex, served by one thread that sleeps until the
/// earliest deadline and is woken only when a new deadline becomes the earliest.
///
/// With a virtual clock (deterministic systems) there is no thread: time stands still until
/// `advance` moves it, and the timers that come due fire on the caller's thread.
///
/// Once stopped, it settles what it held (requests fail with system_shutdown, messages are
/// dropped) and settles every later start at once the same way.
class timer_service {
 public:
  /// Who moves time: a thread of its own (threaded mode), the test (deterministic: a virtual
  /// clock), or the host (embedded: real time, fired by its run calls and fire_due_timers, no
  /// thread).
  enum class clock_kind : std::uint8_t { own_thread, virtual_clock, host };
  timer_service(system_core* core, clock_kind kind);
  ~timer_service();
  void start_request(pending_base* p, std::chrono::nanoseconds timeout);
  void cancel_request(pending_base* p) noexcept;
  /// Takes the caller's reference on `r` (the timer's).
  void start_record(timer_record* r, std::chrono::nanoseconds delay);
  void remove_record(timer_record* r) noexcept;
  /// Virtual clock only: moves time forward (saturating) and fires what came due; returns how
  /// many fired. Throws std::invalid_argument for a negative step.
  std::size_t advance(std::chrono::nanoseconds by);
  /// Virtual clock only: moves time to the earliest deadline, if it is not after `limit`, else
  /// to `limit`, firing what came due. False when the clock already stood at `limit`.
  bool advance_idle(std::int64_t limit);
  std::int64_t now_ns() noexcept;
  bool virtual_clock() const noexcept { return virtual_clock_; }
  bool host_driven() const noexcept { return host_driven_; }
  /// Host-driven: fires what is due now on the calling thread; returns how many fired.
  std::size_t fire_due_now();
  /// The earliest deadline (steady clock ns), INT64_MAX when none. Any thread, no lock.
  std::int64_t earliest_ns() const noexcept { return earliest_.load(std::memory_order_acquire); }
  /// Stops the thread; outstanding requests fail with system_shutdown, delayed messages are dropped.
  void stop();
  bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }

 private:
  struct entry {
    std::int64_t deadline;
    std::uint64_t seq;
    pending_base* pending;  // a request time-out, or
    timer_record* record;   // a delayed send or periodic timer
  };
  bool earlier(const entry& a, const entry& b) const noexcept {
    return a.deadline < b.deadline || (a.deadline == b.deadline && a.seq < b.seq);
  }
  void place(std::size_t pos) noexcept;
  void sift_up(std::size_t pos) noexcept;
  void sift_down(std::size_t pos) noexcept;
  void remove_at(std::size_t pos) noexcept;
  /// Under the lock: false when stopped (nothing pushed).
  bool push_locked(std::int64_t deadline, pending_base* p, timer_record* r, bool& earliest);
  bool push(std::chrono::nanoseconds delay, pending_base* p, timer_record* r);
  void fire(entry& e) noexcept;
  void publish_earliest() noexcept {  // under the lock, after every change of the heap's front
    earliest_.store(heap_.empty() ? INT64_MAX : heap_.front().deadline, std::memory_order_release);
  }
  void fire_due(std::unique_lock<std::mutex>& lock, std::size_t& fired);
  void loop();

  system_core* core_;
  const bool virtual_clock_;
  const bool host_driven_;
  std::atomic<std::int64_t> earliest_{INT64_MAX};
  std::int64_t virtual_now_;  // guarded by mutex_
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<entry> heap_;
  std::vector<entry> due_;          // the thread's
  std::vector<entry> virtual_due_;  // the virtual clock's; one driving thread at a time
  std::uint64_t seq_ = 0;
  // When the thread looks at the heap next (guarded by mutex_): a push with an earlier deadline
  // wakes it, a later one waits for that look. INT64_MIN while it is awake and will look anyway.
  std::int64_t next_look_ = INT64_MIN;
  bool stop_ = false;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

class system_core {
 public:
  explicit system_core(const config& c);
  ~system_core();

  config cfg;
  bool manual;
  courier::system* owner = nullptr;  // the system object (not movable); set by its constructor

  // Scheduler.
  std::vector<std::unique_ptr<worker>> workers;
  moodycamel::ConcurrentQueue<actor_base*> injection;
  alignas(64) std::atomic<std::uint64_t> idle_mask{0};
  alignas(64) std::atomic<int> searching{0};
  // The I/O poller (detail::io_poller): the threads inside it (workers, busy or parked; an
  // embedded system's driving thread), and the index of the parked worker that waits in it
  // (-1: none), whom wake_one must wake through the poller.
  alignas(64) std::atomic<const io_poller*> poller{nullptr};
  std::atomic<int> pollers_inside{0};
  std::atomic<int> polling_worker{-1};
  // Workers looking at the poller after a write (worker::await_answer): while one is, a worker
  // that parks does so on its futex, not in epoll_wait, where each arrival would wake it too.
  std::atomic<int> answer_spinners{0};
  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> workers_ready{0};  // workers that have taken their first pool chunk
  int event_fd = -1;                          // embedded: closed by ~system (the host may watch it until then)
  /// Embedded with an eventfd: what wake_fd() returns, an epoll descriptor holding event_fd
  /// (level-triggered) and, while an io_poller is attached, the poller's fd, so one descriptor,
  /// the same for the system's whole life, tells the host of work and of socket readiness.
  int wake_epoll = -1;
  /// Manual modes: drive_once calls (for polling sockets every 64th); the thread in a run_scope only.
  std::uint32_t drive_turns = 0;
  std::atomic<bool> fd_signaled{false};
  /// Embedded: the thread that drives the system (the last to call a run function; at first the
  /// one that built it). Blocking calls on other threads wait instead of running host code.
  std::atomic<std::thread::id> driver{std::this_thread::get_id()};
  /// The thread inside a run_scope right now (none: std::thread::id()). Taken with a CAS, so a
  /// blocking call on a thread that was the driver a moment ago never runs beside the host.
  std::atomic<std::thread::id> active{};
  /// Continuations of requests made outside any actor (host_lane.hpp); owned, freed with the core.
  host_lane* lane = nullptr;

  void start_workers();
  void stop_workers(bool join);
  void wake_one() noexcept;
  /// Makes a worker parked in the I/O poller return from it.
  void wake_poller() noexcept;
  /// Manual modes: work became ready (or the timers' earliest deadline moved): makes wake_fd
  /// readable and calls config::on_wake, once until the next run call clears it.
  void signal_fd() noexcept;
  /// Clears wake_fd's readiness (cheap when it is not set).
  void drain_wake_fd() noexcept;
  /// Embedded, on the thread in a run_scope: dispatches what the io_poller has ready without
  /// waiting (its messages are then ready to run); how many handlers it called.
  std::size_t poll_io_here() noexcept;
  bool has_stealable_work() const noexcept;
  /// Manual modes: one actor's turn of at most `budget` messages; adds them to `ran`. False when
  /// nothing was ready.
  bool run_turn(std::uint32_t budget, std::uint32_t& ran);
  bool run_one(std::uint32_t budget) {
    std::uint32_t ran = 0;
    return run_turn(budget, ran);
  }

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

  /// running -> stopping (shutdown asked every actor to stop; spawn throws from here on)
  /// -> finished (the actors stopped or the deadline passed). Written under registry_mutex.
  enum class phase_t : int { running, stopping, finished };
  std::atomic<phase_t> phase{phase_t::running};
  /// Cleared when shutdown returns: the user's hooks (and their contexts) may be gone after it.
  std::atomic<bool> hooks_enabled{true};

  std::atomic<std::uint64_t> dead_letters{0};
  std::atomic<std::uint64_t> unawaited_requests{0};
  std::atomic<std::uint64_t> continuation_failures{0};

  timer_service timers;
};

inline thread_local worker* this_worker = nullptr;

/// The manual system whose run call is on this thread's stack, if any: a timer it starts needs
/// no wake-up (the host reads next_deadline() after every run call).
inline thread_local system_core* running_core = nullptr;

/// Brackets every run call of a manual system (poll, run_one, run_until_idle, fire_due_timers,
/// run_step, shutdown, the loop of a blocking call): one thread at a time runs the system (the
/// scope owns `system_core::active`), wake_fd is cleared on the way in, and on the way out it is
/// left readable exactly when work is still ready.
///
/// A host call (`host_call`) makes the calling thread the driving thread and waits for a blocking
/// call of another thread that is in the middle of its one message. A blocking call (`ask`,
/// `inbox::receive`, `await_all_stopped`: `blocking_call`) enters only on the driving thread and
/// only when no one else runs the system (check `entered()`); since the host does not read
/// next_deadline() after those, it signals wake_fd on the way out if it made a new earliest timer.
class run_scope {
 public:
  enum class kind : std::uint8_t { host_call, blocking_call };
  explicit run_scope(system_core* core, kind k = kind::host_call) noexcept;
  ~run_scope();
  run_scope(const run_scope&) = delete;
  run_scope& operator=(const run_scope&) = delete;
  bool entered() const noexcept { return entered_; }

 private:
  system_core* core_;
  system_core* previous_ = nullptr;
  std::int64_t earliest_on_entry_ = INT64_MAX;
  bool entered_ = false;
  bool owner_ = false;  // this scope took `active` (the outermost on this thread)
  bool blocking_ = false;
};

}  // namespace courier::detail
