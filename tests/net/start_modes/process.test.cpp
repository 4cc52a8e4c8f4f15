// --fork and --spawn (net/server.hpp, src/net/start_modes/process_runner.cpp), across processes:
// each session in a process of its own (one that aborts ends only itself), told its peer, reaped,
// and stopped on SIGTERM; kept processes for the next sessions, and a connection handed to one
// that dies before it takes it; a session that ends a little after its grace waited for.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "courier/net/node.hpp"
#include "courier/system.hpp"
#include "net/net_test_util.hpp"
#include "net/peers.hpp"
#include "start_modes_test_util.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using namespace courier_test::start_modes;
namespace net = courier::net;

namespace {

bool process_gone(std::int64_t pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

struct sleep_call {  // SLEP: blocks the session's thread for `ms`
  static constexpr courier::token token{"SLEP"};
  std::int32_t ms = 0;
  auto fields() { return std::tie(ms); }
  auto fields() const { return std::tie(ms); }
};

}  // namespace

TEST_CASE("--fork and --spawn run each session in a process of its own, and one that aborts ends only itself",
          "[modes]") {
  courier_test::watchdog wd{"session modes: processes", 60s};
  for (const std::string mode : {"fork", "spawn"}) {
    for (auto transport : {net::transport_kind::uds, net::transport_kind::tcp}) {
      INFO(mode << " over " << net::to_string(transport));
      auto server = start_server(mode, transport);
      courier::system sys;
      net::node node(sys);
      auto a = node.connect(server.where);
      auto b = node.connect(server.where);
      REQUIRE(a);
      REQUIRE(b);
      const auto pid_a = pid_of(*a), pid_b = pid_of(*b);
      CHECK(pid_a != pid_b);
      CHECK(pid_a != server.process.pid());
      CHECK(pid_b != server.process.pid());

      // The session is told its peer: the transport and, on uds, this process's credentials.
      check_peer_is_this_process(*a, transport);
      check_served_the_accepted_connection(*a, server);

      // A session that aborts ends its own process and connection only.
      auto crashed = a->call_wait(courier::token("ABRT"), {}, 5s);
      REQUIRE_FALSE(crashed);
      CHECK(crashed.err() == courier::errc::connection_lost);
      CHECK(pid_of(*b) == pid_b);
      auto c = node.connect(server.where);
      REQUIRE(c);
      CHECK(pid_of(*c) != pid_b);

      // SIGTERM: the acceptor stops, passes it on, reaps; the sessions' processes are gone.
      server.process.kill(SIGTERM);
      CHECK(server.process.wait(10s) == 0);
      CHECK_FALSE(b->call_wait(courier::token("PID_"), {}, 5s));
      CHECK(process_gone(pid_a));
      CHECK(process_gone(pid_b));
      if (transport == net::transport_kind::uds) {
        struct stat st {};
        CHECK(::stat(server.where.file.c_str(), &st) != 0);
      }
      node.stop();
    }
  }
}

TEST_CASE("--fork keeps --kept-processes processes whose session ended for the next sessions; 0 keeps none",
          "[modes]") {
  courier_test::watchdog wd{"session modes: kept processes", 60s};
  courier::system sys;
  net::node node(sys);
  const auto session_pid = [&](const started_server& server) { return one_session(node, server, pid_of); };
  {
    auto server = start_server("fork", net::transport_kind::uds, {"--kept-processes", "1"});
    // A session may find the one place taken (by the readiness probe's process, or by one whose
    // end the acceptor has not read yet) and get a new process; sessions that follow one another
    // unhurried then run in the one kept process.
    std::int64_t kept = 0;
    int again = 0;
    for (int i = 0; i < 60 && again < 3; ++i) {
      const auto pid = session_pid(server);
      CHECK(pid != server.process.pid());
      again = pid == kept ? again + 1 : 0;
      kept = pid;
      std::this_thread::sleep_for(50ms);
    }
    CHECK(again == 3);

    // A kept process that aborts ends its session only; the next session gets a process of its own.
    auto doomed = node.connect(server.where);
    REQUIRE(doomed);
    const auto doomed_pid = pid_of(*doomed);
    auto crashed = doomed->call_wait(courier::token("ABRT"), {}, 5s);
    REQUIRE_FALSE(crashed);
    INFO("the call failed with: " << crashed.err().describe());
    CHECK(crashed.err() == courier::errc::connection_lost);
    CHECK(courier_test::eventually([&] { return process_gone(doomed_pid); }));
    const auto after_crash = session_pid(server);
    CHECK(after_crash != doomed_pid);

    // SIGTERM ends the process that waits for a session too.
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(10s) == 0);
    CHECK(courier_test::eventually([&] { return process_gone(after_crash); }));
  }
  {
    auto server = start_server("fork", net::transport_kind::uds, {"--kept-processes", "0"});
    const auto first = session_pid(server);
    CHECK(courier_test::eventually([&] { return process_gone(first); }));  // ended with its session
    CHECK(session_pid(server) != first);
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(10s) == 0);
  }
  node.stop();
}

TEST_CASE("--fork: a connection handed to a kept process that dies before it takes it is served, or refused with 260",
          "[modes]") {
  courier_test::watchdog wd{"session modes: kept process dies", 120s};
  for (const int signal : {SIGTERM, SIGKILL}) {
    INFO("the kept processes get " << (signal == SIGTERM ? "SIGTERM" : "SIGKILL"));
    auto server = start_server("fork", net::transport_kind::uds, {"--kept-processes", "4"});
    std::vector<std::int64_t> kept;
    {
      // Four sessions at once, then closed: their processes wait for the next (the acceptor reads
      // their word after the close; the sessions that follow find them waiting).
      courier::system sys;
      net::node node(sys);
      std::vector<net::context_ref> sessions;
      for (int i = 0; i < 4; ++i) sessions.push_back(first_served_session(node, server.where));
      for (auto& s : sessions) kept.push_back(pid_of(s));
      for (auto& s : sessions) REQUIRE(s.close_wait(5s));
      node.stop();
    }
    std::this_thread::sleep_for(courier_test::scaled(200ms));
    // As the OOM killer or an operator would: every kept process at once, and 24 connections.
    for (const auto pid : kept) ::kill(static_cast<pid_t>(pid), signal);
    std::vector<std::unique_ptr<courier_test::peers::raw_peer>> peers;
    const first_frames seen = open_silent(server.where, 24, peers, "");
    INFO("served " << seen.served << ", refused " << seen.refused << ", other " << seen.other << ": " << seen.texts);
    CHECK(seen.other == 0);  // never a bare end of stream
    CHECK(seen.served >= 1);
    REQUIRE_FALSE(server.process.try_wait());
    peers.clear();
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(courier_test::scaled(10s)) == 0);
  }
}

TEST_CASE("a session that ends a little after its grace is waited for, not killed or called stuck",
          "[modes][signals]") {
  courier_test::watchdog wd{"session modes: the whole grace", 90s};
  for (const std::string mode : {"fork", "spawn"}) {
    INFO(mode);
    const std::string log_file = courier_test::temp_socket_path("grace") + ".txt";
    auto server = start_logged_server(log_file, {"--" + mode, "--debug", "1"});
    // A handler holds its session's only thread for 300 ms when SIGTERM comes, and the client
    // never answers the close: the session sees the stop once the handler returns, then spends
    // its whole 2 s grace on the close, and its process ends within the acceptor's margin.
    courier_test::peers::raw_peer busy(server.where);
    REQUIRE(busy.handshake());
    REQUIRE(busy.write(courier_test::peers::raw_peer::call_bytes(sleep_call{300}, 1)));
    std::this_thread::sleep_for(100ms);  // the call has started
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(courier_test::scaled(20s)) == 0);
    CHECK(busy.wait_eof(10s));
    const std::string log = read_file(log_file);
    INFO(log);
    CHECK(log.find("did not end") == std::string::npos);
    CHECK(log.find("abandoned") == std::string::npos);
    CHECK(log.find("killed") == std::string::npos);
    ::unlink(log_file.c_str());
  }
}
