#pragma once
/// @file
/// The start modes of a server that serves sessions (--pool, --thread, --fork, --spawn): how it
/// runs each accepted connection, and so what its sessions share. run_server (server.hpp) takes
/// them; courier-perf names them.
///
/// Thread-safety: value types and a pure function; safe anywhere.

#include <cstdint>
#include <initializer_list>

namespace courier::net {

/// How a server that serves sessions runs each connection (--pool, --thread, --fork, --spawn),
/// and so what its sessions share.
enum class start_mode : std::uint8_t {
  /// On the shared workers of one process: a session costs an actor and a connection. Sessions
  /// share everything: one system, one serve callback, its actors (a chat's rooms).
  pool,
  /// A thread per session, which drives a system of its own (config::embedded(): no workers)
  /// with the session's actors and connection: a handler that blocks stalls only its session.
  /// A thread whose session ended may wait for the next one (server_program::kept_threads).
  /// Sessions share only what the process holds outside the systems (globals, statics): an
  /// actor the serve callback spawns is the session's alone.
  thread,
  /// A process per session, forked from an acceptor that never starts a system (the pre-fork
  /// acceptor: a fork of a process with running workers would leave the child their locks and
  /// reactor without the threads); a crash in one session ends only its own process. Sessions
  /// share nothing.
  fork,
  /// A fresh process per session: this program again (posix_spawn), the connection on its stdin.
  /// Sessions share nothing.
  spawn,
};
const char* to_string(start_mode mode) noexcept;

/// A set of start modes: `{start_mode::pool}`, `{start_mode::pool, start_mode::thread}`.
class start_mode_set {
 public:
  constexpr start_mode_set(std::initializer_list<start_mode> modes) noexcept {  // NOLINT(google-explicit-constructor)
    for (const start_mode m : modes) bits_ |= bit(m);
  }
  [[nodiscard]] constexpr bool contains(start_mode m) const noexcept { return (bits_ & bit(m)) != 0; }

 private:
  static constexpr std::uint8_t bit(start_mode m) noexcept {
    return static_cast<std::uint8_t>(1u << static_cast<unsigned>(m));
  }
  std::uint8_t bits_ = 0;
};

}  // namespace courier::net
