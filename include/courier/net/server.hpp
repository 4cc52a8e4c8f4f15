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
#include <functional>
#include <string>

#include "courier/error.hpp"
#include "courier/net/connection.hpp"
#include "courier/net/endpoint.hpp"
#include "courier/net/node.hpp"
#include "courier/net/options.hpp"
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
};

/// What the serve callback gets: the system and node to serve on, the parsed options, where to
/// serve and with which settings.
struct server_context {
  courier::system& sys;
  node& net;
  const options& opts;
  const endpoint& where;
  const connection_config& config;
};

/// Runs a server program; returns its exit status: 0 after a signal (or a pipe server's end), 2
/// for bad options (printed with the help), 1 when serving failed (printed with why).
int run_server(int argc, const char* const* argv, const server_program& program,
               const std::function<courier::result<serving>(server_context&)>& serve);

}  // namespace courier::net
