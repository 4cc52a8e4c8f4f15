#pragma once
/// @file
/// One command-line syntax for every Courier program that talks over a transport, in libmsgque's
/// manner, parsed with CLI11:
///
///     client [--pipe] [options] @ server-program server-args...     (the default transport)
///     client --uds --file PATH [options]
///     client --tcp [--host H] --port P [options]
///     server --uds --file PATH [options]  |  server --tcp [--host H] --port P [options]
///     options: --timeout SEC  --name NAME  --buffersize N  --max-frame N  --silent  --debug N  --help
///     server only: --max-connections N  --max-memory N
///
/// Everything after a lone `@` is the pipe server's command line (it is never parsed as options).
/// Unknown options, stray arguments, two transports, `--file` without `--uds`, `--host`/`--port`
/// without `--tcp`, `--uds` without `--file`, `--tcp` without `--port` and `@` with a transport other
/// than pipe are errors (errc::invalid_argument, with CLI11's or our own text), never ignored.
/// A server started by a pipe client gets `--pipe` (or nothing) and no `@`; a server's parse
/// (program_kind::server) refuses `@`, a client's refuses the server-only options.
/// `config_from()` turns the parsed options into a connection_config, so that every accepted option
/// changes what the program does.
///
/// A program adds its own options through `extra_options`, a callback that receives the CLI::App
/// before parsing (include <CLI/CLI.hpp> there); the same callback given to options_help() lists them.
///
/// Thread-safety: plain functions over their arguments; options is a value type.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "courier/error.hpp"
#include "courier/net/connection_config.hpp"
#include "courier/net/endpoint.hpp"

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace courier::net {

/// Which side a program is: its usage line, and the options it accepts.
enum class program_kind : std::uint8_t { client, server };

struct options {
  endpoint where;
  /// --timeout SEC (fractions allowed): a client's connect, handshake and call time-outs; a
  /// server's handshake time-out (a peer that has not completed its handshake by then is dropped).
  std::chrono::milliseconds timeout{10000};
  /// --keepalive MS: the ping interval (connection_config::ping_interval); a silent peer that
  /// answers none of two pings is dead after three intervals. 0: no keepalive. Not given: the
  /// program's own setting (10 s unless it chose another).
  std::optional<std::chrono::milliseconds> keepalive;
  /// --name NAME: how the program names itself in logs and in its handshake.
  std::string name;
  /// --buffersize N: the socket send and receive buffer size to ask for in bytes (0: the kernel's
  /// default), applied to every connection's socket.
  std::size_t buffersize = 0;
  /// --max-frame N: the largest frame this program accepts (announced in its handshake); 0: the
  /// protocol's default (16 MiB). Lower it for untrusted peers.
  std::size_t max_frame = 0;
  /// --max-connections N (server): connections served at once; one more is refused with an ERROR
  /// (260, "too many connections") and closed. 0: no limit.
  std::size_t max_connections = 0;
  /// --max-memory N (server): the receive memory all connections together may hold for frames
  /// still arriving; a connection whose frame would pass it is ended with an ERROR. 0: no limit.
  std::size_t max_memory = 0;
  /// --silent: the log (log_for) writes errors only, and a server does not say where it serves.
  bool silent = false;
  /// --debug N: the log's detail on stderr (log_for): 0 warnings and errors (refused peers,
  /// protocol errors); 1 also each connection opened and ended (with why) and each session
  /// started and ended; 2 also what each handshake agreed.
  int debug = 0;
  /// --help was given: print options_help() and exit successfully; the other fields are defaults.
  bool help = false;
};

/// Adds a program's own options to the parser (called before parsing and by options_help()).
using extra_options = std::function<void(CLI::App&)>;

/// Parses argv[1..argc) (argv[0] is the program's path and is skipped). An error's text does not
/// repeat the program's name (the caller prints "name: text").
[[nodiscard]] courier::result<options> parse_options(int argc, const char* const* argv, std::string_view program_name,
                                                     const extra_options& extra = {},
                                                     program_kind kind = program_kind::client);

/// Checks for a program's own number options that say what the number must be ("must be a number
/// greater than 0 (not 0)"), where CLI11's name a range of 309 digits.
const CLI::Validator& positive_number();
const CLI::Validator& non_negative_number();

/// What a program prints on standard error when parse_options() refused its options: the error
/// and one line that points at --help ("name: text\nRun 'name --help' to see the options.\n").
std::string options_error(std::string_view program_name, const courier::error& err);

/// The --help text: the usage line of a client or a server and every option, the program's own too.
std::string options_help(std::string_view program_name, const extra_options& extra = {},
                         program_kind kind = program_kind::client);

/// The connection settings the options ask for: name (or `default_name`), handshake time-out,
/// socket buffer size, frame limit, connection and memory limits, and the log (log_for).
[[nodiscard]] connection_config config_from(const options& opts, connection_config base = {});

/// The tools' log (log.hpp): lines on stderr through spdlog, named `program_name`; errors only
/// with --silent, warnings and errors by default, info with --debug 1, debug with --debug 2 or more.
/// config_from() sets it on a config that has no hook of its own.
[[nodiscard]] std::shared_ptr<const log_hook> log_for(const options& opts, std::string_view program_name);

}  // namespace courier::net
