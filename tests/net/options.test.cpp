#include "courier/net/options.hpp"

#include <CLI/CLI.hpp>

#include <initializer_list>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using courier::errc;
using courier::net::endpoint;
using courier::net::parse_options;
using courier::net::transport_kind;

namespace {

/// Parses a command line given as words (the program's path is added in front).
courier::result<courier::net::options> parse(std::initializer_list<const char*> words,
                                             const courier::net::extra_options& extra = {}) {
  std::vector<const char*> argv{"/usr/bin/prog"};
  argv.insert(argv.end(), words.begin(), words.end());
  return parse_options(static_cast<int>(argv.size()), argv.data(), "prog", extra);
}

/// The parse fails with invalid_argument and its text contains `needle`.
void check_refused(std::initializer_list<const char*> words, const std::string& needle) {
  auto r = parse(words);
  INFO("refused: " << needle);
  REQUIRE_FALSE(r);
  CHECK(r.err() == errc::invalid_argument);
  INFO("text: " << r.err().text);
  CHECK(r.err().text.find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("options: nothing given is a pipe with the defaults") {
  auto r = parse({});
  REQUIRE(r);
  CHECK(r->where.kind == transport_kind::pipe);
  CHECK(r->where.command.empty());
  CHECK(r->timeout == std::chrono::seconds(10));
  CHECK(r->name.empty());
  CHECK(r->buffersize == 0);
  CHECK_FALSE(r->silent);
  CHECK(r->debug == 0);
  CHECK_FALSE(r->help);
}

TEST_CASE("options: pipe with a server command after @") {
  for (auto r : {parse({"@", "./server", "--uds", "@", "x"}), parse({"--pipe", "@", "./server", "--uds", "@", "x"})}) {
    REQUIRE(r);
    CHECK(r->where.kind == transport_kind::pipe);
    // Everything after the first lone @ belongs to the server, options and all.
    CHECK(r->where.command == std::vector<std::string>{"./server", "--uds", "@", "x"});
    CHECK(courier::net::to_string(r->where) == "pipe @ ./server --uds @ x");
  }
}

TEST_CASE("options: uds with a file") {
  auto r = parse({"--uds", "--file", "/tmp/a.sock"});
  REQUIRE(r);
  CHECK(r->where.kind == transport_kind::uds);
  CHECK(r->where.file == "/tmp/a.sock");
  CHECK(r->where.file_mode == 0600);
  CHECK(courier::net::to_string(r->where) == "uds /tmp/a.sock");
  auto equals = parse({"--file=/tmp/b.sock", "--uds"});
  REQUIRE(equals);
  CHECK(equals->where.file == "/tmp/b.sock");
}

TEST_CASE("options: tcp with a port, and a host for IPv4, IPv6 or a name") {
  auto r = parse({"--tcp", "--port", "4567"});
  REQUIRE(r);
  CHECK(r->where.kind == transport_kind::tcp);
  CHECK(r->where.host == "127.0.0.1");
  CHECK(r->where.port == 4567);
  CHECK(courier::net::to_string(r->where) == "tcp 127.0.0.1:4567");

  auto v6 = parse({"--tcp", "--host", "::1", "--port", "0"});
  REQUIRE(v6);
  CHECK(v6->where.host == "::1");
  CHECK(v6->where.port == 0);
  CHECK(courier::net::to_string(v6->where) == "tcp [::1]:0");

  auto named = parse({"--host", "localhost", "--tcp", "--port", "80"});
  REQUIRE(named);
  CHECK(named->where.host == "localhost");
}

TEST_CASE("options: the common options") {
  auto r = parse({"--timeout", "2.5", "--name", "calc", "--buffersize", "65536", "--silent", "--debug", "3"});
  REQUIRE(r);
  CHECK(r->timeout == std::chrono::milliseconds(2500));
  CHECK(r->name == "calc");
  CHECK(r->buffersize == 65536);
  CHECK(r->silent);
  CHECK(r->debug == 3);
}

TEST_CASE("options: --help asks for the help text") {
  auto r = parse({"--help"});
  REQUIRE(r);
  CHECK(r->help);
  const std::string help = courier::net::options_help("prog");
  for (const char* option : {"--pipe", "--uds", "--file", "--tcp", "--host", "--port", "--timeout", "--name",
                             "--buffersize", "--silent", "--debug", "@"})
    CHECK(help.find(option) != std::string::npos);
}

TEST_CASE("options: a program adds its own options") {
  int count = 1;
  std::string mode;
  const courier::net::extra_options extra = [&](CLI::App& app) {
    app.add_option("--count", count, "How many");
    app.add_option("--mode", mode, "Which mode");
  };
  auto r = parse({"--tcp", "--port", "1", "--count", "5", "--mode", "fast"}, extra);
  REQUIRE(r);
  CHECK(count == 5);
  CHECK(mode == "fast");
  CHECK(courier::net::options_help("prog", extra).find("--count") != std::string::npos);
  CHECK_FALSE(parse({"--count", "5"}));  // unknown without the program's addition
}

TEST_CASE("options: with no arguments the defaults are the parser's, and a program's own options are still checked") {
  // Nothing to parse skips the parser: what it gives must be what the parser gives for words
  // that only repeat the defaults.
  auto bare = parse({});
  auto parsed = parse({"--pipe", "--timeout", "10", "--buffersize", "0", "--debug", "0"});
  REQUIRE(bare);
  REQUIRE(parsed);
  CHECK(bare->where.kind == parsed->where.kind);
  CHECK(bare->where.command == parsed->where.command);
  CHECK(bare->timeout == parsed->timeout);
  CHECK(bare->name == parsed->name);
  CHECK(bare->buffersize == parsed->buffersize);
  CHECK(bare->max_frame == parsed->max_frame);
  CHECK(bare->max_connections == parsed->max_connections);
  CHECK(bare->max_memory == parsed->max_memory);
  CHECK(bare->silent == parsed->silent);
  CHECK(bare->debug == parsed->debug);
  CHECK(bare->help == parsed->help);

  std::string needed;
  const courier::net::extra_options extra = [&](CLI::App& app) { app.add_option("--needed", needed)->required(); };
  auto refused = parse({}, extra);
  REQUIRE_FALSE(refused);
  CHECK(refused.err().text.find("--needed") != std::string::npos);
}

TEST_CASE("options: unknown, conflicting and incomplete options are errors with a clear text") {
  check_refused({"--bogus"}, "--bogus");
  check_refused({"stray"}, "stray");
  check_refused({"--uds", "--tcp", "--port", "1", "--file", "x"}, "excludes");
  check_refused({"--pipe", "--uds", "--file", "x"}, "excludes");
  check_refused({"--pipe", "--tcp", "--port", "1"}, "excludes");
  check_refused({"--file", "/tmp/x"}, "--file requires --uds");
  check_refused({"--port", "1"}, "--port requires --tcp");
  check_refused({"--host", "h"}, "--host requires --tcp");
  check_refused({"--uds"}, "--uds needs --file");
  check_refused({"--tcp"}, "--tcp needs --port");
  check_refused({"--tcp", "--port", "65536"}, "--port");
  check_refused({"--tcp", "--port", "http"}, "--port");
  check_refused({"--tcp", "--port", "-1"}, "--port");
  check_refused({"--tcp", "--host", "", "--port", "1"}, "--host");
  check_refused({"--timeout", "0"}, "--timeout");
  check_refused({"--timeout", "-1"}, "--timeout");
  check_refused({"--timeout", "soon"}, "--timeout");
  check_refused({"--timeout", "0.0001"}, "--timeout");
  check_refused({"--debug", "-2"}, "--debug");
  check_refused({"--buffersize", "lots"}, "--buffersize");
  check_refused({"--buffersize", "-5"}, "--buffersize");
  check_refused({"--name"}, "--name");
  check_refused({"--uds", "--file", "x", "@", "./server"}, "does not go with --uds");
  check_refused({"--tcp", "--port", "1", "@", "./server"}, "does not go with --tcp");
  check_refused({"@"}, "'@' must be followed");
}

TEST_CASE("options: an unknown option is named first, and a number says what it must be") {
  // "--file requires --uds" would hide the mistyped --udss that caused it.
  check_refused({"--udss", "--file", "F"}, "unknown option or argument: --udss");
  check_refused({"--tcp", "--prot", "1"}, "--prot");
  check_refused({"--timeout", "0"}, "--timeout: must be a number greater than 0 (not 0)");
  check_refused({"--timeout", "soon"}, "'soon' is not a number");
  check_refused({"--buffersize", "-5"}, "must be 0 or a number greater than 0 (not -5)");
  auto r = parse({"--timeout", "0"});
  REQUIRE_FALSE(r);
  CHECK(r.err().text.find("17976931348623157") == std::string::npos);
}

TEST_CASE("options: an option error is one line and a pointer to --help, not the help") {
  auto r = parse({"--bogus"});
  REQUIRE_FALSE(r);
  const std::string printed = courier::net::options_error("prog", r.err());
  CHECK(printed == "prog: " + r.err().text + "\nRun 'prog --help' to see the options.\n");
}

namespace {

courier::result<courier::net::options> parse_server(std::initializer_list<const char*> words) {
  std::vector<const char*> argv{"/usr/bin/prog"};
  argv.insert(argv.end(), words.begin(), words.end());
  return parse_options(static_cast<int>(argv.size()), argv.data(), "prog", {}, courier::net::program_kind::server);
}

}  // namespace

TEST_CASE("options: an error's text does not repeat the program's name (the caller prints it)") {
  auto r = parse({"--bogus"});
  REQUIRE_FALSE(r);
  CHECK(r.err().text.find("prog") == std::string::npos);
}

TEST_CASE("options: a server's usage is a server's, it refuses '@', and has the server's limits") {
  const std::string server_help = courier::net::options_help("prog", {}, courier::net::program_kind::server);
  const std::string client_help = courier::net::options_help("prog");
  CHECK(server_help.find("SIGTERM") != std::string::npos);
  CHECK(server_help.find("@ server-program") == std::string::npos);
  CHECK(client_help.find("@ server-program") != std::string::npos);
  for (const char* option : {"--max-connections", "--max-memory", "--max-frame"})
    CHECK(server_help.find(option) != std::string::npos);
  CHECK(client_help.find("--max-connections") == std::string::npos);

  auto at = parse_server({"@", "./other"});
  REQUIRE_FALSE(at);
  CHECK(at.err().text.find("is for clients") != std::string::npos);
  CHECK_FALSE(parse({"--max-connections", "3"}));  // a client has no such option

  auto r = parse_server(
      {"--uds", "--file", "/tmp/s.sock", "--max-connections", "64", "--max-memory", "1048576", "--max-frame", "65536"});
  REQUIRE(r);
  CHECK(r->max_connections == 64);
  CHECK(r->max_memory == 1048576);
  CHECK(r->max_frame == 65536);
  CHECK_FALSE(parse_server({"--max-frame", "1000"}));  // below the protocol's minimum
}

TEST_CASE("options: config_from applies every accepted option to the connection settings") {
  auto r = parse_server({"--tcp", "--port", "0", "--timeout", "2.5", "--name", "calc", "--buffersize", "8192",
                         "--max-frame", "131072", "--max-connections", "7", "--max-memory", "4096000", "--debug", "1"});
  REQUIRE(r);
  courier::net::connection_config base;
  base.name = "default-name";
  const courier::net::connection_config cfg = courier::net::config_from(*r, base);
  CHECK(cfg.name == "calc");
  CHECK(cfg.handshake_timeout == std::chrono::milliseconds(2500));
  CHECK(cfg.connect_timeout == std::chrono::milliseconds(2500));
  CHECK(cfg.socket_buffer_size == 8192);
  CHECK(cfg.limits.max_frame_size == 131072);
  CHECK(cfg.max_connections == 7);
  CHECK(cfg.max_receive_memory == 4096000);
  REQUIRE(cfg.log);  // --debug 1: connections and sessions too
  CHECK(cfg.log->threshold == courier::net::log_level::info);
  CHECK(cfg.log->enabled(courier::net::log_level::info));
  CHECK_FALSE(cfg.log->enabled(courier::net::log_level::debug));
  auto plain = parse({});
  REQUIRE(plain);
  const auto defaults = courier::net::config_from(*plain, base);
  CHECK(defaults.name == "default-name");  // no --name: the program's own default
  CHECK(defaults.limits.max_frame_size == courier::wire::limits{}.max_frame_size);
  REQUIRE(defaults.log);  // refusals and protocol errors, nothing routine
  CHECK(defaults.log->threshold == courier::net::log_level::warning);
  auto silent = parse_server({"--tcp", "--port", "0", "--silent"});
  REQUIRE(silent);
  REQUIRE(courier::net::config_from(*silent, base).log);
  CHECK(courier::net::config_from(*silent, base).log->threshold == courier::net::log_level::error);
  auto detailed = parse_server({"--tcp", "--port", "0", "--debug", "2"});
  REQUIRE(detailed);
  CHECK(courier::net::config_from(*detailed, base).log->threshold == courier::net::log_level::debug);
  // --keepalive MS: the ping interval, 0 none; not given, the program's own.
  base.ping_interval = std::chrono::milliseconds(4000);
  CHECK(defaults.ping_interval == courier::net::connection_config{}.ping_interval);
  CHECK(courier::net::config_from(*plain, base).ping_interval == std::chrono::milliseconds(4000));
  auto pinging = parse_server({"--tcp", "--port", "0", "--keepalive", "1500"});
  REQUIRE(pinging);
  CHECK(courier::net::config_from(*pinging, base).ping_interval == std::chrono::milliseconds(1500));
  auto quiet = parse({"--keepalive", "0"});
  REQUIRE(quiet);
  CHECK(courier::net::config_from(*quiet, base).ping_interval == std::chrono::milliseconds(0));
  CHECK_FALSE(parse({"--keepalive", "-5"}));
  CHECK(courier::net::options_help("srv", {}, courier::net::program_kind::server).find("three intervals") !=
        std::string::npos);
  // A program's own hook is kept.
  auto own = std::make_shared<courier::net::log_hook>();
  base.log = own;
  CHECK(courier::net::config_from(*detailed, base).log == own);
}

TEST_CASE("options: the tools' log writes the levels it was asked for, through its hook") {
  auto r = parse_server({"--tcp", "--port", "0", "--debug", "1"});
  REQUIRE(r);
  auto log = courier::net::log_for(*r, "log-test");
  REQUIRE(log);
  CHECK(courier::net::logs(log, courier::net::log_level::warning));
  CHECK(courier::net::logs(log, courier::net::log_level::info));
  CHECK_FALSE(courier::net::logs(log, courier::net::log_level::debug));
  CHECK_FALSE(courier::net::logs(nullptr, courier::net::log_level::error));
  // A hook of the program's own sees exactly the lines its level takes.
  std::vector<std::string> lines;
  auto own = std::make_shared<courier::net::log_hook>();
  own->threshold = courier::net::log_level::warning;
  own->write = [&](courier::net::log_level level, std::string_view line) {
    lines.push_back(std::string(courier::net::to_string(level)) + " " + std::string(line));
  };
  std::shared_ptr<const courier::net::log_hook> hook = own;
  courier::net::log_line(hook, courier::net::log_level::info, "not this");
  courier::net::log_line(hook, courier::net::log_level::warning, "this");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "warning this");
}
