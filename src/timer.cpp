#include <algorithm>

#include "system_core.hpp"

namespace courier::detail {

timer_service::timer_service(system_core* core, bool virtual_clock)
    : core_(core), virtual_clock_(virtual_clock), virtual_now_(std::chrono::steady_clock::now()) {
  heap_.reserve(1024);
  due_.reserve(64);
  if (!virtual_clock_) thread_ = std::thread([this] { loop(); });
}

timer_service::~timer_service() { stop(); }

void timer_service::place(std::size_t pos) noexcept {
  if (heap_[pos].pending != nullptr) heap_[pos].pending->timer_pos = static_cast<std::int32_t>(pos);
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
  if (heap_[pos].pending != nullptr) heap_[pos].pending->timer_pos = -1;
  const std::size_t last = heap_.size() - 1;
  if (pos != last) {
    heap_[pos] = heap_[last];
    heap_.pop_back();
    sift_up(pos);
    sift_down(pos);
  } else {
    heap_.pop_back();
  }
}

void timer_service::push(std::chrono::nanoseconds delay, pending_base* p, actor_base* target, message_header* msg) {
  std::unique_lock lock(mutex_);
  if (stop_) {  // after shutdown (through a reference that outlived it): nothing would ever fire
    lock.unlock();
    if (p != nullptr) {
      reply_error(p, error(errc::system_shutdown, "the system had shut down before the request was sent"));
    } else {
      dead_letter(core_, target->id(), "delayed message");
      target->identity().ops->discard(msg, error(errc::system_shutdown));
      target->release();
    }
    return;
  }
  const auto now = virtual_clock_ ? virtual_now_ : std::chrono::steady_clock::now();
  const auto deadline = delay >= std::chrono::steady_clock::time_point::max() - now
                            ? std::chrono::steady_clock::time_point::max()
                            : now + delay;
  const std::uint64_t seq = seq_++;
  heap_.push_back({deadline, seq, p, target, msg});
  sift_up(heap_.size() - 1);
  const bool earliest = heap_.front().seq == seq;
  lock.unlock();
  if (earliest && !virtual_clock_) wake_.notify_one();
}

void timer_service::start_request(pending_base* p, std::chrono::nanoseconds timeout) {
  p->refs.fetch_add(1, std::memory_order_relaxed);
  push(timeout, p, nullptr, nullptr);
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

void timer_service::start_delayed(actor_base* target, message_header* msg, std::chrono::nanoseconds delay) {
  push(delay, nullptr, target, msg);
}

std::size_t timer_service::advance(std::chrono::nanoseconds by) {
  if (!virtual_clock_) return 0;
  std::vector<entry> due;
  std::size_t fired = 0;
  std::unique_lock lock(mutex_);
  virtual_now_ += by;
  // Firing may start timers that are already due (a zero delay): keep going until none is.
  for (;;) {
    due.clear();
    while (!heap_.empty() && heap_.front().deadline <= virtual_now_) {
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

void timer_service::fire(entry& e) noexcept {
  if (e.pending != nullptr) {
    reply_error(e.pending, error(errc::request_timeout, "no reply before the request's deadline"));
    return;
  }
  if (!e.target->enqueue(e.msg)) {
    dead_letter(core_, e.target->id(), "delayed message");
    e.target->identity().ops->discard(e.msg, error(errc::actor_stopped));
  }
  e.target->release();
}

void timer_service::loop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (heap_.empty()) {
      wake_.wait(lock);
      continue;
    }
    auto now = std::chrono::steady_clock::now();
    if (heap_.front().deadline > now) {
      wake_.wait_until(lock, heap_.front().deadline);
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
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<entry> left;
  {
    std::lock_guard lock(mutex_);
    for (auto& e : heap_)
      if (e.pending != nullptr) e.pending->timer_pos = -1;
    left.swap(heap_);
  }
  for (auto& e : left) {
    if (e.pending != nullptr) {
      reply_error(e.pending, error(errc::system_shutdown, "the system shut down before the request's deadline"));
    } else {
      dead_letter(core_, e.target->id(), "delayed message");
      e.target->identity().ops->discard(e.msg, error(errc::system_shutdown));
      e.target->release();
    }
  }
}

void start_request_timer(system_core* core, pending_base* pending, std::chrono::nanoseconds timeout) {
  core->timers.start_request(pending, timeout);
}

void cancel_request_timer(system_core* core, pending_base* pending) noexcept { core->timers.cancel_request(pending); }

void start_delayed_send(system_core* core, actor_base* target, message_header* msg, std::chrono::nanoseconds delay) {
  core->timers.start_delayed(target, msg, delay);
}

}  // namespace courier::detail
