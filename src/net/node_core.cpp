// The node's reactor (polled by the system, or by a thread of its own) and its registry of live
// connections.
#include "courier/net/detail/node_core.hpp"

#include <algorithm>

#include "courier/net/detail/acceptor.hpp"

namespace courier::net::detail {

node_core::node_core(courier::system& sys) : sys_(sys), core_(courier::detail::core_of(sys)) {
  courier::detail::retain_core(core_);
  poller_ = reactor_.as_io_poller();
  // Threaded: the workers poll the reactor when they would park. Embedded with wake_fd: the
  // reactor joins wake_fd and the host's run calls poll it. Otherwise a thread of our own.
  by_system_ = courier::detail::attach_io_poller(core_, &poller_);
  if (!by_system_) {
    thread_ = std::thread([this] {
      while (!stopping_.load(std::memory_order_acquire)) reactor_.run_once(-1);
    });
  }
}

node_core::~node_core() {
  stop(std::chrono::milliseconds(0));
  courier::detail::release_core(core_);
}

void node_core::enter(courier::detail::actor_base* connection, void (*close)(courier::detail::actor_base*),
                      const live_counters* counters, const std::uint16_t* context_map) {
  connection->add_ref();  // released by leave(): a listed connection is never freed under us
  {
    std::lock_guard lock(mutex_);
    connections_.emplace(connection, listed{connection, close, counters, context_map});
    ever_connected_ = true;
    if (!stopped_) return;
  }
  // Accepted or connected while stop() ran, after it asked the others to close: this one too.
  close(connection);
}

context_ref node_core::context_of(courier::detail::actor_base* connection) const {
  std::lock_guard lock(mutex_);
  const auto it = connections_.find(connection);
  if (it == connections_.end()) return {};
  connection->add_ref();
  return context_ref(actor_ref<detail::context_calls>::adopt(connection, it->second.context_map), 0);
}

std::optional<connection_counters> node_core::counters_of(const courier::detail::actor_base* connection) const {
  std::lock_guard lock(mutex_);
  const auto it = connections_.find(connection);
  if (it == connections_.end()) return std::nullopt;
  return it->second.counters->read();
}

void node_core::leave(courier::detail::actor_base* connection) noexcept {
  bool found = false;
  std::vector<std::shared_ptr<acceptor>> starved;  // allocates only when one is
  {
    std::lock_guard lock(mutex_);
    found = connections_.erase(connection) != 0;
    changed_.notify_all();
    if (!stopped_)
      for (auto& a : acceptors_)
        if (a->starved()) starved.push_back(a);
  }
  // A descriptor was freed: a listener that ran out of them accepts what waits in its backlog.
  // Held by a reference of our own: stop() may drop the node's meanwhile.
  for (auto& a : starved) a->retry();
  if (found) connection->release();
}

void node_core::keep(std::unique_ptr<acceptor> a) {
  std::lock_guard lock(mutex_);
  acceptors_.push_back(std::shared_ptr<acceptor>(std::move(a)));
}

std::size_t node_core::connections() const {
  std::lock_guard lock(mutex_);
  return connections_.size();
}

bool node_core::wait_no_connections(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const auto done = [this] { return (ever_connected_ && connections_.empty()) || stopped_; };
  if (timeout.count() <= 0) return done();  // a look, without a futex call (a session thread's loop)
  return changed_.wait_for(lock, timeout, done);
}

void node_core::wait_stopped() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return stopped_; });
}

void node_core::stop(std::chrono::milliseconds grace) {
  std::vector<std::shared_ptr<acceptor>> acceptors;
  std::vector<listed> open;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    acceptors.swap(acceptors_);
    open.reserve(connections_.size());
    for (const auto& entry : connections_) {
      entry.second.actor->add_ref();
      open.push_back(entry.second);
    }
    changed_.notify_all();
  }
  for (auto& a : acceptors) reactor_.remove(a->listening().fd());
  // Each connection closes in order: it sends close, answers the calls it received (and waits for
  // the answers to its own) and ends when the close completes. What is left after the grace is
  // stopped at once: its on_stop fails its calls in flight with connection_lost.
  for (auto& c : open) c.close(c.actor);
  wait_closed(grace);
  for (auto& c : open) {
    c.actor->request_exit(errc::connection_lost, true);
    c.actor->release();
  }
  wait_closed(std::min<std::chrono::milliseconds>(grace, std::chrono::milliseconds(500)));
  // Nobody polls the reactor after this; the listeners close once no poller can be inside them.
  if (by_system_) {
    courier::detail::detach_io_poller(core_);
  } else {
    stopping_.store(true, std::memory_order_release);
    reactor_.wake();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  }
  acceptors.clear();
}

void node_core::wait_closed(std::chrono::milliseconds grace) {
  namespace cd = courier::detail;
  auto none_left = [this] { return connections_.empty(); };
  if (!cd::is_manual(core_) || cd::current_actor != nullptr) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, grace, none_left);
    return;
  }
  // A manual system's connections close only when driven: on its driving thread, drive it here
  // (as ask does), sockets included; elsewhere wait for the host's loop to do it.
  const auto until = std::chrono::steady_clock::now() + grace;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (none_left()) return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return;
    if (cd::drive_once(core_)) continue;
    const auto wait = std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(1));
    if (cd::wait_for_work(core_, std::chrono::duration_cast<std::chrono::nanoseconds>(wait))) continue;
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, wait, none_left);
  }
}

}  // namespace courier::net::detail
