#pragma once
/// @file
/// What the network layer tells about its connections, through a hook in connection_config:
/// connections opened and ended, sessions started and ended, connections refused, and protocol
/// errors, each with the peer's address. The library writes the line; the program decides where
/// it goes. Servers made with run_server and the tools (courier-call, courier-perf) write it
/// through spdlog on stderr, at the level their options choose (log_for, options.hpp):
///
///     --silent: errors    (default): and warnings    --debug 1: and info    --debug 2: and debug
///
/// Without a hook (the library's default) nothing is written.
///
/// Thread-safety: `write` is called on whichever thread saw the event (a worker, the reactor's
/// poller, an acceptor, a session's thread), at any time, so it must be thread-safe; keep it
/// quick, as it runs on the connection's path.

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

namespace courier::net {

enum class log_level : std::uint8_t {
  /// Something failed that the program should hear of (serving stopped, a session not started).
  error,
  /// A peer was refused or broke the protocol.
  warning,
  /// Connections opened and ended, sessions started and ended.
  info,
  /// What the handshake agreed, and each connection's descriptor.
  debug,
};
const char* to_string(log_level level) noexcept;

struct log_hook {
  /// Writes one line (no newline at its end).
  std::function<void(log_level, std::string_view)> write;
  /// The most detailed level written.
  log_level threshold = log_level::warning;

  [[nodiscard]] bool enabled(log_level level) const noexcept { return write && level <= threshold; }
};

/// Whether `log` (which may be null) writes `level`: test it before building a line.
[[nodiscard]] inline bool logs(const std::shared_ptr<const log_hook>& log, log_level level) noexcept {
  return log && log->enabled(level);
}

/// Writes `line` when `log` (which may be null) writes `level`.
inline void log_line(const std::shared_ptr<const log_hook>& log, log_level level, std::string_view line) {
  if (logs(log, level)) log->write(level, line);
}

}  // namespace courier::net
