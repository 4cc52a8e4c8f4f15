#pragma once
/// @file
/// The accept loop of one listener (acceptor), and the refusal a just-accepted socket gets
/// instead of its handshake. Private to the network layer: node::serve and serve_sessions start
/// one per listener.
///
/// Thread-safety: see acceptor.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>

#include "courier/net/connection_config.hpp"
#include "courier/net/detail/live_counters.hpp"
#include "courier/net/detail/reactor.hpp"
#include "courier/net/socket.hpp"
#include "courier/net/transport.hpp"

namespace courier::net::detail {

/// Accepts on a listener when it is ready and starts one server_connection per socket.
///
/// Refusals are said on the wire, never by silence: a connection past max_connections, or one
/// accepted while the process is out of descriptors, gets ERROR 260 as its first frame (with a
/// text that says why) and is closed. Out of descriptors, it accepts with a spare descriptor it
/// keeps for that (closed, accept, refuse, reopened); when even that fails it is `starved` and
/// accepts again as soon as one of the node's connections closes (node_core::leave), since the
/// listener is edge-triggered and would not report the waiting connections again.
///
/// Thread-safety: on_io runs on a poller and retry() on whichever thread closed a connection;
/// both take the acceptor's lock.
class acceptor final : public owned_handler {
 public:
  acceptor(net::listener l, std::function<void(socket)> start, std::shared_ptr<listener_share> share,
           std::size_t max_connections);
  ~acceptor();
  void on_io(std::uint32_t) noexcept override;
  /// Accepts again (after the last round ran out of descriptors).
  void retry() noexcept;
  /// The last round ran out of descriptors, even the spare one.
  bool starved() const noexcept { return starved_.load(std::memory_order_acquire); }
  net::listener& listening() noexcept { return listener_; }

 private:
  enum class spare_outcome : std::uint8_t { refused, none_waiting, no_spare };
  void accept_all();
  spare_outcome refuse_with_spare();

  std::mutex mutex_;
  net::listener listener_;
  std::function<void(socket)> start_;
  std::shared_ptr<listener_share> share_;
  std::size_t max_connections_;
  int spare_ = -1;  // a descriptor held back to accept-and-refuse while out of descriptors
  std::atomic<bool> starved_{false};
};

/// Writes ERROR `code` (transaction id 0) with `text` to a just-accepted socket and closes it: a
/// refusal the peer reads instead of its handshake (docs/protocol.md section 8).
void refuse(socket& sock, std::uint32_t code, std::string_view text,
            const std::shared_ptr<const log_hook>& log = nullptr) noexcept;

}  // namespace courier::net::detail
