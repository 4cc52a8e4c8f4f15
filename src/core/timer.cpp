#include <algorithm>
#include <stdexcept>

#include "system_core.hpp"

namespace courier::detail {

namespace {

// Marks a worker's cancel inbox once the worker has left: nothing will read it again.
pending_base* const inbox_closed = reinterpret_cast<pending_base*>(std::uintptr_t{1});

}  // namespace

// ---------------------------------------------------------------------------------------------
// local_timers: one worker's wheel

void local_timers::link(pending_base* p) noexcept {
  pending_base*& head = slots_[(static_cast<std::uint64_t>(p->deadline_ns) >> tick_shift) % slot_count];
  p->timer_prev = nullptr;
  p->timer_next = head;
  if (head != nullptr) head->timer_prev = p;
  head = p;
  p->timer_linked = true;
  ++count_;
}

void local_timers::unlink(pending_base* p) noexcept {
  if (p->timer_prev != nullptr)
    p->timer_prev->timer_next = p->timer_next;
  else if (p->timer_fresh)
    fresh_ = p->timer_next;
  else
    slots_[(static_cast<std::uint64_t>(p->deadline_ns) >> tick_shift) % slot_count] = p->timer_next;
  if (p->timer_next != nullptr) p->timer_next->timer_prev = p->timer_prev;
  p->timer_prev = p->timer_next = nullptr;
  p->timer_linked = false;
  --count_;
}

void local_timers::start(pending_base* p, std::chrono::nanoseconds timeout) noexcept {
  p->timer_home = this;
  p->timer_fresh = true;
  p->deadline_ns = timeout.count() < 0 ? 0 : timeout.count();
  p->timer_prev = nullptr;
  p->timer_next = fresh_;
  if (fresh_ != nullptr) fresh_->timer_prev = p;
  fresh_ = p;
  p->timer_linked = true;
  ++count_;
}

void local_timers::cancel(pending_base* p) noexcept {
  if (!p->timer_linked) return;  // already fired
  unlink(p);
  release(p);
}

void local_timers::remote_cancel(pending_base* p) noexcept {
  p->refs.fetch_add(1, std::memory_order_relaxed);  // the inbox's, until the owner has looked
  pending_base* top = cancels_.load(std::memory_order_acquire);
  do {
    if (top == inbox_closed) {  // the owner left and settled everything it held
      release(p);
      return;
    }
    p->cancel_next = top;
  } while (!cancels_.compare_exchange_weak(top, p, std::memory_order_acq_rel, std::memory_order_acquire));
  // A parked owner would hold the record until its next deadline (up to a turn of the wheel):
  // wake it for the first record of a batch. The RMW on idle_mask pairs with park's (see there).
  if (top == nullptr && owner_ != nullptr) {
    const std::uint64_t bit = std::uint64_t{1} << owner_->index;
    if ((owner_->core->idle_mask.fetch_or(0, std::memory_order_seq_cst) & bit) != 0) {
      owner_->wake_word.fetch_add(1, std::memory_order_release);
      futex_wake_one(&owner_->wake_word);
    }
  }
}

void local_timers::drain_cancels() noexcept {
  if (cancels_.load(std::memory_order_relaxed) == nullptr) return;
  pending_base* p = cancels_.exchange(nullptr, std::memory_order_acq_rel);
  while (p != nullptr) {
    pending_base* next = p->cancel_next;
    cancel(p);
    release(p);
    p = next;
  }
}

void local_timers::expire(pending_base* p, const error& why) noexcept {
  // Settled already (a reply claimed it; its cancel is on the way): only the reference is left.
  if (p->state.load(std::memory_order_acquire) != 0) {
    release(p);
    return;
  }
  reply_error(p, why);
}

void local_timers::poll() noexcept {
  drain_cancels();
  if (count_ == 0) return;
  const std::int64_t now = steady_now_ns();
  while (pending_base* p = fresh_) {  // their deadlines count from now
    unlink(p);
    p->timer_fresh = false;
    p->deadline_ns = saturating_deadline(now, std::chrono::nanoseconds(p->deadline_ns));
    link(p);
  }
  const std::uint64_t now_tick = static_cast<std::uint64_t>(now) >> tick_shift;
  if (now_tick < current_tick_) return;
  const std::uint64_t span = std::min<std::uint64_t>(now_tick - current_tick_ + 1, slot_count);
  pending_base* due = nullptr;  // collected first: firing may start new timers here
  for (std::uint64_t i = 0; i < span && count_ != 0; ++i) {
    pending_base* p = slots_[(current_tick_ + i) % slot_count];
    while (p != nullptr) {
      pending_base* next = p->timer_next;
      if (p->deadline_ns <= now) {
        unlink(p);
        p->timer_next = due;
        due = p;
      }
      p = next;
    }
  }
  current_tick_ = now_tick;  // this slot again next time: it may hold later deadlines of this tick
  if (due == nullptr) return;
  const error timed_out(errc::request_timeout, "no reply before the request's deadline");
  while (due != nullptr) {
    pending_base* next = due->timer_next;
    due->timer_next = nullptr;
    expire(due, timed_out);
    due = next;
  }
}

std::int64_t local_timers::wait_hint() const noexcept {
  if (count_ == 0) return -1;
  if (fresh_ != nullptr) return 0;  // not placed yet: check again first
  for (std::uint64_t i = 0; i < slot_count; ++i) {
    if (slots_[(current_tick_ + i) % slot_count] == nullptr) continue;
    // The end of that slot's tick; an entry there may be a turn later (a spare wake-up).
    const auto due = static_cast<std::int64_t>((current_tick_ + i + 1) << tick_shift);
    return std::max<std::int64_t>(due - steady_now_ns(), 0);
  }
  return -1;
}

void local_timers::close() noexcept {
  pending_base* p = cancels_.exchange(inbox_closed, std::memory_order_acq_rel);
  while (p != nullptr && p != inbox_closed) {
    pending_base* next = p->cancel_next;
    cancel(p);
    release(p);
    p = next;
  }
  const error why(errc::system_shutdown, "the system shut down before the request's deadline");
  while (pending_base* q = fresh_) {
    unlink(q);
    expire(q, why);
  }
  for (auto& head : slots_) {
    while (head != nullptr) {
      pending_base* q = head;
      unlink(q);
      expire(q, why);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// timer_service: the shared heap

timer_service::timer_service(system_core* core, clock_kind kind)
    : core_(core),
      virtual_clock_(kind == clock_kind::virtual_clock),
      host_driven_(kind == clock_kind::host),
      virtual_now_(steady_now_ns()) {
  heap_.reserve(1024);
  due_.reserve(64);
  virtual_due_.reserve(64);
  if (kind == clock_kind::own_thread) thread_ = std::thread([this] { loop(); });
}

timer_service::~timer_service() { stop(); }

void timer_service::place(std::size_t pos) noexcept {
  if (heap_[pos].pending != nullptr)
    heap_[pos].pending->timer_pos = static_cast<std::int32_t>(pos);
  else
    heap_[pos].record->heap_pos = static_cast<std::int32_t>(pos);
}

void timer_service::sift_up(std::size_t pos) noexcept {
  while (pos > 0) {
    std::size_t parent = (pos - 1) / 2;
    if (!earlier(heap_[pos], heap_[parent])) break;
    std::swap(heap_[pos], heap_[parent]);
    place(pos);
    pos = parent;
  }
  place(pos);
}

void timer_service::sift_down(std::size_t pos) noexcept {
  const std::size_t n = heap_.size();
  for (;;) {
    std::size_t best = pos;
    std::size_t l = 2 * pos + 1, r = l + 1;
    if (l < n && earlier(heap_[l], heap_[best])) best = l;
    if (r < n && earlier(heap_[r], heap_[best])) best = r;
    if (best == pos) break;
    std::swap(heap_[pos], heap_[best]);
    place(pos);
    pos = best;
  }
  place(pos);
}

void timer_service::remove_at(std::size_t pos) noexcept {
  if (heap_[pos].pending != nullptr)
    heap_[pos].pending->timer_pos = -1;
  else
    heap_[pos].record->heap_pos = -1;
  const std::size_t last = heap_.size() - 1;
  if (pos != last) {
    heap_[pos] = heap_[last];
    heap_.pop_back();
    sift_up(pos);
    sift_down(pos);
  } else {
    heap_.pop_back();
  }
  if (pos == 0) publish_earliest();
}

std::int64_t timer_service::now_ns() noexcept {
  if (!virtual_clock_) return steady_now_ns();
  std::lock_guard lock(mutex_);
  return virtual_now_;
}

bool timer_service::push_locked(std::int64_t deadline, pending_base* p, timer_record* r, bool& earliest) {
  if (stop_) return false;
  const std::uint64_t seq = seq_++;
  heap_.push_back({deadline, seq, p, r});
  sift_up(heap_.size() - 1);
  earliest = heap_.front().seq == seq;
  if (earliest) publish_earliest();
  return true;
}

bool timer_service::push(std::chrono::nanoseconds delay, pending_base* p, timer_record* r) {
  std::unique_lock lock(mutex_);
  const std::int64_t now = virtual_clock_ ? virtual_now_ : steady_now_ns();
  bool earliest = false;
  const std::int64_t deadline = saturating_deadline(now, delay);
  if (!push_locked(deadline, p, r, earliest)) return false;
  const bool before_next_look = deadline < next_look_;
  lock.unlock();
  // The thread sleeps until the earliest deadline it knows, or for idle_look with none; only a
  // deadline before that changes its plan (a connection's time-outs of seconds, armed and
  // cancelled with each connection, then wake no one). A host that drives time learns of it
  // through wake_fd, unless it is inside a run call right now: it reads next_deadline() after
  // every run call anyway.
  if (earliest) {
    if (host_driven_) {
      if (running_core != core_) core_->signal_fd();
    } else if (!virtual_clock_ && before_next_look) {
      wake_.notify_one();
    }
  }
  return true;
}

void timer_service::start_request(pending_base* p, std::chrono::nanoseconds timeout) {
  p->refs.fetch_add(1, std::memory_order_relaxed);
  if (!push(timeout, p, nullptr))
    reply_error(p, error(errc::system_shutdown, "the system's timer had stopped when the request was made"));
}

void timer_service::cancel_request(pending_base* p) noexcept {
  bool removed = false;
  {
    std::lock_guard lock(mutex_);
    if (p->timer_pos >= 0) {
      remove_at(static_cast<std::size_t>(p->timer_pos));
      removed = true;
    }
  }
  if (removed) release(p);
}

void timer_service::start_record(timer_record* r, std::chrono::nanoseconds delay) {
  if (push(delay, nullptr, r)) return;
  std::uint32_t expected = timer_record::armed;
  r->state.compare_exchange_strong(expected, timer_record::finished, std::memory_order_acq_rel);
  r->ops->drop(r, error(errc::system_shutdown, "the system's timer had stopped when the timer was started"));
  release(r);
}

void timer_service::remove_record(timer_record* r) noexcept {
  bool removed = false;
  {
    std::lock_guard lock(mutex_);
    if (r->heap_pos >= 0) {
      remove_at(static_cast<std::size_t>(r->heap_pos));
      removed = true;
    }
  }
  if (!removed) return;  // being fired right now: the timer sees the cancel and drops it
  r->ops->drop(r, error(errc::actor_stopped, "the timer was cancelled"));
  release(r);
}

void timer_service::fire(entry& e) noexcept {
  if (e.pending != nullptr) {
    if (e.pending->state.load(std::memory_order_acquire) != 0) {
      release(e.pending);
      return;
    }
    reply_error(e.pending, error(errc::request_timeout, "no reply before the request's deadline"));
    return;
  }
  timer_record* r = e.record;
  if (r->state.load(std::memory_order_acquire) != timer_record::armed) {
    r->ops->drop(r, error(errc::actor_stopped, "the timer was cancelled"));
    release(r);
    return;
  }
  const std::int64_t period = r->ops->fire(r);
  if (period <= 0) {
    release(r);
    return;
  }
  // Periodic: the next tick a period after this one was due, or a period from now if the timer
  // fell behind (ticks are not made up for).
  std::unique_lock lock(mutex_);
  const std::int64_t now = virtual_clock_ ? virtual_now_ : steady_now_ns();
  std::int64_t next = saturating_deadline(e.deadline, std::chrono::nanoseconds(period));
  if (next <= now) next = saturating_deadline(now, std::chrono::nanoseconds(period));
  bool earliest = false;
  if (push_locked(next, nullptr, r, earliest)) return;
  lock.unlock();
  r->ops->drop(r, error(errc::system_shutdown));
  release(r);
}

void timer_service::fire_due(std::unique_lock<std::mutex>& lock, std::size_t& fired) {
  // Firing may start timers that are already due (a zero delay, a period): keep going until none is.
  std::vector<entry>& due = virtual_due_;  // kept: stepping the clock allocates nothing
  for (;;) {
    due.clear();
    while (!heap_.empty() && heap_.front().deadline <= virtual_now_) {
      due.push_back(heap_.front());
      remove_at(0);
    }
    if (due.empty()) return;
    lock.unlock();
    for (auto& e : due) fire(e);
    fired += due.size();
    lock.lock();
  }
}

std::size_t timer_service::fire_due_now() {
  if (!host_driven_ || earliest_ns() > steady_now_ns()) return 0;
  std::size_t fired = 0;
  std::unique_lock lock(mutex_);
  const std::int64_t now = steady_now_ns();
  std::vector<entry>& due = virtual_due_;  // the driving thread's, as the virtual clock's: one at a time
  for (;;) {
    due.clear();
    while (!heap_.empty() && heap_.front().deadline <= now) {
      due.push_back(heap_.front());
      remove_at(0);
    }
    if (due.empty()) return fired;
    lock.unlock();
    for (auto& e : due) fire(e);
    fired += due.size();
    lock.lock();
  }
}

std::size_t timer_service::advance(std::chrono::nanoseconds by) {
  if (by.count() < 0) throw std::invalid_argument("courier: advance_time needs a step >= 0");
  if (!virtual_clock_) return 0;
  std::size_t fired = 0;
  std::unique_lock lock(mutex_);
  virtual_now_ = saturating_deadline(virtual_now_, by);
  fire_due(lock, fired);
  return fired;
}

bool timer_service::advance_idle(std::int64_t limit) {
  if (!virtual_clock_) return false;
  std::unique_lock lock(mutex_);
  if (virtual_now_ >= limit) return false;
  std::int64_t to = limit;
  if (!heap_.empty() && heap_.front().deadline < to)
    to = heap_.front().deadline;
  else if (heap_.empty() && limit == INT64_MAX)
    return false;  // no timer and no deadline: time has nowhere to go
  if (to > virtual_now_) virtual_now_ = to;
  std::size_t fired = 0;
  fire_due(lock, fired);
  return true;
}

void timer_service::loop() {
  // With no timer the thread still looks now and then, so that a push far ahead need not wake it.
  constexpr std::int64_t idle_look = 1'000'000'000;
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const auto now = steady_now_ns();
    // A copy: pushes while we wait may reallocate the heap under a reference into it.
    const std::int64_t first = heap_.empty() ? now + idle_look : heap_.front().deadline;
    if (first > now) {
      next_look_ = first;
      wake_.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(first)));
      next_look_ = INT64_MIN;
      continue;
    }
    due_.clear();
    while (!heap_.empty() && heap_.front().deadline <= now && due_.size() < 64) {
      due_.push_back(heap_.front());
      remove_at(0);
    }
    lock.unlock();
    for (auto& e : due_) fire(e);
    lock.lock();
  }
}

void timer_service::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stop_) return;
    stop_ = true;
    stopped_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<entry> left;
  {
    std::lock_guard lock(mutex_);
    for (auto& e : heap_) {
      if (e.pending != nullptr)
        e.pending->timer_pos = -1;
      else
        e.record->heap_pos = -1;
    }
    left.swap(heap_);
    publish_earliest();
  }
  const error why(errc::system_shutdown, "the system shut down before the timer's deadline");
  for (auto& e : left) {
    if (e.pending != nullptr) {
      if (e.pending->state.load(std::memory_order_acquire) != 0)
        release(e.pending);
      else
        reply_error(e.pending, why);
    } else {
      std::uint32_t expected = timer_record::armed;
      e.record->state.compare_exchange_strong(expected, timer_record::finished, std::memory_order_acq_rel);
      e.record->ops->drop(e.record, why);
      release(e.record);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Entry points for the header templates

void start_request_timer(system_core* core, pending_base* pending, std::chrono::nanoseconds timeout) {
  worker* w = this_worker;
  if (w == nullptr || w->core != core) {
    core->timers.start_request(pending, timeout);
    return;
  }
  pending->refs.fetch_add(1, std::memory_order_relaxed);
  if (core->timers.stopped()) [[unlikely]] {
    reply_error(pending, error(errc::system_shutdown, "the system's timer had stopped when the request was made"));
    return;
  }
  w->timers.start(pending, timeout);
}

void cancel_request_timer(system_core* core, pending_base* pending) noexcept {
  local_timers* home = pending->timer_home;
  if (home == nullptr) {
    core->timers.cancel_request(pending);
  } else if (worker* w = this_worker; w != nullptr && &w->timers == home) {
    home->cancel(pending);
  } else {
    home->remote_cancel(pending);
  }
}

void start_timer(system_core* core, timer_record* record, std::chrono::nanoseconds delay) {
  record->core = core;
  core->timers.start_record(record, delay);
}

void remove_cancelled_timer(system_core* core, timer_record* r) noexcept { core->timers.remove_record(r); }

bool runs_in_system(const system_core* core) noexcept {
  return current_actor != nullptr && current_actor->core() == core;
}

std::int64_t timer_now_ns(system_core* core) noexcept { return core->timers.now_ns(); }

bool uses_virtual_clock(const system_core* core) noexcept { return core->timers.virtual_clock(); }

bool advance_idle(system_core* core, std::int64_t limit) { return core->timers.advance_idle(limit); }

}  // namespace courier::detail
