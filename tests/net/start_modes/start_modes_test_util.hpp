#pragma once
// The start modes' tests run the test server (session_modes_server.cpp) in a mode and talk to it:
// what they share to start it, open sessions on it and read what it answered or logged.
#include <fcntl.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "courier/net/node.hpp"
#include "courier/net/process.hpp"
#include "courier/system.hpp"
#include "net/net_test_util.hpp"
#include "net/peers.hpp"
#include "watchdog.hpp"

namespace courier_test::start_modes {

using namespace std::chrono_literals;
namespace net = courier::net;

struct started_server {
  net::child_process process;
  net::endpoint where;
};

/// Starts `command` with stdin and stdout on /dev/null and waits until it accepts at `where`.
inline started_server launch(const std::vector<std::string>& command, net::endpoint where) {
  started_server s;
  s.where = std::move(where);
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  auto child = net::spawn_with_stdio(command, null);
  ::close(null);
  REQUIRE(child);
  s.process = std::move(*child);
  const auto until = std::chrono::steady_clock::now() + courier_test::scaled(10s);
  while (!net::connect(s.where, 200ms)) {
    REQUIRE_FALSE(s.process.try_wait());
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(5ms);
  }
  return s;
}

/// The first session a server with --max-connections 1 serves, once the readiness probe's own
/// session has ended.
inline net::context_ref first_served_session(net::node& node, const net::endpoint& where) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    auto a = node.connect(where);
    if (a && a->call_wait(courier::token("PID_"), {}, 5s)) return *a;
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(10ms);
  }
}

/// The test server in `mode` on `transport`, once it accepts connections.
inline started_server start_server(const std::string& mode, net::transport_kind transport,
                                   std::vector<std::string> extra = {}) {
  net::endpoint where;
  where.kind = transport;
  std::vector<std::string> command{COURIER_TEST_SESSION_MODES_SERVER, "--silent", "--" + mode};
  if (transport == net::transport_kind::uds) {
    where.file = courier_test::temp_socket_path("modes");
    command.insert(command.end(), {"--uds", "--file", where.file});
  } else {
    where.port = courier_test::free_tcp_port();
    command.insert(command.end(), {"--tcp", "--port", std::to_string(where.port)});
  }
  command.insert(command.end(), extra.begin(), extra.end());
  return launch(command, std::move(where));
}

/// The one int64 a session answers `token` with (its process's or its thread's id).
inline std::int64_t int64_from(const net::context_ref& session, courier::token token) {
  auto reply = session.call_wait(token, {}, 5s);
  REQUIRE(reply);
  auto items = reply->items();
  auto value = items.read<std::int64_t>();
  REQUIRE(value);
  return *value;
}

inline std::int64_t pid_of(const net::context_ref& session) { return int64_from(session, courier::token("PID_")); }
inline std::int64_t tid_of(const net::context_ref& session) { return int64_from(session, courier::token("TID_")); }

/// The session was told its peer: the transport and, on uds, this process's credentials (on
/// tcp, the loopback address).
inline void check_peer_is_this_process(const net::context_ref& session, net::transport_kind transport) {
  auto peer = session.call_wait(courier::token("PEER"), {}, 5s);
  REQUIRE(peer);
  auto items = peer->items();
  CHECK(*items.read<std::string_view>() == net::to_string(transport));
  const std::string address(*items.read<std::string_view>());
  if (transport == net::transport_kind::uds)
    CHECK(address.find("pid " + std::to_string(::getpid())) == 0);
  else
    CHECK(address.rfind("127.0.0.1:", 0) == 0);
}

/// A --thread, --fork or --spawn session's serve callback was given the connection the acceptor
/// accepted, named as the listener's transport ("uds /tmp/x, the connection on stdin"), not an
/// endpoint that says pipe.
inline void check_served_the_accepted_connection(const net::context_ref& session, const started_server& server) {
  auto where = session.call_wait(courier::token("WHER"), {}, 5s);
  REQUIRE(where);
  auto items = where->items();
  const std::string served(*items.read<std::string_view>());
  INFO(served);
  CHECK(served.rfind(net::to_string(server.where) + ", the connection on ", 0) == 0);
}

/// Opens a session at `server`, asks it `ask` (pid_of, tid_of), and closes it.
inline std::int64_t one_session(net::node& node, const started_server& server,
                                std::int64_t (*ask)(const net::context_ref&)) {
  auto c = node.connect(server.where);
  REQUIRE(c);
  const auto answer = ask(*c);
  REQUIRE(c->close_wait(5s));
  return answer;
}

/// What the first frame of each of `count` connections that send nothing was: the server's
/// handshake (served), ERROR 260 whose text names `reason` (refused), or nothing (a bare close, or
/// another answer: what a server must never give a connection it cannot serve).
struct first_frames {
  int served = 0, refused = 0, other = 0;
  std::string texts;
};

inline first_frames open_silent(const net::endpoint& where, int count,
                                std::vector<std::unique_ptr<courier_test::peers::raw_peer>>& peers,
                                std::string_view reason) {
  first_frames seen;
  for (int i = 0; i < count; ++i) peers.push_back(std::make_unique<courier_test::peers::raw_peer>(where));
  for (auto& p : peers) {
    auto f = p->next(10s);
    if (f && f->kind == courier::wire::kind::handshake) {
      ++seen.served;
    } else if (f && f->kind == courier::wire::kind::error && f->code == 260 &&
               f->text.find(reason) != std::string::npos) {
      ++seen.refused;
      seen.texts = f->text;
    } else {
      ++seen.other;
      if (f) seen.texts = f->text;
    }
  }
  return seen;
}

/// Once the connections that held the sessions are gone, the server serves again.
inline void serves_again(const started_server& server) {
  courier::system sys;
  net::node node(sys);
  const auto until = std::chrono::steady_clock::now() + courier_test::scaled(15s);
  for (;;) {
    auto c = node.connect(server.where);
    if (c && c->call_wait(courier::token("PID_"), {}, 5s)) break;
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(20ms);
  }
  node.stop();
}

/// The test server, its stderr (the log) written to a file, started with `options`.
inline started_server start_logged_server(const std::string& log_file, std::vector<std::string> options) {
  net::endpoint where;
  where.kind = net::transport_kind::uds;
  where.file = courier_test::temp_socket_path("log");
  std::string line = std::string("exec ") + COURIER_TEST_SESSION_MODES_SERVER + " --uds --file " + where.file;
  for (const auto& o : options) line.append(" ").append(o);
  line.append(" 2>").append(log_file);
  return launch({"/bin/sh", "-c", line}, std::move(where));
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace courier_test::start_modes
