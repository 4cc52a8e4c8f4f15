#pragma once
/// @file
/// The actor system: spawns actors, owns the scheduler and the timer, and shuts down in bounded time.
///
/// After `shutdown`, `spawn` throws, the run functions run nothing, and the counters keep their
/// final values.
///
/// Thread-safety: `spawn`, `dead_letters` and `live_actors` may be called from any thread,
/// including from handlers. `run_one`, `poll` and `run_until_idle` (manual modes) are for one
/// driving thread at a time. `shutdown` and the destructor are for the owning thread.
///
/// Actor references must not be used after their system is destroyed.

#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "courier/actor.hpp"
#include "courier/actor_ref.hpp"
#include "courier/scheduler.hpp"

namespace courier {

/// What shutdown found: `clean` when every actor stopped before the deadline; otherwise
/// `unfinished` names the actors that did not ("<type>#<id>").
struct shutdown_report {
  bool clean = true;
  std::vector<std::string> unfinished;
};

namespace detail {
template <class... Ts>
struct first_of {
  using type = void;
};
template <class T, class... Ts>
struct first_of<T, Ts...> {
  using type = T;
};
template <class... Ts>
using first_of_t = typename first_of<Ts...>::type;
}  // namespace detail

/// Per-spawn settings: `sys.spawn<T>(courier::spawn_options{.mailbox_capacity = 1000}, args...)`.
struct spawn_options {
  /// Bounds the actor's mailbox: sends beyond it are refused (`send` returns false and reports a
  /// dead letter with reason mailbox_full, `try_send` returns send_result::full, a request fails
  /// with errc::mailbox_full). 0 takes `T::mailbox_capacity` if the actor declares one
  /// (`static constexpr std::size_t mailbox_capacity = N;`), else unbounded. Replies, stop
  /// requests and `down` are never refused. At most 2^32 - 1.
  std::size_t mailbox_capacity = 0;
};

class system {
 public:
  explicit system(config cfg = {});
  system(const system&) = delete;
  system& operator=(const system&) = delete;
  /// Shuts down with a 5 s deadline if `shutdown` was not called; unfinished actors are printed.
  ~system();

  /// Builds a `T` in a pooled slot and starts it. `T`'s constructor must not send (its reference
  /// does not exist yet); send it a first message instead. Throws std::system_error
  /// (errc::system_shutdown) after `shutdown`. The mailbox is bounded when `T` declares
  /// `static constexpr std::size_t mailbox_capacity = N;`, else unbounded.
  template <class T, class... Args>
    requires(!std::is_same_v<std::remove_cvref_t<detail::first_of_t<Args...>>, spawn_options>)
  actor_ref<T> spawn(Args&&... args) {
    return spawn<T>(spawn_options{}, std::forward<Args>(args)...);
  }

  /// As above, with per-spawn settings (a mailbox capacity that overrides the type's).
  template <class T, class... Args>
  actor_ref<T> spawn(spawn_options options, Args&&... args) {
    static_assert(std::is_base_of_v<detail::actor_base, T>, "courier: spawn<T> needs T derived from courier::actor");
    if (core_ == nullptr) throw std::system_error(make_error_code(errc::system_shutdown), "courier: spawn after shutdown");
    std::size_t capacity = options.mailbox_capacity;
    if constexpr (requires { T::mailbox_capacity; }) {
      static_assert(T::mailbox_capacity > 0 && T::mailbox_capacity <= 0xffffffffu,
                    "courier: an actor's mailbox_capacity must be between 1 and 2^32 - 1");
      if (capacity == 0) capacity = T::mailbox_capacity;
    }
    if (capacity > 0xffffffffu)
      throw std::system_error(make_error_code(std::errc::invalid_argument), "courier: mailbox capacity above 2^32 - 1");
    void* slot = pool::allocate(sizeof(T), pool::max_alignment);  // see actor_base: cache-line layout
    T* object;
    try {
      object = ::new (slot) T(std::forward<Args>(args)...);
    } catch (...) {
      pool::deallocate(slot, sizeof(T), pool::max_alignment);
      throw;
    }
    detail::actor_base* base = object;
    base->identity().core = core_;
    base->mailbox_.set_capacity(static_cast<std::uint32_t>(capacity));
    object->self_ = actor_ref<T>::adopt(base);  // the keep-alive reference
    detail::register_actor(core_, base);
    base->add_ref();
    return actor_ref<T>::adopt(base);
  }

  /// Asks every actor to stop (after the messages already queued), waits up to `deadline` for
  /// them, then stops the workers. Actors still running at the deadline (a handler that never
  /// returns) are reported, not waited for: their threads are left to finish on their own.
  shutdown_report shutdown(timespan deadline = std::chrono::seconds(5));

  /// Manual modes. `run_one` handles at most one message; `poll` runs the actors ready now for
  /// one turn each; `run_until_idle` runs until nothing is ready. Each returns how much it ran.
  bool run_one();
  std::size_t poll();
  std::size_t run_until_idle();
  /// Deterministic mode runs on a virtual clock: time-outs and delayed sends come due only when
  /// this moves time forward; they fire on the calling thread (messages are then ready for
  /// `run_one`). Returns how many timers fired; does nothing in the other modes.
  std::size_t advance_time(timespan by);

  /// Readable when work is ready (embedded mode); `poll` clears it. -1 in threaded mode.
  int wake_fd() const noexcept;

  std::uint64_t dead_letters() const noexcept;
  std::size_t live_actors() const noexcept;
  std::size_t worker_count() const noexcept;
  const config& settings() const noexcept;

 private:
  detail::system_core* core_;  // null once shut down
  config settings_;
  std::uint64_t dead_letters_at_shutdown_ = 0;
};

}  // namespace courier
