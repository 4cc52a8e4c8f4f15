#pragma once
/// @file
/// A mailbox for a plain thread (`main`, a test): `courier::inbox<answer, down> in{sys};` gives an
/// `actor_ref` that actors can send to, and `in.receive<answer>(1s)` blocks until one arrives.
/// In the spirit of CAF's scoped_actor and Akka's TestProbe.
///
///     courier::inbox<total> in{sys};
///     worker.send(start{in.ref()});                  // the worker replies with in.ref().send(total{...})
///     courier::result<total> t = in.receive<total>(1s);  // or errc::request_timeout
///
/// Behind it is a small actor whose handler moves each message into a queue that `receive`
/// waits on. `receive<M>` takes the oldest `M` and leaves other types queued (selective receive);
/// `receive()` takes the oldest message of any type as a `std::variant<Msgs...>`.
/// On a manual (deterministic or embedded) system `receive` drives the system while it waits, as
/// `ask` does. The destructor stops the actor; messages sent after that are dead letters.
///
/// Thread-safety: `ref()` may be copied to any thread. `receive` is for threads that are not
/// workers (inside a handler it fails with errc::would_deadlock); concurrent receivers are safe,
/// each message goes to one of them. The inbox must not outlive its system.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <variant>

#include "courier/actor.hpp"
#include "courier/actor_ref.hpp"
#include "courier/error.hpp"
#include "courier/system.hpp"

namespace courier {

namespace detail {

template <class... Msgs>
struct inbox_state {
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<std::variant<Msgs...>> queue;
};

}  // namespace detail

/// The actor behind `inbox<Msgs...>`; name it in the refs actors keep to reply to a plain thread.
template <class... Msgs>
class inbox_actor : public actor<inbox_actor<Msgs...>, Msgs...> {
 public:
  explicit inbox_actor(std::shared_ptr<detail::inbox_state<Msgs...>> state) noexcept : state_(std::move(state)) {}

  // The slot is destroyed right after the handler returns, so the message can be moved out.
  template <class M>
  void on(M& msg) {
    {
      std::lock_guard lock(state_->mutex);
      state_->queue.emplace_back(std::in_place_type<M>, std::move(msg));
    }
    state_->arrived.notify_all();
  }

 private:
  std::shared_ptr<detail::inbox_state<Msgs...>> state_;  // shared with the inbox, which may go first
};

template <class... Msgs>
class inbox {
 public:
  using actor_type = inbox_actor<Msgs...>;
  using message = std::variant<Msgs...>;

  /// Spawns the inbox's actor in `sys`.
  explicit inbox(courier::system& sys)
      : state_(std::make_shared<detail::inbox_state<Msgs...>>()), ref_(sys.spawn<actor_type>(state_)) {}
  inbox(const inbox&) = delete;
  inbox& operator=(const inbox&) = delete;
  ~inbox() { ref_.stop(); }

  /// Where actors send to reach this inbox.
  const actor_ref<actor_type>& ref() const noexcept { return ref_; }

  /// The oldest message of any accepted type, or errc::request_timeout after `timeout`.
  result<message> receive(timespan timeout) {
    return wait_for(
        timeout, [](const message&) { return true; }, [](message&& m) { return std::move(m); });
  }

  /// The oldest `M`, or errc::request_timeout after `timeout`; other messages stay queued.
  template <class M>
  result<M> receive(timespan timeout) {
    static_assert(actor_type::template accepts<M>, "courier: receive<M> needs M in the inbox's message list");
    return wait_for(
        timeout, [](const message& m) { return std::holds_alternative<M>(m); },
        [](message&& m) { return std::get<M>(std::move(m)); });
  }

  /// Messages received and not yet taken.
  std::size_t size() const {
    std::lock_guard lock(state_->mutex);
    return state_->queue.size();
  }

 private:
  template <class Match, class Take>
  auto wait_for(timespan timeout, Match match, Take take) -> result<decltype(take(std::declval<message>()))> {
    using outcome = result<decltype(take(std::declval<message>()))>;
    if (detail::current_actor != nullptr || detail::on_worker_thread())
      return outcome(error(errc::would_deadlock, "inbox::receive blocks; it is for plain threads"));
    const auto deadline =
        timeout == infinite ? std::chrono::steady_clock::time_point::max() : std::chrono::steady_clock::now() + timeout;
    detail::system_core* core = ref_.base()->core();
    const bool manual = detail::is_manual(core);
    std::unique_lock lock(state_->mutex);
    for (;;) {
      for (auto it = state_->queue.begin(); it != state_->queue.end(); ++it) {
        if (match(*it)) {
          outcome out(take(std::move(*it)));
          state_->queue.erase(it);
          return out;
        }
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return outcome(error(errc::request_timeout, "inbox::receive: nothing arrived in time"));
      if (manual) {
        const auto wait = std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(1));
        lock.unlock();
        const bool ran = detail::drive_once(core);
        // The driving thread of an embedded system sleeps on wake_fd (new work, socket readiness).
        const bool waited = !ran && detail::wait_for_work(core, std::chrono::duration_cast<timespan>(wait));
        lock.lock();
        if (ran || waited) continue;
        // Nothing ready here: another thread may still send, so wait a little and look again.
        state_->arrived.wait_for(lock, wait);
      } else if (deadline == std::chrono::steady_clock::time_point::max()) {
        state_->arrived.wait(lock);
      } else {
        state_->arrived.wait_until(lock, deadline);
      }
    }
  }

  std::shared_ptr<detail::inbox_state<Msgs...>> state_;
  actor_ref<actor_type> ref_;
};

}  // namespace courier
