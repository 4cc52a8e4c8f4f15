#pragma once
/// @file
/// A server courier-perf starts for a run of its own (--matrix, --load): courier-perf-server, or
/// any program that serves on the listener it is given, on uds or tcp in one start mode, stopped
/// (SIGTERM, then reaped) when the handle goes; and the resident memory of its processes.
///
/// Thread-safety: one thread uses a server_process.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "courier/error.hpp"
#include "courier/net/endpoint.hpp"
#include "courier/net/process.hpp"
#include "courier/net/start_mode.hpp"

namespace courier::perf {

/// Any free port on the loopback interface, for a server this process starts.
courier::result<std::uint16_t> free_port();

class server_process {
 public:
  /// Starts `command` (the program and its first arguments) with `--<mode>` and the transport's
  /// options for `where` (a uds file or a free tcp port is chosen here and written into `where`),
  /// and waits up to `timeout` until it accepts a connection.
  static courier::result<server_process> start(std::vector<std::string> command, net::start_mode mode,
                                               net::endpoint& where, std::chrono::milliseconds timeout);
  server_process(server_process&&) noexcept = default;
  server_process& operator=(server_process&&) = delete;
  ~server_process();

  [[nodiscard]] pid_t pid() const noexcept { return child_.pid(); }

 private:
  explicit server_process(net::child_process child) : child_(std::move(child)) {}
  net::child_process child_;
};

/// The resident memory of `pid` and of every process below it (the sessions of a --fork or --spawn
/// server), in bytes, from /proc; pages shared between them are counted in each. 0 when `pid` is gone.
std::uint64_t resident_bytes_of_tree(pid_t pid);

}  // namespace courier::perf
