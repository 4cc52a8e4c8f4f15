// --thread (net/server.hpp, src/net/start_modes/thread_runner.cpp), across processes: each session
// on a thread of its own (a handler that blocks stalls only its session), kept threads for the
// next sessions, and one --max-memory budget for the process's sessions.
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
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

/// Whether thread `tid` of process `pid` is in a futex wait (a kept thread waiting for a
/// session sleeps on a condition variable; a session's thread sleeps in poll). Where the kernel
/// does not show a thread's system call (ptrace restrictions, gVisor), after a pause long
/// enough for an ended session's thread to wait.
bool thread_gone(pid_t pid, std::int64_t tid) {
  struct stat st {};
  return ::stat(("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid)).c_str(), &st) != 0;
}

/// How often `what` occurs in `text`.
int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

/// The thread id in the log's first "session thread N waits" line; 0 when there is none yet.
std::int64_t first_waiting_thread(const std::string& log) {
  const std::string mark = "session thread ";
  for (auto at = log.find(mark); at != std::string::npos; at = log.find(mark, at + 1)) {
    const auto rest = at + mark.size();
    const auto space = log.find(' ', rest);
    if (space == std::string::npos || log.compare(space, 7, " waits ") != 0) continue;
    return std::stoll(log.substr(rest, space - rest));
  }
  return 0;
}

struct padded_call {  // a call whose third field only pads it (never run: the frame stays unfinished)
  static constexpr courier::token token{"PAD_"};
  std::int32_t a = 1, b = 2;
  std::string pad;
  auto fields() { return std::tie(a, b, pad); }
  auto fields() const { return std::tie(a, b, pad); }
};

}  // namespace

TEST_CASE("--thread runs each session on a thread of its own: a handler that blocks stalls only its session",
          "[modes]") {
  courier_test::watchdog wd{"session modes: thread", 60s};
  for (auto transport : {net::transport_kind::uds, net::transport_kind::tcp}) {
    INFO("thread over " << net::to_string(transport));
    auto server = start_server("thread", transport);
    courier::system sys;
    net::node node(sys);
    auto a = node.connect(server.where);
    auto b = node.connect(server.where);
    REQUIRE(a);
    REQUIRE(b);
    CHECK(pid_of(*a) == server.process.pid());  // one process,
    CHECK(pid_of(*b) == server.process.pid());
    const auto tid_a = tid_of(*a), tid_b = tid_of(*b);
    CHECK(tid_a != tid_b);                 // a thread each,
    CHECK(tid_a != server.process.pid());  // neither the acceptor's
    check_peer_is_this_process(*a, transport);
    check_served_the_accepted_connection(*a, server);

    // a's handler blocks its thread for 0.8 s; b's session, and a new one, answer meanwhile.
    std::atomic<bool> blocked_answered{false};
    bool slept = false;  // checked after the join: Catch's macros are for this thread only
    std::thread blocked([&] {
      slept = static_cast<bool>(a->call_wait(courier::token("SLEP"), net::args(std::int32_t{800}), 10s));
      blocked_answered = true;
    });
    std::this_thread::sleep_for(100ms);  // a's call on its way (b's answer comes first either way)
    CHECK(tid_of(*b) == tid_b);
    auto c = node.connect(server.where);
    REQUIRE(c);
    CHECK(tid_of(*c) != tid_a);
    CHECK_FALSE(blocked_answered.load());
    blocked.join();
    CHECK(slept);
    CHECK(tid_of(*a) == tid_a);

    // SIGTERM: each session's thread closes its connection and is joined; the file is removed.
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(10s) == 0);
    CHECK_FALSE(b->call_wait(courier::token("PID_"), {}, 5s));
    if (transport == net::transport_kind::uds) {
      struct stat st {};
      CHECK(::stat(server.where.file.c_str(), &st) != 0);
    }
    node.stop();
  }
}

TEST_CASE("--thread keeps --kept-threads threads whose session ended for the next sessions; 0 keeps none", "[modes]") {
  courier_test::watchdog wd{"session modes: kept threads", 60s};
  courier::system sys;
  net::node node(sys);
  const auto session_tid = [&](const started_server& server) { return one_session(node, server, tid_of); };
  {
    // The server says when a thread whose session ended waits (at --debug 2): from then on the next
    // connection is that thread's. The test waits for what the server reports, never for a thread's
    // state in the kernel, which a loaded machine makes a guess.
    const std::string log_file = courier_test::temp_socket_path("kept") + ".txt";
    auto server = start_logged_server(log_file, {"--thread", "--kept-threads", "1", "--debug", "2"});
    const auto waits_of = [&](std::int64_t tid) {
      return count_of(read_file(log_file), "session thread " + std::to_string(tid) + " waits for the next connection");
    };
    // The readiness probe's session may have kept its thread first: the first thread said to wait
    // is the kept one.
    std::int64_t first = 0;
    REQUIRE(courier_test::eventually([&] { return (first = first_waiting_thread(read_file(log_file))) != 0; }, 20s));
    for (int i = 0; i < 3; ++i) {
      INFO("session " << i);
      REQUIRE(courier_test::eventually([&] { return waits_of(first) >= i + 1; }, 20s));
      CHECK(session_tid(server) == first);
    }
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(courier_test::scaled(10s)) == 0);
    ::unlink(log_file.c_str());
  }
  {
    auto server = start_server("thread", net::transport_kind::uds, {"--kept-threads", "0"});
    const pid_t pid = server.process.pid();
    const auto first = session_tid(server);
    CHECK(courier_test::eventually([&] { return thread_gone(pid, first); }));  // ended with its session
    CHECK(session_tid(server) != first);
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(courier_test::scaled(10s)) == 0);
  }
  node.stop();
}

TEST_CASE("--max-memory is one budget for the process: the sessions of --thread share it, as --pool's do",
          "[modes][memory]") {
  courier_test::watchdog wd{"session modes: one memory budget", 90s};
  for (const std::string mode : {"pool", "thread"}) {
    INFO(mode);
    auto server = start_server(mode, net::transport_kind::uds, {"--max-memory", "1048576"});
    // Four sessions each hold 400 KB of a frame still arriving: 1.6 MB against a 1 MiB budget, so
    // at least one is refused with 260 and why (with a budget per session none would be).
    padded_call call;
    call.pad.assign(400'000, 'x');
    const std::string frame = courier_test::peers::raw_peer::call_bytes(call, 7);
    const std::string held = frame.substr(0, frame.size() - 100);
    std::vector<std::unique_ptr<courier_test::peers::raw_peer>> peers;
    for (int i = 0; i < 4; ++i) {
      peers.push_back(std::make_unique<courier_test::peers::raw_peer>(server.where));
      REQUIRE(peers.back()->handshake());
      (void)peers.back()->write(held);  // a refused one may be closed before all of it is written
    }
    int refused = 0, other = 0;
    std::string texts;
    const auto until = std::chrono::steady_clock::now() + courier_test::scaled(10s);
    while (refused == 0 && std::chrono::steady_clock::now() < until) {
      for (auto& p : peers) {
        auto f = p->next(20ms);
        if (!f) continue;
        if (f->kind == courier::wire::kind::error && f->code == 260 && f->text.find("memory") != std::string::npos)
          ++refused;
        else if (f->kind != courier::wire::kind::ping)
          ++other;
        texts += f->text + "; ";
      }
    }
    INFO("refused " << refused << ", other " << other << ": " << texts);
    CHECK(refused >= 1);
    CHECK(other == 0);
    peers.clear();
    serves_again(server);
    server.process.kill(SIGTERM);
    CHECK(server.process.wait(courier_test::scaled(10s)) == 0);
  }
}
