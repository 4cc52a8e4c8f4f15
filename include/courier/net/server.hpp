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
///           [](courier::net::server_setup& s) { return s.net.serve_sessions(make_session(s.sys), s.where, s.config);
///           });
///     }
///
/// Thread-safety: call once, from main, before any other thread is started.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "courier/error.hpp"
#include "courier/net/connection_config.hpp"
#include "courier/net/endpoint.hpp"
#include "courier/net/node.hpp"
#include "courier/net/options.hpp"
#include "courier/net/start_mode.hpp"
#include "courier/system.hpp"

namespace courier::net {

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
  bool offers_start_modes = false;
  /// Of the start modes, those this program's sessions work in: a program whose sessions share
  /// state through the serve callback (a chat's room actor) names only pool, and the others are
  /// refused at start with why. Every mode by default.
  start_mode_set supported_modes{start_mode::pool, start_mode::thread, start_mode::fork, start_mode::spawn};
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
struct server_setup {
  courier::system& sys;
  node& net;
  const options& opts;
  const endpoint& where;
  const connection_config& config;
  /// The start mode the options chose (pool unless the program offers the modes); spawn for a
  /// program with the modes served over pipe without --pool (one session on the main thread).
  start_mode mode = start_mode::pool;
};

/// Runs a server program; returns its exit status: 0 after a signal (or a pipe server's end), 2
/// for bad options (printed with the help), 1 when serving failed (printed with why). Besides the
/// options of parse_options() and the start modes it takes `--workers N`: the pool's worker
/// threads (1 to 64; default one per CPU), a pool mode option that implies `--pool`.
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
               const std::function<courier::result<serving>(server_setup&)>& serve);

}  // namespace courier::net
