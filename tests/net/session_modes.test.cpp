// Start modes of a session server (net/server.hpp), across processes, as all of them share them: the
// acceptor of --thread, --fork and --spawn (src/net/start_modes/session_acceptor.cpp) counts
// sessions against --max-connections, refuses with why a session that cannot get its descriptors,
// thread or process, tells the connections in its backlog at a stop, and starts each session's
// handshake time-out at the accept; a process with a running system is refused the fork mode with
// a clear error; over pipe one session on the main thread; every session numbered; the log
// (--debug, --silent); the mass test. Each mode's own cases: start_modes/thread.test.cpp and
// start_modes/process.test.cpp.
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "courier/net/node.hpp"
#include "courier/net/server.hpp"
#include "courier/system.hpp"
#include "net_test_util.hpp"
#include "peers.hpp"
#include "start_modes/start_modes_test_util.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using namespace courier_test::start_modes;
namespace net = courier::net;

namespace {

/// Settings for a sanitized server that is run out of processes, as a shell prefix: LeakSanitizer
/// checks at exit on a thread of its own, which the limit refuses (a fatal error of its own).
std::string sanitizer_settings_for_limits() {
#ifdef __SANITIZE_ADDRESS__
  return "export ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\";";
#else
  return {};
#endif
}

/// The test server in `mode` over uds, started by /bin/sh after `prefix` (a ulimit) through
/// `wrapper` (a command that runs it with another limit or as another user).
started_server start_limited_server(const std::string& prefix, const std::string& wrapper, const std::string& mode,
                                    std::vector<std::string> extra = {}) {
  net::endpoint where;
  where.kind = net::transport_kind::uds;
  where.file = courier_test::temp_socket_path("limited");
  std::string line = sanitizer_settings_for_limits() + prefix + " exec " + wrapper + " " +
                     COURIER_TEST_SESSION_MODES_SERVER + " --silent --" + mode + " --uds --file " + where.file;
  for (const auto& o : extra) line.append(" ").append(o);
  return launch({"/bin/sh", "-c", line}, std::move(where));
}

/// Serves one session (after the readiness probe's has ended), refuses a second connection, closes
/// the first, stops the server with SIGTERM, and returns what it logged.
std::string log_of_one_session(std::vector<std::string> options) {
  const std::string log_file = courier_test::temp_socket_path("log") + ".txt";
  options.insert(options.end(), {"--max-connections", "1"});
  auto server = start_logged_server(log_file, options);
  {
    courier::system sys;
    net::node node(sys);
    const net::context_ref first = first_served_session(node, server.where);
    REQUIRE_FALSE(node.connect(server.where));
    REQUIRE(first.close_wait(5s));
    node.stop();
  }
  std::this_thread::sleep_for(50ms);  // the server's end of the close
  server.process.kill(SIGTERM);
  CHECK(server.process.wait(10s) == 0);
  std::string text = read_file(log_file);
  ::unlink(log_file.c_str());
  return text;
}

/// The server's child processes (the sessions of --fork and --spawn), from its main thread's list.
int children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  int count = 0;
  for (long child = 0; in >> child;) ++count;
  return count;
}

long resident_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

bool has_pidfd() {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, ::getpid(), 0);
  if (fd < 0) return false;
  ::close(static_cast<int>(fd));
  return true;
#else
  return false;
#endif
}

struct server_footprint {
  int descriptors, threads, children;
  long resident;
};

server_footprint footprint_of(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  return {courier_test::directory_entries(proc + "/fd"), courier_test::directory_entries(proc + "/task"),
          children_of(pid), resident_kib(pid)};
}

}  // namespace

TEST_CASE("--max-connections counts the session threads or processes: one more is refused on the wire", "[modes]") {
  courier_test::watchdog wd{"session modes: limit", 30s};
  for (const std::string mode : {"thread", "fork", "spawn"}) {
    INFO(mode);
    auto server = start_server(mode, net::transport_kind::uds, {"--max-connections", "1"});
    courier::system sys;
    net::node node(sys);
    // The readiness probe's session may still be ending: wait until one session is served.
    const net::context_ref first = first_served_session(node, server.where);
    auto refused = node.connect(server.where);
    REQUIRE_FALSE(refused);
    CHECK(refused.err().text.find("too many connections") != std::string::npos);
    // Once the first session's thread or process has ended (and been joined or reaped), a new
    // one is served.
    REQUIRE(first.close_wait(5s));
    const auto again_until = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      auto b = node.connect(server.where);
      if (b) {
        CHECK(pid_of(*b) > 0);
        break;
      }
      REQUIRE(std::chrono::steady_clock::now() < again_until);
      std::this_thread::sleep_for(10ms);
    }
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(10s) == 0);
    node.stop();
  }
}

TEST_CASE("a session that cannot get its descriptors is refused with 260 and why; the server goes on",
          "[modes][limits]") {
  courier_test::watchdog wd{"session modes: out of descriptors", 90s};
#ifdef __SANITIZE_ADDRESS__
  // UBSan checks a vptr it has not seen by probing the object's memory through a pipe of its own
  // (and reads its suppressions on its first report): in a process out of descriptors the probe
  // fails and a sound object (std::error_category, std::system_error) is reported as one with an
  // invalid vptr. The Release and ThreadSanitizer builds run this test.
  WARN("AddressSanitizer+UBSan build: the sanitizer runtime needs descriptors this test takes away");
  return;
#endif
  // Each --thread session makes a system and a node of its own (a wake-up descriptor, an epoll and
  // its eventfd): under 48 descriptors a few dozen silent connections run the process out.
  started_server server = start_limited_server("ulimit -n 48;", "", "thread", {"--kept-threads", "0"});
  {
    std::vector<std::unique_ptr<courier_test::peers::raw_peer>> peers;
    const first_frames seen = open_silent(server.where, 30, peers, "file descriptors");
    INFO("served " << seen.served << ", refused " << seen.refused << ", other " << seen.other << ": " << seen.texts);
    CHECK(seen.served >= 1);
    CHECK(seen.refused >= 1);
    CHECK(seen.other == 0);
    REQUIRE_FALSE(server.process.try_wait());  // alive
  }
  serves_again(server);
  server.process.kill(SIGTERM);
  CHECK(server.process.wait(courier_test::scaled(10s)) == 0);
}

TEST_CASE("a session that cannot get a thread or a process is refused with 260 and why", "[modes][limits]") {
  courier_test::watchdog wd{"session modes: out of processes", 120s};
  // RLIMIT_NPROC binds only a user without CAP_SYS_RESOURCE: the server runs as nobody.
  if (::geteuid() != 0) {
    WARN("not root: the server cannot be started as another user, so its process limit is not tested");
    return;
  }
  for (const std::string mode : {"thread", "fork", "spawn"}) {
    INFO(mode);
    started_server server =
        start_limited_server("", "prlimit --nproc=8:8 setpriv --reuid=nobody --regid=nogroup --clear-groups", mode,
                             mode == "thread" ? std::vector<std::string>{"--kept-threads", "0"}
                             : mode == "fork" ? std::vector<std::string>{"--kept-processes", "0"}
                                              : std::vector<std::string>{});
    {
      std::vector<std::unique_ptr<courier_test::peers::raw_peer>> peers;
      const first_frames seen = open_silent(server.where, 20, peers, "out of threads or processes");
      INFO("served " << seen.served << ", refused " << seen.refused << ", other " << seen.other << ": " << seen.texts);
      CHECK(seen.served >= 1);
      CHECK(seen.refused >= 1);
      CHECK(seen.other == 0);
      REQUIRE_FALSE(server.process.try_wait());
    }
    serves_again(server);
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(courier_test::scaled(10s)) == 0);
  }
}

TEST_CASE("a process with a running system is refused the fork mode, with why", "[modes]") {
  courier_test::watchdog wd{"session modes: fork rule", 20s};
  courier::system sys;
  const std::string file = courier_test::temp_socket_path("rule");
  const char* argv[] = {"server", "--fork", "--uds", "--file", file.c_str()};
  net::server_program program{.name = "rule-test"};
  program.offers_start_modes = true;
  bool served = false;
  const int status = net::run_server(5, argv, program, [&](net::server_setup&) -> courier::result<net::serving> {
    served = true;
    return net::serving{};
  });
  CHECK(status == 1);
  CHECK_FALSE(served);
  CHECK(courier::system::alive() == 1);
  struct stat st {};
  CHECK(::stat(file.c_str(), &st) != 0);  // it never listened
}

TEST_CASE("over pipe a session server serves its one session on the main thread; --pool on the workers", "[modes]") {
  courier_test::watchdog wd{"session modes: pipe", 30s};
  courier::system sys;
  net::node node(sys);
  for (const bool pool : {false, true}) {
    INFO((pool ? "--pool" : "no mode"));
    net::endpoint where;
    where.kind = net::transport_kind::pipe;
    where.command = {COURIER_TEST_SESSION_MODES_SERVER};  // no arguments: the parser is skipped
    if (pool) where.command.insert(where.command.end(), {"--silent", "--pool"});
    auto session = node.connect(where);
    REQUIRE(session);
    const auto pid = pid_of(*session);
    CHECK(pid != ::getpid());
    // The main thread's id is the process's.
    if (pool)
      CHECK(tid_of(*session) != pid);
    else
      CHECK(tid_of(*session) == pid);
    CHECK(session->close_wait(5s));
  }
  node.stop();
}

TEST_CASE("--workers sizes the pool that serves the sessions, and implies --pool", "[modes]") {
  courier_test::watchdog wd{"session modes: --workers", 30s};
  courier::system sys;
  net::node node(sys);
  for (const char* workers : {"1", "3"}) {
    INFO("--workers " << workers);
    net::endpoint where;
    where.kind = net::transport_kind::pipe;
    where.command = {COURIER_TEST_SESSION_MODES_SERVER, "--silent", "--workers", workers};
    auto session = node.connect(where);
    REQUIRE(session);
    CHECK(int64_from(*session, courier::token("WRKS")) == std::atoi(workers));
    CHECK(tid_of(*session) != pid_of(*session));  // on a worker, not the main thread
    CHECK(session->close_wait(5s));
  }
  node.stop();
}

TEST_CASE("--workers out of range, or with a start mode that has no pool, is refused before serving", "[modes]") {
  courier_test::watchdog wd{"session modes: --workers refused", 20s};
  const std::string file = courier_test::temp_socket_path("workers");
  for (const std::vector<const char*>& args : std::vector<std::vector<const char*>>{
           {"server", "--workers", "0", "--uds", "--file", file.c_str()},
           {"server", "--workers", "65", "--uds", "--file", file.c_str()},
           {"server", "--workers", "2", "--fork", "--uds", "--file", file.c_str()},
           {"server", "--workers", "2", "--thread", "--uds", "--file", file.c_str()}}) {
    INFO(args[1] << " " << args[2] << " " << args[3]);
    net::server_program program{.name = "workers-test"};
    program.offers_start_modes = true;
    bool served = false;
    const int status = net::run_server(static_cast<int>(args.size()), args.data(), program,
                                       [&](net::server_setup&) -> courier::result<net::serving> {
                                         served = true;
                                         return net::serving{};
                                       });
    CHECK(status == 2);
    CHECK_FALSE(served);
    struct stat st {};
    CHECK(::stat(file.c_str(), &st) != 0);  // it never listened
  }
}

TEST_CASE("a plain thread that closes a pipe session sleeps while the server process finishes exiting", "[modes]") {
  courier_test::watchdog wd{"session modes: pipe close waits for the exit", 30s};
  courier::system sys;
  net::node node(sys);
  net::endpoint where;
  where.kind = net::transport_kind::pipe;
  where.command = {COURIER_TEST_SESSION_MODES_SERVER, "--silent"};
  auto session = node.connect(where);
  REQUIRE(session);
  // The server answers the close, then takes this long to exit; the close completes with the
  // exit. The stream has ended meanwhile, and its hang-up stays readable.
  constexpr std::int32_t linger_ms = 150;
  auto lingers = session->call_wait(courier::token("LNGR"), net::args(linger_ms), 5s);
  REQUIRE(lingers);
  const auto cpu_now = [] {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
  };
  const auto wall_before = std::chrono::steady_clock::now();
  const auto cpu_before = cpu_now();
  CHECK(session->close_wait(5s));
  const auto waited = std::chrono::steady_clock::now() - wall_before;
  const auto busy = cpu_now() - cpu_before;
  using milliseconds = std::chrono::duration<double, std::milli>;
  INFO("waited " << milliseconds(waited).count() << " ms, on the CPU " << milliseconds(busy).count() << " ms");
  CHECK(waited >= std::chrono::milliseconds(linger_ms / 2));  // the wait this test is about took place
  CHECK(busy * 4 < waited);                                   // not polling a hung-up socket all along
  node.stop();
}

TEST_CASE("every session of a server has a number of its own, in every start mode", "[modes]") {
  courier_test::watchdog wd{"session modes: session numbers", 90s};
  const auto number_of = [](const net::context_ref& session) {
    auto reply = session.call_wait(courier::token("PEER"), {}, 5s);
    REQUIRE(reply);
    auto items = reply->items();
    (void)items.read<std::string_view>();
    (void)items.read<std::string_view>();
    auto id = items.read<std::uint64_t>();
    REQUIRE(id);
    return *id;
  };
  for (const std::string mode : {"pool", "thread", "fork", "spawn"}) {
    INFO(mode);
    auto server = start_server(mode, net::transport_kind::uds);
    courier::system sys;
    net::node node(sys);
    std::set<std::uint64_t> numbers;
    int sessions = 0;
    {
      // Three at once (threads or processes side by side), then three one after another (which a
      // kept thread or process serves again).
      std::vector<net::context_ref> at_once;
      for (int i = 0; i < 3; ++i) at_once.push_back(first_served_session(node, server.where));
      for (auto& s : at_once) numbers.insert(number_of(s)), ++sessions;
    }
    for (int i = 0; i < 3; ++i) {
      auto s = node.connect(server.where);
      REQUIRE(s);
      numbers.insert(number_of(*s));
      ++sessions;
      REQUIRE(s->close_wait(5s));
    }
    CHECK(numbers.size() == static_cast<std::size_t>(sessions));
    CHECK(numbers.count(0) == 0);
    node.stop();
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(courier_test::scaled(10s)) == 0);
  }
}

TEST_CASE("the log tells of connections, sessions and refusals, as --debug and --silent ask", "[modes][log]") {
  courier_test::watchdog wd{"session modes: log", 60s};
  const std::string me = "uds pid " + std::to_string(::getpid());
  for (const std::string mode : {"pool", "thread"}) {
    INFO(mode);
    const std::string detailed = log_of_one_session({"--" + mode, "--debug", "1"});
    INFO(detailed);
    CHECK(detailed.find("info: server connection with " + me) != std::string::npos);
    CHECK(detailed.find(" open") != std::string::npos);
    CHECK(detailed.find("info: session ") != std::string::npos);
    CHECK(detailed.find(" started for " + me) != std::string::npos);
    CHECK(detailed.find("ended: ") != std::string::npos);
    CHECK(detailed.find("warning: refused a connection from " + me) != std::string::npos);
    CHECK(detailed.find("too many connections") != std::string::npos);
    if (mode == "thread")
      CHECK(detailed.find("warning: --thread: each session has a system of its own; sessions share only") !=
            std::string::npos);

    const std::string usual = log_of_one_session({"--" + mode});
    INFO(usual);
    CHECK(usual.find("info:") == std::string::npos);
    CHECK(usual.find("warning: refused a connection from " + me) != std::string::npos);

    const std::string silent = log_of_one_session({"--" + mode, "--silent"});
    CHECK(silent.empty());
  }
}

TEST_CASE("connections waiting in the backlog when the acceptor stops are told it is shutting down",
          "[modes][signals]") {
  courier_test::watchdog wd{"session modes: backlog at SIGTERM", 120s};
  for (const std::string mode : {"thread", "fork", "spawn"}) {
    INFO(mode);
    const std::string log_file = courier_test::temp_socket_path("backlog") + ".txt";
    auto server = start_logged_server(log_file, {"--" + mode, "--debug", "1"});
    const pid_t pid = server.process.pid();
    // Stopped, as the kernel reports to this process (its parent) once every thread has stopped:
    // the connections below then wait in the listen backlog, and SIGTERM is read before them.
    REQUIRE(::kill(pid, SIGSTOP) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, WUNTRACED) == pid);
    REQUIRE(WIFSTOPPED(status));
    std::vector<std::unique_ptr<courier_test::peers::raw_peer>> peers;
    for (int i = 0; i < 10; ++i) peers.push_back(std::make_unique<courier_test::peers::raw_peer>(server.where));
    REQUIRE(::kill(pid, SIGTERM) == 0);
    REQUIRE(::kill(pid, SIGCONT) == 0);
    int told = 0;
    std::string seen;
    for (auto& p : peers) {
      auto f = p->next(10s);
      if (f && f->kind == courier::wire::kind::error && f->code == 260 &&
          f->text.find("shutting down") != std::string::npos)
        ++told;
      else if (!f)
        seen += p->at_eof() ? "end of stream; " : "nothing; ";
      else
        seen += "kind " + std::to_string(static_cast<int>(f->kind)) + " code " + std::to_string(f->code) + " " +
                f->text + "; ";
    }
    CHECK(server.process.wait(courier_test::scaled(10s)) == 0);
    INFO("not told: " << seen);
    INFO("log: " << read_file(log_file));
    CHECK(told == 10);
    ::unlink(log_file.c_str());
  }
}

TEST_CASE("a silent connection's handshake time-out counts from its accept, not from its session's start",
          "[modes][handshake]") {
  courier_test::watchdog wd{"session modes: handshake from the accept", 90s};
  // Each session's serve callback takes 5 s and the handshake time-out is 3 s: counted from the
  // accept, a silent peer is refused as soon as its session starts (at about 5 s); counted from
  // the session's start it would be held 8 s. The three servers run side by side.
  std::vector<std::pair<std::string, started_server>> servers;
  for (const std::string mode : {"thread", "fork", "spawn"})
    servers.emplace_back(mode,
                         start_limited_server("export COURIER_TEST_SLOW_START_MS=5000;", "", mode, {"--timeout", "3"}));
  std::vector<std::unique_ptr<courier_test::peers::raw_peer>> silent;
  const auto connected = std::chrono::steady_clock::now();
  for (auto& [mode, server] : servers) silent.push_back(std::make_unique<courier_test::peers::raw_peer>(server.where));
  for (std::size_t i = 0; i < servers.size(); ++i) {
    INFO(servers[i].first);
    std::vector<courier_test::peers::frame> seen;
    REQUIRE(silent[i]->wait_eof(20s, &seen));
    const auto held =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - connected);
    INFO("held " << held.count() << " ms");
    CHECK(held < 7900ms);  // from the session's start: 8 s and more
    REQUIRE_FALSE(seen.empty());
    CHECK(seen.back().kind == courier::wire::kind::error);
    CHECK(seen.back().code == static_cast<std::uint32_t>(courier::wire::errc::bad_handshake));
  }
  for (auto& [mode, server] : servers) {
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(courier_test::scaled(20s)) == 0);
  }
}

TEST_CASE("mass: thread, fork and spawn sessions by the thousand, hundreds at once, none left but those kept",
          "[modes][.mass]") {
  courier_test::watchdog wd{"session modes: mass", 280s};
#if defined(COURIER_TEST_TSAN)
  constexpr bool tsan = true;  // TSan starts a background thread with a process's first thread of its own
#else
  constexpr bool tsan = false;
#endif
#if defined(COURIER_TEST_TSAN) || defined(__SANITIZE_ADDRESS__)
  constexpr int scale = 10;  // the sanitizers slow each session; the full count runs in Release
#else
  constexpr int scale = 1;
#endif
  struct plan {
    const char* mode;
    int sequential, at_once;
  };
  // A thread per session is what froze seed 000's application after a few hundred: 500 at once
  // here. A process per session carries a whole threaded system: 100 at once on 2 cores.
  for (const plan p : {plan{"thread", 10'000 / scale, 500 / scale}, plan{"fork", 2'000 / scale, 100 / scale},
                       plan{"spawn", 1'000 / scale, 100 / scale}}) {
    INFO(p.mode);
    const bool thread_mode = std::string(p.mode) == "thread";
    const bool fork_mode = std::string(p.mode) == "fork";
    const int acceptor_threads = tsan && thread_mode ? 2 : 1;
    // Up to this many threads or forked processes wait for the next session once theirs ended;
    // none ends unjoined or unreaped. The acceptor holds a pidfd and a control socket for each
    // kept process.
    const int kept = thread_mode || fork_mode ? 4 : 0;
    const int most_threads = acceptor_threads + (thread_mode ? kept : 0);
    const int most_children = fork_mode ? kept : 0;
    // A pidfd per child where the kernel has them (child_process), and the control socket.
    const int per_kept_child = 1 + (has_pidfd() ? 1 : 0);
    const auto own_descriptors = [&](const server_footprint& f) {
      return f.descriptors - (fork_mode ? per_kept_child * f.children : 0);
    };
    auto server = thread_mode ? start_server(p.mode, net::transport_kind::uds, {"--kept-threads", "4"})
                  : fork_mode ? start_server(p.mode, net::transport_kind::uds, {"--kept-processes", "4"})
                              : start_server(p.mode, net::transport_kind::uds);
    const pid_t pid = server.process.pid();
    courier::system sys;
    net::node node(sys);
    auto one = [&]() {
      auto c = node.connect(server.where);
      if (!c) return false;
      auto r = c->call_wait(courier::token("PID_"), {}, 10s);
      return r && c->close_wait(10s);
    };
    for (int i = 0; i < 20; ++i) REQUIRE(one());  // warm
    const auto at_rest = [&](const server_footprint& now, int descriptors) {
      return own_descriptors(now) == descriptors && now.threads <= most_threads && now.children <= most_children;
    };
    const auto settled = [&](const server_footprint& want) {
      const auto until = std::chrono::steady_clock::now() + 20s;
      server_footprint now = footprint_of(pid);
      while (!at_rest(now, own_descriptors(want)) && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(20ms);
        now = footprint_of(pid);
      }
      return now;
    };
    // The baseline: once the warm-up's sessions are joined, kept or reaped, and two reads 100 ms
    // apart agree. One footprint reads /proc/<pid>/fd before the children, so a session process
    // that ends in between shows up as its pidfd counted with no child left.
    const auto quiet = [&] {
      const auto until = std::chrono::steady_clock::now() + 20s;
      server_footprint before = footprint_of(pid);
      for (;;) {
        std::this_thread::sleep_for(100ms);
        const server_footprint now = footprint_of(pid);
        if (at_rest(now, own_descriptors(before)) || std::chrono::steady_clock::now() >= until) return now;
        before = now;
      }
    };
    const server_footprint idle = quiet();
    CHECK(idle.threads <= most_threads);
    CHECK(idle.children <= most_children);

    int failures = 0;
    for (int i = 0; i < p.sequential; ++i) failures += one() ? 0 : 1;
    CHECK(failures == 0);

    const server_footprint after_sequence = settled(idle);
    CHECK(own_descriptors(after_sequence) == own_descriptors(idle));
    CHECK(after_sequence.threads <= most_threads);
    CHECK(after_sequence.children <= most_children);

    // Hundreds at once, twice: the second round must reuse what the first left to the allocator.
    std::vector<server_footprint> busy, after;
    for (int round = 0; round < 2; ++round) {
      INFO("round " << round);
      std::vector<net::context_ref> open;
      for (int i = 0; i < p.at_once; ++i) {
        auto c = node.connect(server.where);
        INFO("connection " << i << ": " << (c ? std::string("ok") : c.err().describe()));
        REQUIRE(c);
        open.push_back(*c);
      }
      std::atomic<int> answered{0}, wrong{0};
      for (const net::context_ref& c : open)
        c.call(courier::token("PID_"), {}, 30s)
            .then([&](const courier::wire::items_ref&) { answered.fetch_add(1); },
                  [&](const courier::error&) { wrong.fetch_add(1); });
      const auto until = std::chrono::steady_clock::now() + 60s;
      while (answered.load() + wrong.load() < p.at_once && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(10ms);
      CHECK(answered.load() == p.at_once);
      busy.push_back(footprint_of(pid));
      if (thread_mode)
        CHECK(busy.back().threads == acceptor_threads + p.at_once);
      else
        CHECK(busy.back().children == p.at_once);  // the kept ones among them
      for (const net::context_ref& c : open) (void)c.close();
      open.clear();
      after.push_back(settled(idle));
      CHECK(own_descriptors(after.back()) == own_descriptors(idle));
      // As many kept as may wait, the rest joined or reaped.
      CHECK(after.back().threads == most_threads);
      CHECK(after.back().children == most_children);
    }
    INFO("idle " << idle.resident << " KiB, after " << p.sequential << " in sequence " << after_sequence.resident
                 << " KiB, " << p.at_once << " at once " << busy[0].resident << " KiB, after " << after[0].resident
                 << " KiB, again " << busy[1].resident << " KiB, after " << after[1].resident << " KiB");
    // Memory: serving in sequence keeps nothing per session; after hundreds at once the allocator
    // may keep their threads' heaps (mimalloc abandons a thread's pages for others to reclaim),
    // at most 256 KiB a session, and a second round reuses them.
#if !defined(COURIER_TEST_TSAN) && !defined(__SANITIZE_ADDRESS__)
    // (Not under the sanitizers: ASan's quarantine and TSan's shadow keep freed memory on purpose.)
    CHECK(after_sequence.resident - idle.resident < 16 * 1024);
    CHECK(after[0].resident - idle.resident < 256L * p.at_once + 16 * 1024);
    CHECK(after[1].resident - after[0].resident < 16 * 1024);
#endif
    WARN(p.mode << ": resident memory idle " << idle.resident << " KiB, after " << p.sequential << " in sequence "
                << after_sequence.resident << " KiB, " << p.at_once << " at once " << busy[0].resident << " KiB, after "
                << after[0].resident << " KiB, a second round " << busy[1].resident << " KiB, after "
                << after[1].resident << " KiB");
    CHECK(one());  // still serving
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(10s) == 0);
    node.stop();
  }
}
