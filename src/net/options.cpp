#include "courier/net/options.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <vector>

namespace courier::net {

namespace {

/// Where the parser writes; copied into `options` once everything checked out.
struct parsed {
  bool pipe = false, uds = false, tcp = false;
  std::string file;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  double timeout_seconds = 10.0;
  std::int64_t keepalive_ms = -1;  // not given: the program's own
  std::string name;
  std::size_t buffersize = 0;
  std::size_t max_frame = 0;
  std::size_t max_connections = 0;
  std::size_t max_memory = 0;
  bool silent = false;
  int debug = 0;
};

void declare(CLI::App& app, parsed& into, program_kind kind) {
  auto* pipe = app.add_flag("--pipe", into.pipe,
                            "Talk over a socket pair to a child process (the default; the "
                            "client names the server program after @)");
  auto* uds = app.add_flag("--uds", into.uds, "Talk over a Unix-domain socket (needs --file)");
  auto* tcp = app.add_flag("--tcp", into.tcp, "Talk over TCP (needs --port)");
  pipe->excludes(uds, tcp);
  uds->excludes(pipe, tcp);
  tcp->excludes(pipe, uds);
  app.add_option("--file", into.file, "uds: the socket file")->needs(uds)->type_name("PATH");
  app.add_option("--host", into.host, "tcp: host name or address (default 127.0.0.1; ::1 for IPv6)")
      ->needs(tcp)
      ->type_name("HOST");
  app.add_option("--port", into.port, "tcp: the port (a server may ask for 0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->needs(tcp)
      ->type_name("PORT");
  app.add_option("--timeout", into.timeout_seconds,
                 kind == program_kind::client ? "Time-out in seconds for connect, handshake and calls (default 10)"
                                              : "Time-out in seconds for a client's handshake (default 10)")
      ->check(positive_number())
      ->type_name("SEC");
  app.add_option("--keepalive", into.keepalive_ms,
                 "Ping a silent peer every MS milliseconds; a peer that answers none of two pings is dead after "
                 "three intervals of silence (e.g. 3000 ms for --keepalive 1000). 0 sends no pings and never "
                 "declares a peer dead (default 10000)")
      ->check(non_negative_number())
      ->type_name("MS");
  app.add_option("--name", into.name, "The name this program gives itself in logs and its handshake")
      ->type_name("NAME");
  // The checks parse the text as a number first: CLI11 would read "-5" into an unsigned as a huge value.
  app.add_option("--buffersize", into.buffersize, "Socket buffer size in bytes (0: the kernel's default)")
      ->check(non_negative_number())
      ->type_name("N");
  app.add_option("--max-frame", into.max_frame,
                 "The largest frame accepted, in bytes (65536 to 4294967295; default 16 MiB)")
      ->check(CLI::Range(std::size_t{65536}, std::size_t{0xffffffff}))
      ->type_name("N");
  if (kind == program_kind::server) {
    app.add_option("--max-connections", into.max_connections,
                   "Connections served at once; more are refused with an ERROR (0: no limit)")
        ->check(non_negative_number())
        ->type_name("N");
    app.add_option("--max-memory", into.max_memory,
                   "Receive memory in bytes that the connections of this process may hold for frames still "
                   "arriving, beyond one read block of 64 KiB each (an idle connection holds none of "
                   "it); a frame that does not fit ends its connection with ERROR 260 (0: no limit)")
        ->check(non_negative_number())
        ->type_name("N");
  }
  app.add_flag("--silent", into.silent, "Log nothing but errors (no refusals, no protocol errors of peers)");
  app.add_option("--debug", into.debug,
                 "The log's detail on stderr: 0 errors and warnings (refused peers, protocol errors); 1 also "
                 "connections and sessions opened and ended, with why; 2 also what each handshake agreed")
      ->check(non_negative_number())
      ->type_name("N");
}

std::unique_ptr<CLI::App> make_app(std::string_view program_name, parsed& into, const extra_options& extra,
                                   program_kind kind) {
  const std::string name(program_name);
  auto app = kind == program_kind::client ? std::make_unique<CLI::App>(
                                                "Transport options: --pipe (the default: @ server args...), --uds "
                                                "--file PATH, --tcp [--host H] --port P",
                                                name)
                                          : std::make_unique<CLI::App>(
                                                "Transport options: --uds --file PATH, --tcp [--host H] --port P; "
                                                "started by a pipe client, it serves its stdin (--pipe)",
                                                name);
  declare(*app, into, kind);
  if (extra) extra(*app);
  const std::string own = app->get_footer();  // the program's, said after the usage
  if (kind == program_kind::client)
    app->footer("A pipe client starts its server itself: " + name + " [options] @ server-program [server-options]");
  else
    app->footer("Serves until SIGINT or SIGTERM: " + name + " --uds --file PATH [options]  or  " + name +
                " --tcp --port P [options]; a pipe client starts it itself: client @ " + name);
  if (!own.empty()) app->footer(app->get_footer() + "\n\n" + own);
  return app;
}

courier::error invalid(std::string text) { return {errc::invalid_argument, std::move(text)}; }

/// Checks that say what a number must be, in words: CLI11's PositiveNumber names the range
/// "0.000000 to 1797693134862315..." (309 digits), and its NonNegativeNumber likewise.
CLI::Validator number_check(bool zero_allowed, const char* said) {
  return CLI::Validator(
      [zero_allowed, said](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
        if (zero_allowed ? value < 0 : value <= 0) return "must be " + std::string(said) + " (not " + text + ")";
        return {};
      },
      "", "");
}

std::string unknown_words(const std::vector<std::string>& words) {
  std::string text = words.size() == 1 ? "unknown option or argument: " : "unknown options or arguments: ";
  for (std::size_t i = 0; i < words.size(); ++i) text += (i == 0 ? "" : " ") + words[i];
  return text;
}

}  // namespace

courier::result<options> parse_options(int argc, const char* const* argv, std::string_view program_name,
                                       const extra_options& extra, program_kind kind) {
  std::vector<std::string> words;
  std::vector<std::string> command;
  bool after_at = false;
  for (int i = 1; i < argc; ++i) {
    if (after_at)
      command.emplace_back(argv[i]);
    else if (std::string_view(argv[i]) == "@")
      after_at = true;
    else
      words.emplace_back(argv[i]);
  }

  parsed values;
  bool port_given = false;
  // Nothing to parse and nothing of the program's own: the defaults, without building the parser.
  // A pipe server is a fresh process for each connection, and CLI11 cost it 0.5 ms of CPU there.
  if (!words.empty() || after_at || extra) {
    auto app = make_app(program_name, values, extra, kind);
    std::reverse(words.begin(), words.end());  // CLI11 takes the arguments last-first
    try {
      app->parse(words);
    } catch (const CLI::CallForHelp&) {
      options wanted;
      wanted.help = true;
      return wanted;
    } catch (const CLI::CallForAllHelp&) {
      options wanted;
      wanted.help = true;
      return wanted;
    } catch (const CLI::ParseError& e) {
      // An unknown option is named first: "--file requires --uds" would hide a mistyped --udss.
      if (!app->remaining().empty()) return invalid(unknown_words(app->remaining()));
      return invalid(e.what());
    }
    port_given = app->count("--port") != 0;
  }

  options result;
  endpoint& where = result.where;
  if (values.uds) {
    if (values.file.empty()) return invalid("--uds needs --file PATH");
    where.kind = transport_kind::uds;
    where.file = values.file;
  } else if (values.tcp) {
    if (!port_given) return invalid("--tcp needs --port P");
    if (values.host.empty()) return invalid("--host needs a host name or address");
    where.kind = transport_kind::tcp;
    where.host = values.host;
    where.port = values.port;
  } else {
    where.kind = transport_kind::pipe;
  }
  if (after_at && kind == program_kind::server)
    return invalid("'@ server...' is for clients: a server is started by its pipe client, or serves --uds or --tcp");
  if (after_at) {
    if (where.kind != transport_kind::pipe)
      return invalid(std::string("'@ server...' starts a pipe server; it does not go with --") + to_string(where.kind));
    if (command.empty()) return invalid("'@' must be followed by the server program");
    where.command = std::move(command);
  }
  result.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(values.timeout_seconds * 1000.0 + 0.5));
  if (result.timeout.count() <= 0) return invalid("--timeout must be at least 1 ms");
  if (values.keepalive_ms >= 0) result.keepalive = std::chrono::milliseconds(values.keepalive_ms);
  result.name = std::move(values.name);
  result.buffersize = values.buffersize;
  result.max_frame = values.max_frame;
  result.max_connections = values.max_connections;
  result.max_memory = values.max_memory;
  result.silent = values.silent;
  result.debug = values.debug;
  return result;
}

const CLI::Validator& positive_number() {
  static const CLI::Validator check = number_check(false, "a number greater than 0");
  return check;
}

const CLI::Validator& non_negative_number() {
  static const CLI::Validator check = number_check(true, "0 or a number greater than 0");
  return check;
}

std::string options_error(std::string_view program_name, const courier::error& err) {
  const std::string name(program_name);
  return name + ": " + err.text + "\nRun '" + name + " --help' to see the options.\n";
}

std::string options_help(std::string_view program_name, const extra_options& extra, program_kind kind) {
  parsed ignored;
  auto app = make_app(program_name, ignored, extra, kind);
  return app->help();
}

connection_config config_from(const options& opts, connection_config base) {
  if (!opts.name.empty()) base.name = opts.name;
  base.handshake_timeout = opts.timeout;
  base.connect_timeout = opts.timeout;
  if (opts.keepalive) base.ping_interval = *opts.keepalive;
  base.socket_buffer_size = opts.buffersize;
  if (opts.max_frame != 0) base.limits.max_frame_size = static_cast<std::uint32_t>(opts.max_frame);
  base.max_connections = opts.max_connections;
  base.max_receive_memory = opts.max_memory;
  if (!base.log) base.log = log_for(opts, base.name);
  return base;
}

}  // namespace courier::net
