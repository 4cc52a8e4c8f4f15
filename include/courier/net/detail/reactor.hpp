#pragma once
/// @file
/// The readiness layer: one epoll instance that tells handlers their descriptors are ready.
///
/// Level-triggered unless a registration asks for `EPOLLET`: by default a descriptor that stays
/// readable (or writable) is reported again on the next run_once(), so a handler may stop reading
/// after a budget of bytes (fairness between connections) without losing the wake-up, and a handler
/// watching for EPOLLOUT drops it (modify) once its output is flushed, or it is called every round.
/// With `EPOLLET` a handler hears of each change of readiness once and must read (or write) until
/// EAGAIN before it can expect another event: the choice of a handler that hands the work to another
/// thread and does not want the reactor to spin while that thread catches up.
///
/// A handler is called through one virtual function per readiness event, never per message. The
/// reactor stores a generation with each registration, so an event that was already collected for a
/// descriptor that a handler in the same round removed (or removed and re-added) is skipped instead of
/// reaching a dead or wrong handler.
///
/// The epoll descriptor itself is pollable (fd()): a host program's own loop can wait on it and call
/// run_once(0) when it is readable. wake() makes a blocked run_once() return from any thread (an
/// eventfd inside the epoll set).
///
/// Thread-safety: run_once(timeout) uses the reactor's own event buffer: one thread at a time (the
/// reactor's thread). run_once(timeout, buffer) may run on several threads at once (the workers of a
/// system that poll it when they would park, see node.hpp). Handlers run under the registration
/// table's lock, so handlers are called one at a time, and remove() waits for a running on_io() of
/// that descriptor: once remove() returned the handler may be destroyed. A handler may remove()
/// registrations, its own included (the lock is recursive). add() and modify() may be called from any thread. wake()
/// is safe anywhere, including signal handlers.

#include <sys/epoll.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "courier/detail/runtime.hpp"
#include "courier/error.hpp"
#include "courier/net/socket.hpp"

namespace courier::net::detail {

/// Receives readiness events; `epoll_events` is the EPOLLIN/EPOLLOUT/EPOLLHUP/EPOLLERR mask.
struct io_handler {
  virtual void on_io(std::uint32_t epoll_events) noexcept = 0;

  /// Memory the handler's readiness leads to (a connection's actor, whose turn follows): the
  /// reactor starts loading it for a whole batch of events before it dispatches the first. Set
  /// before the handler is added.
  const void* warm_at = nullptr;
  std::uint32_t warm_bytes = 0;

 protected:
  ~io_handler() = default;
};

class reactor {
 public:
  /// Creates the epoll instance and its wake-up eventfd; throws std::system_error if the kernel
  /// refuses (out of descriptors): a session that cannot get one is refused, the process goes on.
  reactor();
  reactor(const reactor&) = delete;
  reactor& operator=(const reactor&) = delete;
  ~reactor();

  /// The epoll descriptor: readable when run_once(0) has something to dispatch.
  [[nodiscard]] int fd() const noexcept { return epoll_.fd(); }

  /// Watches `fd` for `events` (EPOLLIN, EPOLLOUT, ...); `handler` must outlive the registration.
  [[nodiscard]] courier::result<void> add(int fd, std::uint32_t events, io_handler* handler);
  /// Changes the events (and handler) of a watched descriptor.
  [[nodiscard]] courier::result<void> modify(int fd, std::uint32_t events, io_handler* handler);
  /// The registration of a watched descriptor as the events carry it (0 if it is not watched),
  /// for modify_events.
  [[nodiscard]] std::uint64_t registration_tag(int fd) const;
  /// Changes only the events of `fd`, registered under `tag` (registration_tag after add), without
  /// the table's lock: the kernel orders epoll_ctl calls, and the handler and its generation stay
  /// as they are. For the owner of a registration that changes its events on its own path (a
  /// connection whose socket leaves the reactor while a thread drives it), never concurrently with
  /// its own remove().
  [[nodiscard]] courier::result<void> modify_events(int fd, std::uint64_t tag, std::uint32_t events);
  /// Stops watching `fd` (a no-op if it is not watched). Call before closing the descriptor.
  void remove(int fd) noexcept;

  /// Waits up to `timeout_ms` (-1: until something happens, 0: just look) and calls the handlers of
  /// the ready descriptors; returns how many handler calls it made (a wake() alone returns 0).
  std::size_t run_once(int timeout_ms) noexcept;
  /// The same, collecting events into `buffer` (a caller's own), so that several threads may poll.
  std::size_t run_once(int timeout_ms, std::span<epoll_event> buffer) noexcept;

  /// Calls the handler registered under `tag` with `events` as run_once() would had epoll reported
  /// them, under the same lock (a handler removed meanwhile is not called); 0 when it is gone. Any
  /// thread.
  std::size_t report(std::uint64_t tag, std::uint32_t events) noexcept;
  /// Makes a run_once() that is waiting (or the next one) return. Any thread; async-signal-safe.
  void wake() noexcept;

  /// What a system that polls this reactor (its workers, or an embedded host's run calls) calls:
  /// run_once on the caller's own buffer, wake() and fd().
  [[nodiscard]] courier::detail::io_poller as_io_poller() noexcept;

  /// How many descriptors are watched (not counting the wake-up eventfd).
  [[nodiscard]] std::size_t watched() const noexcept;

 private:
  struct slot {
    io_handler* handler = nullptr;
    std::uint32_t generation = 0;
  };
  [[nodiscard]] courier::result<void> control(int op, int fd, std::uint32_t events, io_handler* handler);
  void warm(std::span<const epoll_event> ready) noexcept;

  socket epoll_;
  socket wake_;
  mutable std::recursive_mutex table_mutex_;  // recursive: a handler may remove() registrations, its own included
  std::vector<slot> slots_;                   // by descriptor number
  std::size_t watched_ = 0;
  static constexpr std::size_t batch = 64;
  epoll_event ready_[batch];
};

/// A reactor with its own thread, which runs run_once(-1) until stop() (or destruction).
/// Thread-safety: stop() and the reactor's thread-safe calls from any thread.
class reactor_thread {
 public:
  reactor_thread();
  reactor_thread(const reactor_thread&) = delete;
  reactor_thread& operator=(const reactor_thread&) = delete;
  ~reactor_thread() { stop(); }

  [[nodiscard]] reactor& get() noexcept { return reactor_; }
  [[nodiscard]] std::thread::id thread_id() const noexcept { return thread_.get_id(); }
  /// Makes the thread leave its loop after the current round and joins it. Idempotent; not from the
  /// reactor's own thread.
  void stop() noexcept;

 private:
  reactor reactor_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;  // last: starts once the members it uses exist
};

/// A reactor handler the node owns and frees (the reactor's io_handler has no virtual destructor).
class owned_handler : public io_handler {
 public:
  virtual ~owned_handler() = default;
};

}  // namespace courier::net::detail
