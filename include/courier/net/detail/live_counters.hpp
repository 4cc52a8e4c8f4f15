#pragma once
/// @file
/// What connections share with those who count them, private to the network layer: a
/// connection's connection_counters as its actor updates them and any thread reads them
/// (node::counters), and what one listener's connections share (their number, their receive
/// memory, the listener's log).
///
/// Thread-safety: atomics (and values set before the first connection); written by the connection
/// actors' turns, read anywhere.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "courier/net/connection_config.hpp"
#include "courier/net/detail/wire_stream.hpp"

namespace courier::net::detail {

struct live_counters {
  std::atomic<std::uint64_t> refused_sends{0};
  std::atomic<std::uint64_t> encode_failures{0};
  std::atomic<std::size_t> outbound_peak{0};

  [[nodiscard]] connection_counters read() const noexcept {
    return {refused_sends.load(std::memory_order_relaxed), encode_failures.load(std::memory_order_relaxed),
            outbound_peak.load(std::memory_order_relaxed)};
  }
  void note_outbound(std::size_t waiting) noexcept {
    if (waiting > outbound_peak.load(std::memory_order_relaxed))
      outbound_peak.store(waiting, std::memory_order_relaxed);
  }
};

/// What one listener shares with the connections it accepted: how many are alive (for
/// connection_config::max_connections) and the receive memory they may hold.
struct listener_share {
  std::atomic<std::size_t> connections{0};
  std::shared_ptr<receive_memory> memory;
  std::shared_ptr<const log_hook> log;  // the listener's: refusals
};

}  // namespace courier::net::detail
