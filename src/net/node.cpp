// The node's reactor (polled by the system, or by a thread of its own), its registry of live
// connections, and the accept loop.
#include "courier/net/node.hpp"

#include <algorithm>

namespace courier::net::detail {

node_core::node_core(courier::system& sys) : sys_(sys), core_(courier::detail::core_of(sys)) {
  courier::detail::retain_core(core_);
  poller_.context = this;
  poller_.poll = &poll_from_system;
  poller_.wake = &wake_from_any;
  poller_.fd = reactor_.fd();
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

std::size_t node_core::poll_from_system(void* self, int timeout_ms) noexcept {
  epoll_event ready[32];  // the caller's own: several workers may poll at once
  return static_cast<node_core*>(self)->reactor_.run_once(timeout_ms, ready);
}

void node_core::wake_from_any(void* self) noexcept { static_cast<node_core*>(self)->reactor_.wake(); }

void node_core::enter(courier::detail::actor_base* connection) {
  {
    std::lock_guard lock(mutex_);
    connections_.push_back(connection);
    ever_connected_ = true;
    if (!stopped_) return;
  }
  // Accepted or connected while stop() ran, after it asked the others to close: this one too.
  connection->request_exit(errc::connection_lost, true);
}

void node_core::leave(courier::detail::actor_base* connection) noexcept {
  std::lock_guard lock(mutex_);
  auto it = std::find(connections_.begin(), connections_.end(), connection);
  if (it != connections_.end()) connections_.erase(it);
  changed_.notify_all();
}

void node_core::keep(std::unique_ptr<owned_handler> a) {
  std::lock_guard lock(mutex_);
  acceptors_.push_back(std::move(a));
}

std::size_t node_core::connections() const {
  std::lock_guard lock(mutex_);
  return connections_.size();
}

bool node_core::wait_no_connections(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [this] { return (ever_connected_ && connections_.empty()) || stopped_; });
}

void node_core::wait_stopped() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return stopped_; });
}

void node_core::stop(std::chrono::milliseconds grace) {
  std::vector<std::unique_ptr<owned_handler>> acceptors;
  std::vector<courier::detail::actor_base*> open;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    acceptors.swap(acceptors_);
    open = connections_;
    for (auto* c : open) c->add_ref();
    changed_.notify_all();
  }
  for (auto& a : acceptors) reactor_.remove(static_cast<acceptor*>(a.get())->listening().fd());
  // Each connection closes in order (its on_stop sends close and fails its calls in flight).
  for (auto* c : open) {
    c->request_exit(errc::connection_lost, true);
    c->release();
  }
  wait_closed(grace);
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

void acceptor::on_io(std::uint32_t) noexcept {
  for (;;) {
    auto s = listener_.accept();
    if (!s) return;  // would block (all taken), or a transient failure: the next readiness retries
    try {
      start_(std::move(*s));
    } catch (...) {
      // Out of memory for the connection actor: the socket closes, the client sees it lost.
    }
  }
}

}  // namespace courier::net::detail
