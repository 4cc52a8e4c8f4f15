#pragma once
/// @file
/// One command-line syntax for every Courier program that talks over a transport, in libmsgque's
/// manner, parsed with CLI11:
///
///     client [--pipe] [options] @ server-program server-args...     (the default transport)
///     client --uds --file PATH [options]
///     client --tcp [--host H] --port P [options]
///     options: --timeout SEC  --name NAME  --buffersize N  --silent  --debug N  --help
///
/// Everything after a lone `@` is the pipe server's command line (it is never parsed as options).
/// Unknown options, stray arguments, two transports, `--file` without `--uds`, `--host`/`--port`
/// without `--tcp`, `--uds` without `--file`, `--tcp` without `--port` and `@` with a transport other
/// than pipe are errors (errc::invalid_argument, with CLI11's or our own text), never ignored.
/// A server started by a pipe client gets `--pipe` (or nothing) and no `@`.
///
/// A program adds its own options through `extra_options`, a callback that receives the CLI::App
/// before parsing (include <CLI/CLI.hpp> there); the same callback given to options_help() lists them.
///
/// Thread-safety: plain functions over their arguments; options is a value type.

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "courier/error.hpp"
#include "courier/net/endpoint.hpp"

namespace CLI {
class App;
}

namespace courier::net {

struct options {
  endpoint where;
  /// --timeout SEC (fractions allowed): connect, handshake and call time-outs of the program.
  std::chrono::milliseconds timeout{10000};
  /// --name NAME: how the program names itself in logs and in its handshake.
  std::string name;
  /// --buffersize N: the socket buffer size to ask for in bytes (0: the kernel's default).
  std::size_t buffersize = 0;
  /// --silent: print nothing but errors.
  bool silent = false;
  /// --debug N: verbosity of diagnostic output (0: none).
  int debug = 0;
  /// --help was given: print options_help() and exit successfully; the other fields are defaults.
  bool help = false;
};

/// Adds a program's own options to the parser (called before parsing and by options_help()).
using extra_options = std::function<void(CLI::App&)>;

/// Parses argv[1..argc) (argv[0] is the program's path and is skipped).
[[nodiscard]] courier::result<options> parse_options(int argc, const char* const* argv,
                                                     std::string_view program_name,
                                                     const extra_options& extra = {});

/// The --help text: usage line and every option, including the program's own.
std::string options_help(std::string_view program_name, const extra_options& extra = {});

}  // namespace courier::net
