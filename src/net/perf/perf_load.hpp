#pragma once
/// @file
/// courier-perf --load N: N client connections opened by this one process and driven by one thread
/// on epoll, each making calls one at a time (ADD5, as --send-and-wait does), against a
/// courier-perf-server in each start mode asked for, and the same load against a bare epoll echo
/// server (one thread, 64-byte messages, no framing): the raw limit the figure is held to. Rounds
/// of --sec alternate between the two (medians over the rounds, each round's clients connected
/// anew), so the limit is measured beside the figure, not after it. A client's latency is from its call's write
/// to its answer's read; the server's memory is the most resident size of its processes once every
/// client has made a call, less that before the first connected, per client.
///
/// Thread-safety: run it from main.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "courier/error.hpp"
#include "courier/net/endpoint.hpp"
#include "courier/net/start_mode.hpp"

namespace courier::perf {

struct load_options {
  std::string self;    ///< this binary (the raw echo server is started from it)
  std::string server;  ///< courier-perf-server
  std::size_t clients = 10000;
  std::chrono::duration<double> run_for{2.0};
  std::size_t rounds = 3;  ///< each server this many times, alternating; medians
  std::vector<net::transport_kind> transports{net::transport_kind::uds, net::transport_kind::tcp};
  std::vector<net::start_mode> modes{net::start_mode::pool};
  std::chrono::milliseconds timeout{10000};
};

/// What one server answered to the load.
struct load_figures {
  std::uint64_t calls = 0;  ///< answered within the run
  double seconds = 0;
  double p50_us = 0, p99_us = 0;
  std::uint64_t server_bytes_per_client = 0;
  [[nodiscard]] double per_second() const noexcept { return seconds > 0 ? static_cast<double>(calls) / seconds : 0; }
};

struct load_result {
  net::transport_kind transport;
  net::start_mode mode;
  std::size_t clients = 0;
  load_figures courier, raw;
  std::vector<std::string> failures;  ///< empty when both runs completed
  [[nodiscard]] double ratio() const noexcept {
    return raw.per_second() > 0 ? courier.per_second() / raw.per_second() : 0;
  }
};

/// Raises this process's soft descriptor limit to what `clients` connections need (the servers it
/// starts inherit it), within the hard limit; says so on stderr when it changed. The error says
/// what the hard limit is when that is too low.
courier::result<void> raise_descriptor_limit(std::size_t clients);

/// Runs the load on each transport x mode and returns the results (printed as it goes unless
/// `quiet`).
std::vector<load_result> run_load(const load_options& opts, bool quiet = false);

/// `load <transport> <mode> clients=<N> calls_per_s=<x> p50_us=<a> p99_us=<b>
/// server_rss_per_client_bytes=<c> raw_calls_per_s=<r> ratio=<x/r> raw_p50_us=<a> raw_p99_us=<b>`
std::string load_line(const load_result& r);

nlohmann::json load_json(const std::vector<load_result>& results);

/// The raw echo server's side: `courier-perf --raw-echo-epoll` serves every connection that comes
/// to the listener on its standard input from one thread on epoll, until SIGTERM.
int run_raw_epoll_echo();

}  // namespace courier::perf
