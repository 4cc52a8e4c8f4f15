#pragma once
/// @file
/// What a node and its connection actors share (node_core): the reactor and who polls it, the
/// registry of live connections (to count them and close them at stop), the session numbers, and
/// the receive memory its listeners count against. Private to the network layer: users hold a
/// `node` (node.hpp).
///
/// Thread-safety: every member may be called from any thread (the registry is under a lock).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "courier/detail/runtime.hpp"
#include "courier/net/connection_config.hpp"
#include "courier/net/context.hpp"
#include "courier/net/detail/live_counters.hpp"
#include "courier/net/detail/reactor.hpp"
#include "courier/system.hpp"

namespace courier::net::detail {

class acceptor;

/// What the node and its connection actors share: the reactor, the connections alive (to close
/// them at stop), and who polls the reactor. The system polls it through courier::detail::io_poller
/// where it can (a threaded system's workers when they would park; an embedded system's host
/// loop, the reactor's fd joined to wake_fd); otherwise a thread of the node's own waits on it.
/// Kept alive by every connection actor, so the reactor outlives the last registration.
class node_core {
 public:
  explicit node_core(courier::system& sys);
  ~node_core();

  courier::system& system() noexcept { return sys_; }
  courier::detail::system_core* core() const noexcept { return core_; }
  net::detail::reactor& io() noexcept { return reactor_; }

  /// A connection actor started (counted, and closed at stop through `close`, which queues it a
  /// close_request) or stopped. The node holds a reference to each while it is listed.
  void enter(courier::detail::actor_base* connection, void (*close)(courier::detail::actor_base*),
             const live_counters* counters, const std::uint16_t* context_map);
  void leave(courier::detail::actor_base* connection) noexcept;

  /// Keeps a listener (its accept handler) until stop.
  void keep(std::unique_ptr<acceptor> a);

  /// Stops accepting, asks every connection to close, and stops polling the reactor once they
  /// are gone (or after `grace`).
  void stop(std::chrono::milliseconds grace);

  std::size_t connections() const;
  /// A new session's number: from 1, never reused while the node lives.
  std::uint64_t next_session_id() noexcept { return next_session_.fetch_add(1, std::memory_order_relaxed) + 1; }
  /// The next session is numbered `first` (and those after it from there).
  void number_sessions_from(std::uint64_t first) noexcept { next_session_.store(first - 1, std::memory_order_relaxed); }
  /// A listener's share for its connections: their count and the receive memory they count
  /// against: the node's budget where it was given one, else one of cfg.max_receive_memory.
  std::shared_ptr<listener_share> make_share(const connection_config& cfg) const {
    auto share = std::make_shared<listener_share>();
    share->memory = memory_;
    if (!share->memory && cfg.max_receive_memory != 0)
      share->memory = std::make_shared<receive_memory>(cfg.max_receive_memory);
    share->log = cfg.log;
    return share;
  }
  /// Every connection of this node counts its receive memory against `budget` (shared with other
  /// nodes of the process), whatever its config's max_receive_memory.
  void count_receive_memory_against(std::shared_ptr<receive_memory> budget) noexcept { memory_ = std::move(budget); }
  /// The counters of `connection` if it is one of this node's and alive; nothing otherwise.
  std::optional<connection_counters> counters_of(const courier::detail::actor_base* connection) const;
  /// The parent context of `connection` if it is one of this node's and alive (a new reference).
  context_ref context_of(courier::detail::actor_base* connection) const;
  /// Waits until a connection was made and none is left (or stop()); for a --pipe server, whose
  /// one connection is its life. False on time-out.
  bool wait_no_connections(std::chrono::milliseconds timeout);
  /// Waits until stop() (from another thread or a signal watcher).
  void wait_stopped();
  /// True when the system polls the reactor (its workers, or an embedded host's run calls): the
  /// node has no thread of its own.
  bool polled_by_system() const noexcept { return by_system_; }

 private:
  /// Waits up to `grace` for the connections to close; drives a manual system meanwhile when
  /// called on its driving thread (outside any actor), where nobody else would run them.
  void wait_closed(std::chrono::milliseconds grace);

  courier::system& sys_;
  courier::detail::system_core* core_;
  net::detail::reactor reactor_;
  courier::detail::io_poller poller_{};
  bool by_system_ = false;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  struct listed {
    courier::detail::actor_base* actor;
    void (*close)(courier::detail::actor_base*);
    const live_counters* counters;
    const std::uint16_t* context_map;  // the connection's type indices for context_calls
  };
  // Keyed by the actor: a connection leaves, and is looked up, in constant time at any count.
  std::unordered_map<const courier::detail::actor_base*, listed> connections_;
  std::vector<std::shared_ptr<acceptor>> acceptors_;  // shared: leave() may be retrying one
  bool ever_connected_ = false;
  std::shared_ptr<receive_memory> memory_;  // set before the node serves: read without the lock
  bool stopped_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> next_session_{0};
  std::thread thread_;  // only when the system cannot poll (embedded with on_wake)
};

}  // namespace courier::net::detail
