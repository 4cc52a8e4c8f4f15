#pragma once
/// @file
/// The main of a server program, as one call: parse the options (options.hpp), print --help or the
/// error, block SIGINT and SIGTERM before any thread starts, make the system and the node, serve,
/// say where, wait for a signal (or, over pipe, for the end of the one connection), then stop in
/// order: calls in flight are answered within the node's grace, later ones refused, the socket
/// file removed.
///
///     int main(int argc, char** argv) {
///       return courier::net::run_server(argc, argv, {.name = "courier-chat-server"},
///           [](courier::net::server_context& s) { return s.net.serve_sessions(make_session(s.sys), s.where, s.config); });
///     }
///
/// Thread-safety: call once, from main, before any other thread is started.

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "courier/error.hpp"
#include "courier/net/connection.hpp"
#include "courier/net/endpoint.hpp"
#include "courier/net/node.hpp"
#include "courier/net/options.hpp"
#include "courier/system.hpp"

namespace courier::net {

/// How a server that serves sessions runs each connection (--pool, --thread, --fork, --spawn),
/// and so what its sessions share.
enum class session_mode : std::uint8_t {
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
const char* to_string(session_mode mode) noexcept;

/// A set of start modes: `{session_mode::pool}`, `{session_mode::pool, session_mode::thread}`.
class session_mode_set {
 public:
  constexpr session_mode_set(std::initializer_list<session_mode> modes) noexcept {  // NOLINT(google-explicit-constructor)
    for (const session_mode m : modes) bits_ |= bit(m);
  }
  [[nodiscard]] constexpr bool contains(session_mode m) const noexcept { return (bits_ & bit(m)) != 0; }

 private:
  static constexpr std::uint8_t bit(session_mode m) noexcept { return static_cast<std::uint8_t>(1u << static_cast<unsigned>(m)); }
  std::uint8_t bits_ = 0;
};

/// What a server program is, before its options are parsed.
struct server_program {
  /// The program's name, for its usage line, its messages and (as the default) its handshake.
  std::string name;
  /// The connection settings the options start from (config_from applies them on top).
  connection_config base{};
  /// The program's own options (options.hpp), parsed with the transport's.
  extra_options extra{};
  /// How long an orderly stop waits for the connections to close.
  std::chrono::milliseconds grace{2000};
  /// Offers the start modes (--pool, the default; --thread; --fork; --spawn) on uds and tcp. For
  /// a program whose serve callback serves sessions (serve_sessions) and shares nothing between
  /// them but what a process of their own may hold apart: in thread, fork and spawn modes the
  /// serve callback runs once per session (on the session's thread, or in its process), with its
  /// own system and node, and `where` the session's one connection (a pipe endpoint, as a pipe
  /// server's). In thread mode those calls run at once on several threads. Over pipe, where the
  /// client starts a process per connection, the one session is served as a spawned one is (on
  /// the main thread, no workers) unless --pool is given.
  bool session_modes = false;
  /// Of the start modes, those this program's sessions work in: a program whose sessions share
  /// state through the serve callback (a chat's room actor) names only pool, and the others are
  /// refused at start with why. Every mode by default.
  session_mode_set supported_modes{session_mode::pool, session_mode::thread, session_mode::fork, session_mode::spawn};
  /// In thread mode, how many threads whose session ended wait for the next connection rather
  /// than end (--kept-threads N): a session then costs a waiting thread's wake-up, not a
  /// thread's start and end. Each holds its stack and its allocator's heap, no descriptor.
  std::size_t kept_threads = 4;
  /// In fork mode, how many forked processes whose session ended wait for the next connection
  /// rather than end (--kept-processes N): the acceptor hands it over (SCM_RIGHTS) instead of
  /// forking. Sessions at once still run in processes apart; one that follows another in the
  /// same process finds that process's static state as the last session left it (0 for a fresh
  /// process per session).
  std::size_t kept_processes = 4;
};

/// What the serve callback gets: the system and node to serve on, the parsed options, where to
/// serve and with which settings.
struct server_context {
  courier::system& sys;
  node& net;
  const options& opts;
  const endpoint& where;
  const connection_config& config;
  /// The start mode the options chose (pool unless the program offers the modes); spawn for a
  /// program with the modes served over pipe without --pool (one session on the main thread).
  session_mode mode = session_mode::pool;
};

/// Runs a server program; returns its exit status: 0 after a signal (or a pipe server's end), 2
/// for bad options (printed with the help), 1 when serving failed (printed with why).
///
/// In thread, fork and spawn modes this process's main thread is only the acceptor: it never
/// makes a system (a process that has one cannot fork sessions: a clear error, see
/// courier::system::alive()), hands each accepted connection to a thread or (fork) a process
/// that waits for one, kept from an ended session (server_program::kept_threads,
/// kept_processes), or else to a new thread or process (refused with ERROR 260 past
/// --max-connections, counted in sessions), joins or reaps each thread or process as it ends,
/// and on SIGINT/SIGTERM stops accepting, removes the socket file, tells the sessions and the
/// kept threads and processes to stop (SIGTERM to a process) and waits the grace and 1 s more for
/// them (then SIGKILL; a thread whose handler never returns is abandoned, and the program exits
/// with status 1). Connections still waiting to be accepted get ERROR 260 "the server is shutting
/// down".
int run_server(int argc, const char* const* argv, const server_program& program,
               const std::function<courier::result<serving>(server_context&)>& serve);

}  // namespace courier::net
