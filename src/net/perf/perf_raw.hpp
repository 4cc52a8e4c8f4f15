#pragma once
/// @file
/// The raw limits courier-perf prints beside its figures, measured by the same binary over the same
/// transport: a bare echo of 64-byte messages with no framing, no actors and no codec. The peer is a
/// second process, started as `courier-perf --raw-echo` (this binary): over pipe it is the child on
/// the socket pair; over uds and tcp it accepts on a listener this process made and serves each
/// connection as the server's start mode would (in its own loop, a thread, a fork or a posix_spawn
/// per connection), so raw-connect is the bare cost of that mode.
///
/// Thread-safety: one thread uses a raw_peer.

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "courier/error.hpp"
#include "courier/net/endpoint.hpp"
#include "courier/net/process.hpp"
#include "courier/net/start_mode.hpp"
#include "courier/net/transport.hpp"

namespace courier::perf {

using net::start_mode;

/// What a test counted in the time it ran.
struct measured {
  std::uint64_t count = 0;
  double seconds = 0;
  [[nodiscard]] double per_second() const noexcept { return seconds > 0 ? static_cast<double>(count) / seconds : 0; }
};

/// Runs `step` (returning courier::result<void>) until `run_for` has passed, reading the clock every
/// `stride` steps; the first failure ends the run with it.
template <class Step>
courier::result<measured> run_timed(std::chrono::duration<double> run_for, std::size_t stride, Step&& step) {
  using clock_type = std::chrono::steady_clock;
  const auto start = clock_type::now();
  const auto until = start + std::chrono::duration_cast<clock_type::duration>(run_for);
  measured m;
  for (;;) {
    for (std::size_t i = 0; i < stride; ++i, ++m.count)
      if (auto ok = step(); !ok) return ok.err();
    const auto now = clock_type::now();
    if (now >= until) {
      m.seconds = std::chrono::duration<double>(now - start).count();
      return m;
    }
  }
}

/// A bare peer serving a listener this process made (uds or tcp): the listener, which removes its
/// uds file when it goes, and the process that accepts on it, ended (SIGTERM) and reaped when it goes.
struct raw_acceptor {
  net::listener listening;
  net::child_process process;

  /// Listens on `where` (a tcp port of 0 is chosen here and written back) and starts `command`
  /// with the listener as its standard input.
  static courier::result<raw_acceptor> start(net::endpoint& where, const std::vector<std::string>& command);
  raw_acceptor(net::listener l, net::child_process p) noexcept : listening(std::move(l)), process(std::move(p)) {}
  raw_acceptor(raw_acceptor&&) noexcept = default;
  raw_acceptor& operator=(raw_acceptor&&) = delete;
  ~raw_acceptor() { process.kill(SIGTERM); }
  [[nodiscard]] pid_t pid() const noexcept { return process.pid(); }
};

/// A raw echo peer on one transport.
class raw_peer {
 public:
  raw_peer(raw_peer&&) noexcept = default;
  raw_peer& operator=(raw_peer&&) = delete;

  /// Starts it: `self` is this program's path, `where` the transport (its file or port is chosen
  /// here: a uds file beside the one given, or any free tcp port on its host).
  static courier::result<raw_peer> start(const std::string& self, const net::endpoint& where, start_mode mode);

  /// One round trip at a time (the blocking raw limit of a call).
  courier::result<measured> roundtrip(std::chrono::duration<double> run_for);
  /// 64 messages kept in flight (the raw limit of calls with callbacks).
  courier::result<measured> pipelined(std::chrono::duration<double> run_for);
  /// A fresh connection and one round trip each time (the raw limit of a session's start).
  courier::result<measured> connect(std::chrono::duration<double> run_for);

 private:
  raw_peer() = default;
  courier::result<net::socket> open();

  std::string self_;
  net::endpoint where_;                           // pipe: this binary with --raw-echo; uds and tcp: the listener's
  std::optional<raw_acceptor> acceptor_;          // uds and tcp: the listener and the process that accepts
  std::optional<net::child_process> pipe_child_;  // pipe: the peer of the open connection
};

/// The peer's side: `courier-perf --raw-echo --raw-mode M` runs this on its standard input (a
/// connection, or a listener to accept on) and returns its exit status.
int run_raw_echo(const std::string& self, start_mode mode);

}  // namespace courier::perf
