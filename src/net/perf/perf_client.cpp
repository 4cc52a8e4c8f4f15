// courier-perf: the perf client. Runs the tests against a courier-perf-server for --sec seconds
// each and prints `--<test> <count/sec> [<count> / <seconds>]`; with --raw also the raw limits of
// the same transport, measured by this binary, and each test's ratio to its limit; --matrix runs
// every transport x start mode x test and prints the table (and --json, --chart).
//   courier-perf --all @ courier-perf-server                 (pipe: starts the server itself)
//   courier-perf-server --uds --file /tmp/perf.sock &  courier-perf --send-and-wait --raw --uds --file /tmp/perf.sock
//   courier-perf --matrix --quick --json perf.json --chart perf.png
#include <limits.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <courier/net/options.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "perf_load.hpp"
#include "perf_matrix.hpp"
#include "perf_tests.hpp"

namespace net = courier::net;
namespace perf = courier::perf;

namespace {

struct perf_options {
  std::map<std::string_view, bool> chosen;  // by test name
  bool all = false, raw = false, matrix = false, quick = false, raw_echo = false;
  double seconds = 2.0;
  std::size_t load = 0, load_rounds = 3;
  std::string json, chart, server, chart_script, compare;
  std::string raw_mode = "pool";
  std::vector<std::string> modes{"pool"}, load_modes{"pool"};
};

const std::map<std::string, perf::start_mode> mode_names{{"pool", perf::start_mode::pool},
                                                         {"thread", perf::start_mode::thread},
                                                         {"fork", perf::start_mode::fork},
                                                         {"spawn", perf::start_mode::spawn}};

net::extra_options declare(perf_options& o) {
  return [&o](CLI::App& app) {
    for (const auto& t : perf::all_tests)
      app.add_flag("--" + std::string(t.name), o.chosen[t.name], std::string(t.help));
    app.add_flag("--all", o.all, "Every test (the default when none is named)");
    app.add_option("--sec", o.seconds, "Seconds each test runs (default 2; --quick: 0.1)")
        ->check(net::positive_number());
    app.add_flag("--raw", o.raw,
                 "Also the raw limits of the transport (raw-roundtrip, raw-pipelined, raw-connect), "
                 "and each test's ratio to its limit");
    app.add_option("--raw-mode", o.raw_mode,
                   "How raw-connect's peer runs each connection: as the server's start mode "
                   "(pool, thread, fork, spawn; default pool)")
        ->check(CLI::IsMember({"pool", "thread", "fork", "spawn"}));
    app.add_flag("--matrix", o.matrix, "Every transport (pipe, uds, tcp) x start mode x test, with the raw limits");
    app.add_option("--load", o.load,
                   "N client connections from this process (epoll, one thread), each calling one call at a time "
                   "for --sec, against the server on uds and tcp and against a bare epoll echo server in the same "
                   "run; one 'load ...' line each (with --matrix: after the table, and in its JSON)")
        ->check(net::positive_number())
        ->type_name("N");
    app.add_option("--load-rounds", o.load_rounds,
                   "--load: rounds of --sec each, alternating between the server and the echo server, each "
                   "round with its clients connected anew (medians; default 3, --quick: 1)")
        ->check(net::positive_number())
        ->type_name("N");
    app.add_option("--load-modes", o.load_modes, "--load: the server's start modes to load (default pool)")
        ->check(CLI::IsMember({"pool", "thread", "fork", "spawn"}))
        ->delimiter(',');
    app.add_option("--modes", o.modes, "--matrix: the server's start modes to run on uds and tcp (default pool)")
        ->check(CLI::IsMember({"pool", "thread", "fork", "spawn"}))
        ->delimiter(',');
    app.add_flag("--quick", o.quick, "Each cell briefly (0.1 s): a smoke run");
    app.add_option("--json", o.json, "--matrix: also write the figures as JSON to FILE")->type_name("FILE");
    app.add_option("--compare", o.compare,
                   "--matrix: set each figure beside FILE's (the shape --json writes: an "
                   "earlier run, or another framework measured on this host)")
        ->type_name("FILE");
    app.add_option("--chart", o.chart, "--matrix: also draw them (gnuplot, log scale) into FILE.png")
        ->type_name("FILE");
    app.add_option("--chart-script", o.chart_script, "The gnuplot script --chart runs (default: the installed one)")
        ->type_name("FILE");
    app.add_option("--server", o.server,
                   "The courier-perf-server --matrix starts (default: the one beside this program)")
        ->type_name("PATH");
    app.add_flag("--raw-echo", o.raw_echo, "(internal) be the raw limits' echo peer on stdin")->group("");
    app.footer(
        "Each test prints '--TEST RATE [COUNT / SECONDS]': COUNT calls (sends, sessions, children) done in SECONDS,\n"
        "and RATE = COUNT / SECONDS per second. The raw limits are this program's bare echo over the same transport\n"
        "(one round trip, 64 pipelined, a connect and one round trip), measured in the same run; (x.xx) after a\n"
        "figure is its ratio to the limit its test is held against. Below 1 is what Courier costs per message. Above "
        "1\n"
        "is not an error: the bare echo writes one message at a time and sleeps in read for each, while Courier puts\n"
        "many messages in each write (send, send-and-callback) and looks again before it sleeps (the round trips).\n"
        "In --matrix, 'libmsgque*' is libmsgque's published summary from another machine (2009): a scale, not a\n"
        "ratio; --compare FILE sets figures measured on this host beside Courier's.");
  };
}

std::string self_path(const char* argv0) {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return argv0;
  return std::string(path, static_cast<std::size_t>(n));
}

std::string beside(const std::string& self, const char* name) {
  return (std::filesystem::path(self).parent_path() / name).string();
}

std::string default_chart_script() {
  for (const char* candidate : {COURIER_PERF_CHART_SCRIPT_INSTALLED, COURIER_PERF_CHART_SCRIPT_SOURCE})
    if (std::filesystem::exists(candidate)) return candidate;
  return COURIER_PERF_CHART_SCRIPT_INSTALLED;
}

void print_figure(std::string_view name, const perf::measured& m) {
  std::printf("%-22.*s %10.0f [%llu / %.2f]", static_cast<int>(name.size()), name.data(), m.per_second(),
              static_cast<unsigned long long>(m.count), m.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  // The raw echo of one connection, a process each (pipe, and the spawn mode's per connection),
  // skips the option parser as a courier-perf-server without arguments does: the raw bound pays
  // no start-up cost that the server does not.
  if (argc == 2 && std::string_view(argv[1]) == "--raw-echo")
    return perf::run_raw_echo(self_path(argv[0]), perf::start_mode::pool);
  if (argc == 2 && std::string_view(argv[1]) == "--raw-echo-epoll") return perf::run_raw_epoll_echo();
  perf_options o;
  const auto extra = declare(o);
  auto opts = net::parse_options(argc, argv, "courier-perf", extra);
  if (!opts) {
    std::fprintf(stderr, "%s", net::options_error("courier-perf", opts.err()).c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", net::options_help("courier-perf", extra).c_str());
    return 0;
  }
  const std::string self = self_path(argv[0]);
  if (o.raw_echo) return perf::run_raw_echo(self, mode_names.at(o.raw_mode));

  std::vector<std::string_view> tests;
  for (const auto& t : perf::all_tests)
    if (o.all || o.chosen[t.name]) tests.push_back(t.name);
  if (tests.empty())
    for (const auto& t : perf::all_tests) tests.push_back(t.name);
  const std::chrono::duration<double> run_for(o.quick && o.seconds == 2.0 ? 0.1 : o.seconds);
  if (o.server.empty()) o.server = beside(self, "courier-perf-server");

  if (o.load == 0 && (o.load_modes.size() != 1 || o.load_modes[0] != "pool")) {
    std::fprintf(stderr, "courier-perf: --load-modes goes with --load\n");
    return 2;
  }
  if (o.load == 0 && o.load_rounds != 3) {
    std::fprintf(stderr, "courier-perf: --load-rounds goes with --load\n");
    return 2;
  }
  const auto modes_named = [](const std::vector<std::string>& names) {
    std::vector<perf::start_mode> modes;
    for (const auto& name : names) modes.push_back(mode_names.at(name));
    return modes;
  };
  perf::load_options load;
  if (o.load != 0) {
    if (auto raised = perf::raise_descriptor_limit(o.load); !raised) {
      std::fprintf(stderr, "courier-perf: --load %zu: %s\n", o.load, raised.err().describe().c_str());
      return 1;
    }
    load.self = self;
    load.server = o.server;
    load.clients = o.load;
    load.run_for = run_for;
    load.rounds = o.quick && o.load_rounds == 3 ? 1 : o.load_rounds;
    load.modes = modes_named(o.load_modes);
    load.timeout = opts->timeout;
  }
  if (o.matrix) {
    perf::matrix_options m;
    m.self = self;
    m.server = o.server;
    m.run_for = run_for;
    m.tests = tests;
    m.modes = modes_named(o.modes);
    if (o.load != 0) m.load = load;
    m.timeout = opts->timeout;
    m.json_file = o.json;
    m.compare_file = o.compare;
    m.chart_file = o.chart;
    m.chart_script = o.chart_script.empty() ? default_chart_script() : o.chart_script;
    return perf::run_matrix(m);
  }
  if (!o.json.empty() || !o.chart.empty() || !o.compare.empty()) {
    std::fprintf(stderr, "courier-perf: --json, --chart and --compare go with --matrix\n");
    return 2;
  }
  if (o.load != 0) {
    int status = 0;
    for (const auto& r : perf::run_load(load))
      for (const auto& why : r.failures) {
        std::fprintf(stderr, "courier-perf: load %s %s: %s\n", net::to_string(r.transport), to_string(r.mode),
                     why.c_str());
        status = 1;
      }
    return status;
  }
  if (o.modes.size() != 1 || o.modes[0] != "pool") {
    std::fprintf(stderr, "courier-perf: --modes goes with --matrix\n");
    return 2;
  }

  net::endpoint where = opts->where;
  if (where.kind == net::transport_kind::pipe && where.command.empty()) where.command = {o.server};
  std::map<std::string_view, perf::measured> raw;
  if (o.raw) {
    auto peer = perf::raw_peer::start(self, where, mode_names.at(o.raw_mode));
    if (!peer) {
      std::fprintf(stderr, "courier-perf: the raw peer: %s\n", peer.err().describe().c_str());
      return 1;
    }
    using run_raw = courier::result<perf::measured> (perf::raw_peer::*)(std::chrono::duration<double>);
    const std::pair<std::string_view, run_raw> figures[] = {{"raw-roundtrip", &perf::raw_peer::roundtrip},
                                                            {"raw-pipelined", &perf::raw_peer::pipelined},
                                                            {"raw-connect", &perf::raw_peer::connect}};
    for (const auto& [name, run] : figures) {
      auto m = ((*peer).*run)(run_for);
      if (!m) {
        std::fprintf(stderr, "courier-perf: %.*s: %s\n", static_cast<int>(name.size()), name.data(),
                     m.err().describe().c_str());
        return 1;
      }
      raw.emplace(name, *m);
      print_figure(name, *m);
      std::printf("\n");
    }
  }

  courier::system sys;
  net::node node(sys);
  net::connection_config base;
  base.name = "courier-perf";
  int status = 0;
  {
    perf::perf_client client(sys, node, where, net::config_from(*opts, base), opts->timeout);
    for (auto test : tests) {
      auto m = client.run(test, run_for);
      if (!m) {
        std::fprintf(stderr, "courier-perf: --%.*s: %s\n", static_cast<int>(test.size()), test.data(),
                     m.err().describe().c_str());
        if (m.err() == courier::errc::no_such_service) {
          // The tests call the services of courier-perf-server (ADD5, SNT_, ...): any other server
          // lacks them.
          const char* start = where.kind == net::transport_kind::tcp   ? "courier-perf-server --tcp --port P"
                              : where.kind == net::transport_kind::uds ? "courier-perf-server --uds --file F"
                                                                       : "courier-perf @ courier-perf-server";
          std::fprintf(stderr,
                       "courier-perf: the server at %s is not courier-perf-server, whose services the tests call; "
                       "run '%s' (or --matrix, which starts its own)\n",
                       to_string(where).c_str(), start);
          return 1;
        }
        status = 1;
        continue;
      }
      print_figure("--" + std::string(test), *m);
      for (const auto& t : perf::all_tests) {
        auto b = raw.find(t.bound);
        if (t.name == test && b != raw.end() && b->second.per_second() > 0)
          std::printf("  %.2fx %.*s", m->per_second() / b->second.per_second(), static_cast<int>(t.bound.size()),
                      t.bound.data());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  node.stop(std::chrono::seconds(2));
  return status;
}
