#include "perf_matrix.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "machine.hpp"
#include "perf_tests.hpp"
#include "server_process.hpp"

namespace courier::perf {

namespace {

using kind = net::transport_kind;

struct setup {
  kind transport;
  start_mode mode;
  [[nodiscard]] std::string label() const { return std::string(net::to_string(transport)) + " " + to_string(mode); }
};

struct setup_result {
  setup where;
  std::map<std::string, measured, std::less<>> figures;  // tests and raw limits by name
  std::vector<std::string> failures;
};

/// libmsgque's summary, C row: microseconds per END, CALLBACK, WAIT, parent create + delete, child
/// create + delete.
struct libmsgque_row {
  kind transport;
  start_mode mode;
  double end, callback, wait, parent, child;
};
constexpr libmsgque_row libmsgque_rows[] = {
    {kind::pipe, start_mode::spawn, 3.42, 9.15, 14.49, 744.77 + 94.11, 70.18 + 23.82},
    {kind::uds, start_mode::fork, 3.36, 9.53, 14.79, 294.96 + 119.75, 69.97 + 23.76},
    {kind::uds, start_mode::thread, 3.65, 9.77, 15.08, 140.56 + 77.82, 74.89 + 25.37},
    {kind::uds, start_mode::spawn, 4.40, 9.40, 14.67, 735.16 + 115.10, 71.23 + 24.28},
    {kind::tcp, start_mode::fork, 2.87, 6.82, 24.20, 361.46 + 167.53, 80.15 + 34.82},
    {kind::tcp, start_mode::thread, 3.10, 7.16, 24.61, 215.28 + 113.75, 80.32 + 34.36},
    {kind::tcp, start_mode::spawn, 2.80, 6.47, 25.42, 785.17 + 157.26, 80.34 + 34.04},
};

std::string_view bound_of(std::string_view test) {
  for (const auto& t : all_tests)
    if (t.name == test) return t.bound;
  return {};
}

/// "1.23M", "45.6k", "789".
std::string human(double per_second) {
  char text[32];
  if (per_second >= 1e6)
    std::snprintf(text, sizeof text, "%.2fM", per_second / 1e6);
  else if (per_second >= 1e4)
    std::snprintf(text, sizeof text, "%.1fk", per_second / 1e3);
  else
    std::snprintf(text, sizeof text, "%.0f", per_second);
  return text;
}

setup_result run_setup(const matrix_options& opts, const setup& s) {
  setup_result out{s, {}, {}};
  net::endpoint where;
  where.kind = s.transport;
  {
    net::endpoint raw_where = where;
    raw_where.file = "/tmp/courier-perf-" + std::to_string(::getpid());  // uds: the raw peer's file is beside it
    auto raw = raw_peer::start(opts.self, raw_where, s.mode);
    if (!raw) {
      out.failures.push_back("raw peer: " + raw.err().describe());
    } else {
      auto note = [&](std::string_view name, courier::result<measured> m) {
        if (m)
          out.figures.emplace(std::string(name), *m);
        else
          out.failures.push_back(std::string(name) + ": " + m.err().describe());
      };
      note("raw-roundtrip", raw->roundtrip(opts.run_for));
      note("raw-pipelined", raw->pipelined(opts.run_for));
      note("raw-connect", raw->connect(opts.run_for));
    }
  }
  std::optional<server_process> server;
  if (s.transport == kind::pipe) {
    where.command = {opts.server};
  } else {
    auto started = server_process::start({opts.server, "--silent"}, s.mode, where, opts.timeout);
    if (!started) {
      out.failures.push_back("server: " + started.err().describe());
      return out;
    }
    server.emplace(std::move(*started));
  }
  courier::system sys;
  net::node node(sys);
  {
    net::connection_config cfg;
    cfg.name = "courier-perf";
    cfg.handshake_timeout = cfg.connect_timeout = opts.timeout;
    perf_client client(sys, node, where, cfg, opts.timeout);
    for (auto test : opts.tests) {
      auto m = client.run(test, opts.run_for);
      if (m)
        out.figures.emplace(std::string(test), *m);
      else
        out.failures.push_back(std::string(test) + ": " + m.err().describe());
    }
  }
  node.stop(std::chrono::seconds(2));
  return out;
}

std::optional<double> ratio_to_bound(const setup_result& r, std::string_view test) {
  const auto bound = bound_of(test);
  auto t = r.figures.find(test);
  auto b = r.figures.find(bound);
  if (bound.empty() || t == r.figures.end() || b == r.figures.end() || b->second.per_second() <= 0) return std::nullopt;
  return t->second.per_second() / b->second.per_second();
}

/// Figures read from a --compare file, by "transport mode test" (per second), and what it says of
/// its machine.
struct compared {
  std::string machine;
  std::map<std::string, double, std::less<>> per_second;
  [[nodiscard]] std::optional<double> ratio(const setup_result& r, std::string_view test) const {
    auto theirs = per_second.find(r.where.label() + " " + std::string(test));
    auto ours = r.figures.find(test);
    if (theirs == per_second.end() || theirs->second <= 0 || ours == r.figures.end()) return std::nullopt;
    return ours->second.per_second() / theirs->second;
  }
};

courier::result<compared> read_compared(const std::string& file) {
  std::ifstream in(file);
  if (!in) return courier::error(errc::invalid_argument, "--compare " + file + ": cannot read it");
  compared out;
  try {
    const auto doc = nlohmann::json::parse(in);
    out.machine = doc.value("machine", std::string("?"));
    for (const auto& s : doc.at("setups")) {
      const std::string label = s.at("transport").get<std::string>() + " " + s.at("mode").get<std::string>();
      for (const auto& [name, f] : s.at("figures").items())
        out.per_second[label + " " + name] = f.at("per_second").get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    return courier::error(errc::invalid_argument,
                          "--compare " + file + ": not the shape --json writes (" + e.what() + ")");
  }
  return out;
}

void print_table(const matrix_options& opts, const std::vector<setup_result>& results, const compared* other) {
  std::vector<std::string_view> columns(opts.tests.begin(), opts.tests.end());
  columns.insert(columns.end(), raw_tests.begin(), raw_tests.end());
  std::printf(
      "\ncourier-perf matrix: counts per second, %.2g s per cell. (x.xx) is the ratio to the raw limit named under\n"
      "the test, this binary's bare echo over the same transport in the same run: below 1 is what Courier costs;\n"
      "above 1, Courier batched writes or looked again before it slept, where the bare echo sleeps in read for\n"
      "each message. 'libmsgque*' is libmsgque's published summary (C, an Intel Core2 6600 in 2009): another\n"
      "machine's figures, a scale and not a ratio; --compare FILE sets figures from this host beside these.\n",
      opts.run_for.count());
  if (other != nullptr)
    std::printf("'x compared': the ratio to %s (%s)\n", opts.compare_file.c_str(), other->machine.c_str());
  std::printf("\n");
  std::printf("%-12s", "setup");
  for (auto c : columns) std::printf(" | %17.*s", static_cast<int>(c.size()), c.data());
  std::printf("\n%-12s", "");
  for (auto c : columns) {
    const auto b = bound_of(c);
    std::printf(" | %17.*s", static_cast<int>(b.size()), b.data());
  }
  std::printf("\n");
  for (const auto& r : results) {
    std::printf("%-12s", r.where.label().c_str());
    for (auto c : columns) {
      auto f = r.figures.find(c);
      std::string cell = f == r.figures.end() ? "failed" : human(f->second.per_second());
      if (auto q = ratio_to_bound(r, c)) {
        char text[16];
        std::snprintf(text, sizeof text, " (%.2f)", *q);
        cell += text;
      }
      std::printf(" | %17s", cell.c_str());
    }
    std::printf("\n%-12s", "libmsgque*");
    for (auto c : columns) {
      const double theirs = libmsgque_per_second(r.where.transport, r.where.mode, c);
      std::printf(" | %17s", theirs > 0 ? human(theirs).c_str() : "");
    }
    if (other != nullptr) {
      std::printf("\n%-12s", "x compared");
      for (auto c : columns) {
        char text[16] = "";
        if (auto q = other->ratio(r, c)) std::snprintf(text, sizeof text, "%.2fx", *q);
        std::printf(" | %17s", text);
      }
    }
    std::printf("\n");
  }
}

nlohmann::json to_json(const matrix_options& opts, const std::vector<setup_result>& results, const compared* other) {
  nlohmann::json doc;
  doc["machine"] = machine_description();
  doc["seconds_per_cell"] = opts.run_for.count();
  doc["libmsgque"] =
      "libmsgque's performance summary, C row, measured on another machine (Intel Core2 6600, 2009): "
      "a scale, not a ratio; pool is set beside its thread row";
  if (other != nullptr) doc["compared_with"] = opts.compare_file;
  for (const auto& r : results) {
    nlohmann::json s;
    s["transport"] = net::to_string(r.where.transport);
    s["mode"] = to_string(r.where.mode);
    for (const auto& [name, m] : r.figures) {
      nlohmann::json f{{"count", m.count}, {"seconds", m.seconds}, {"per_second", m.per_second()}};
      if (auto b = bound_of(name); !b.empty()) f["bound"] = std::string(b);
      if (auto q = ratio_to_bound(r, name)) f["ratio_to_bound"] = *q;
      if (const double theirs = libmsgque_per_second(r.where.transport, r.where.mode, name); theirs > 0)
        f["libmsgque_per_second"] = theirs;
      if (other != nullptr)
        if (auto q = other->ratio(r, name)) f["ratio_to_compared"] = *q;
      s["figures"][name] = std::move(f);
    }
    s["failures"] = r.failures;
    doc["setups"].push_back(std::move(s));
  }
  return doc;
}

/// The chart's data: a row per cell (setup and test), Courier's figure, its raw bound, libmsgque's.
bool write_chart_data(const std::string& file, const matrix_options& opts, const std::vector<setup_result>& results) {
  std::ofstream out(file);
  out << "# cell courier raw libmsgque (counts per second; ? where there is none)\n";
  auto value = [](std::optional<double> v) { return v && *v > 0 ? std::to_string(*v) : std::string("?"); };
  for (const auto& r : results) {
    for (auto test : opts.tests) {
      auto f = r.figures.find(test);
      auto b = r.figures.find(bound_of(test));
      const double theirs = libmsgque_per_second(r.where.transport, r.where.mode, test);
      out << '"' << r.where.label() << ' ' << test << "\" "
          << value(f == r.figures.end() ? std::nullopt : std::optional(f->second.per_second())) << ' '
          << value(b == r.figures.end() ? std::nullopt : std::optional(b->second.per_second())) << ' '
          << value(theirs > 0 ? std::optional(theirs) : std::nullopt) << '\n';
    }
  }
  return static_cast<bool>(out);
}

bool draw_chart(const matrix_options& opts, const std::vector<setup_result>& results) {
  const std::string data = opts.chart_file + ".dat";
  if (!write_chart_data(data, opts, results)) {
    std::fprintf(stderr, "courier-perf: cannot write %s\n", data.c_str());
    return false;
  }
  const std::string title = "courier-perf --matrix, " + machine_description();
  // The names go to gnuplot as strings in its own syntax: single quotes, doubled inside.
  auto quoted = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
    return q + "'";
  };
  const std::string settings =
      "datafile=" + quoted(data) + "; outfile=" + quoted(opts.chart_file) + "; charttitle=" + quoted(title);
  std::vector<std::string> command{"gnuplot", "-e", settings, opts.chart_script};
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  auto child = net::spawn_with_stdio(command, null);
  ::close(null);
  if (!child) {
    std::fprintf(stderr, "courier-perf: cannot run gnuplot: %s\n", child.err().describe().c_str());
    return false;
  }
  const int status = child->wait(std::chrono::seconds(60));
  if (status != 0) {
    std::fprintf(stderr, "courier-perf: gnuplot %s on %s\n", child->describe_exit().c_str(), opts.chart_script.c_str());
    return false;
  }
  std::printf("chart: %s (data: %s)\n", opts.chart_file.c_str(), data.c_str());
  return true;
}

}  // namespace

double libmsgque_per_second(kind transport, start_mode mode, std::string_view test) noexcept {
  if (mode == start_mode::pool) mode = start_mode::thread;
  for (const auto& row : libmsgque_rows) {
    if (row.transport != transport || row.mode != mode) continue;
    const double us = test == "send"                ? row.end
                      : test == "send-and-callback" ? row.callback
                      : test == "send-and-wait"     ? row.wait
                      : test == "parent"            ? row.parent
                      : test == "child"             ? row.child
                                                    : 0.0;
    return us > 0 ? 1e6 / us : 0.0;
  }
  return 0.0;
}

int run_matrix(const matrix_options& opts) {
  std::vector<setup> setups{{kind::pipe, start_mode::spawn}};
  for (kind t : {kind::uds, kind::tcp})
    for (start_mode m : opts.modes) setups.push_back({t, m});
  const double per_setup = opts.run_for.count() * 1.1 * static_cast<double>(opts.tests.size() + raw_tests.size()) + 0.5;
  std::printf("machine: %s\n", machine_description().c_str());
  std::optional<compared> other;
  if (!opts.compare_file.empty()) {
    auto read = read_compared(opts.compare_file);
    if (!read) {
      std::fprintf(stderr, "courier-perf: %s\n", read.err().text.c_str());
      return 2;
    }
    other = std::move(*read);
  }
  std::vector<setup_result> results;
  bool failed = false;
  for (std::size_t i = 0; i < setups.size(); ++i) {
    std::fprintf(stderr, "courier-perf: [%zu/%zu] %s: the raw limits, then %zu tests (about %.0f s left)\n", i + 1,
                 setups.size(), setups[i].label().c_str(), opts.tests.size(),
                 per_setup * static_cast<double>(setups.size() - i));
    results.push_back(run_setup(opts, setups[i]));
    for (const auto& why : results.back().failures) {
      std::fprintf(stderr, "courier-perf: %s: %s\n", setups[i].label().c_str(), why.c_str());
      failed = true;
    }
  }
  print_table(opts, results, other ? &*other : nullptr);
  std::vector<load_result> loads;
  if (opts.load) {
    std::fprintf(
        stderr,
        "courier-perf: the load: %zu clients, in rounds alternating between the server and the raw echo server\n",
        opts.load->clients);
    loads = run_load(*opts.load);
    for (const auto& r : loads)
      for (const auto& why : r.failures) {
        std::fprintf(stderr, "courier-perf: load %s %s: %s\n", net::to_string(r.transport), to_string(r.mode),
                     why.c_str());
        failed = true;
      }
  }
  if (!opts.json_file.empty()) {
    std::ofstream out(opts.json_file);
    auto document = to_json(opts, results, other ? &*other : nullptr);
    if (opts.load) document["load"] = load_json(loads);
    out << document.dump(2) << '\n';
    if (!out) {
      std::fprintf(stderr, "courier-perf: cannot write %s\n", opts.json_file.c_str());
      failed = true;
    } else {
      std::printf("json: %s\n", opts.json_file.c_str());
    }
  }
  if (!opts.chart_file.empty() && !draw_chart(opts, results)) failed = true;
  return failed ? 1 : 0;
}

}  // namespace courier::perf
