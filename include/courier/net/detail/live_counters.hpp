#pragma once
/// @file
/// A connection's connection_counters as its actor updates them and any thread reads them
/// (node::counters), private to the network layer.
///
/// Thread-safety: atomics; written by the connection actor's turns, read anywhere.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "courier/net/connection_config.hpp"

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
    if (waiting > outbound_peak.load(std::memory_order_relaxed)) outbound_peak.store(waiting, std::memory_order_relaxed);
  }
};

}  // namespace courier::net::detail
