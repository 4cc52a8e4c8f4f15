// The connection core as the engine is tested: conversations on a socket pair, with the test as
// the peer writing frames from their text form and reading what the connection wrote back as text.
// The system is deterministic: no thread of its own, none in the node (the test's run calls poll
// the socket), so every conversation replays the same on every run and under the sanitizers.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "courier/fields.hpp"
#include "courier/net/node.hpp"
#include "courier/net/services.hpp"
#include "courier/system.hpp"
#include "courier/wire/print.hpp"
#include "watchdog.hpp"
#include "wire/frame_text.hpp"

using namespace std::chrono_literals;
using courier::errc;
namespace net = courier::net;
namespace wire = courier::wire;

namespace {

/// Runs the system until nothing is left to run; each run call first reads the sockets that are ready.
void settle(courier::system& sys) {
  while (sys.run_until_idle() != 0) {
  }
}

struct ignore_frames {
  void on_frame(const wire::frame_view&) {}
};

/// The test's end of the socket pair: it speaks the handshake through an engine of its own, then
/// writes and reads frames by hand.
class peer {
 public:
  peer(net::socket s, wire::role side) : sock_(std::move(s)), engine_(side, config()) {}

  /// The handshake, both ways; the system runs the connection's side of it.
  void open(courier::system& sys) {
    wire::out_buffer out;
    engine_.start(out);
    write_bytes(out.view());
    settle(sys);
    wire::out_buffer answer;
    const auto got = read_bytes();
    engine_.feed(got, answer, ignore_frames{});
    REQUIRE(engine_.state() == wire::engine_state::open);
    write_bytes(answer.view());  // an acceptor's engine answers the initiator's handshake
    settle(sys);
  }

  /// Frames in the text form of tests/vectors/README.md.
  void write(const std::string& text) {
    wire::out_buffer out;
    wire::test::encode_text(out, text);
    write_bytes(out.view());
  }
  void write_bytes(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(sock_.fd(), bytes.data(), bytes.size());
      REQUIRE(n > 0);
      bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
  }

  /// Everything the connection has written so far, as text (empty when nothing).
  std::string read() { return wire::to_text(read_bytes()); }
  std::vector<std::byte> read_bytes() {
    std::vector<std::byte> all;
    std::array<std::byte, 4096> buffer{};
    for (;;) {
      const ssize_t n = ::read(sock_.fd(), buffer.data(), buffer.size());
      if (n <= 0) break;
      all.insert(all.end(), buffer.begin(), buffer.begin() + n);
    }
    return all;
  }
  /// Whether the connection has closed its end and everything it wrote was read (a look, not a read).
  bool ended() {
    std::byte b{};
    return ::recv(sock_.fd(), &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  void close() { sock_ = net::socket(); }

 private:
  static wire::engine_config config() {
    wire::engine_config cfg;
    cfg.local.peer_name = "transcript peer";
    cfg.local.nonce = 7;
    cfg.ping_interval = 0ms;
    return cfg;
  }
  net::socket sock_;
  wire::engine engine_;
};

std::shared_ptr<net::service_table> greeter(std::vector<net::deferred_reply>* held = nullptr) {
  auto t = std::make_shared<net::service_table>();
  t->add(courier::token("HELO"),
         [](net::incoming& call) {
           auto name = call.read<std::string_view>();
           if (name) call.reply().add("hello " + std::string(*name));
         },
         {"(string name)", "string", "says hello"});
  t->add(courier::token("HOLD"), [held](net::incoming& call) { held->push_back(call.defer()); });
  return t;
}

struct add {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0, b = 0;
  COURIER_FIELDS(a, b);
};
using calc_api = courier::interface<std::int32_t(add)>;

/// A deterministic system whose node serves `services` on one end of a socket pair; the test is the
/// client on the other. The client goes first at the end: the connection then sees the stream end.
struct served {
  courier::system sys{courier::config::deterministic()};
  net::node node{sys};
  peer client;

  explicit served(std::shared_ptr<const net::service_table> services, const net::connection_config& cfg = {})
      : served(*net::socket_pair(), std::move(services), cfg) {}

 private:
  served(std::pair<net::socket, net::socket> ends, std::shared_ptr<const net::service_table> services,
         const net::connection_config& cfg)
      : client(std::move(ends.second), wire::role::initiator) {
    REQUIRE(node.serve_connection(std::move(services), std::move(ends.first), cfg));
  }
};

}  // namespace

TEST_CASE("served: calls answered in order, an unknown token refused, a send answered by nothing",
          "[net][connection_core]") {
  courier_test::watchdog wd("connection core: served calls", 30s);
  served s(greeter());
  CHECK(s.node.polled_by_system());
  s.client.open(s.sys);
  CHECK(s.client.read().empty());

  s.client.write(R"(call token="HELO" txn=1 ctx=0
  string "ann"
call token="XXXX" txn=2 ctx=0
send token="HELO" txn=0 ctx=0
  string "nobody reads this"
call token="HELO" txn=3 ctx=0
  string "bob"
)");
  CHECK(s.client.read().empty());  // nothing runs until the system does
  settle(s.sys);
  const std::string answered = s.client.read();
  CHECK(answered == R"(reply token="HELO" txn=1 ctx=0
  string "hello ann"
error token="XXXX" txn=2 ctx=0
  uint32 256
  string "no service XXXX"
reply token="HELO" txn=3 ctx=0
  string "hello bob"
)");
  s.client.close();
  settle(s.sys);
}

TEST_CASE("served: reading pauses while max_in_flight calls wait for their answers", "[net][connection_core]") {
  courier_test::watchdog wd("connection core: back-pressure", 30s);
  std::vector<net::deferred_reply> held;
  net::connection_config cfg;
  cfg.max_in_flight = 2;
  served s(greeter(&held), cfg);
  s.client.open(s.sys);

  s.client.write(R"(call token="HOLD" txn=1 ctx=0
call token="HOLD" txn=2 ctx=0
call token="HOLD" txn=3 ctx=0
call token="HOLD" txn=4 ctx=0
call token="HOLD" txn=5 ctx=0
)");
  settle(s.sys);
  CHECK(held.size() == 2);  // the other three wait, unread or undispatched
  CHECK(s.client.read().empty());

  held[0].deliver([](wire::frame_writer& w) { w.add(std::int32_t{1}); });
  settle(s.sys);
  CHECK(held.size() == 3);  // one answered: one more taken
  held[1].deliver([](wire::frame_writer& w) { w.add(std::int32_t{2}); });
  held[2].deliver([](wire::frame_writer& w) { w.add(std::int32_t{3}); });
  settle(s.sys);
  CHECK(held.size() == 5);
  held[3].deliver([](wire::frame_writer& w) { w.add(std::int32_t{4}); });
  held[4].deliver([](wire::frame_writer& w) { w.add(std::int32_t{5}); });
  settle(s.sys);
  std::string want;
  for (int i = 1; i <= 5; ++i)
    want += "reply token=\"HOLD\" txn=" + std::to_string(i) + " ctx=0\n  int32 " + std::to_string(i) + "\n";
  CHECK(s.client.read() == want);
  s.client.close();
  settle(s.sys);
}

TEST_CASE("served: a frame with a bad magic is refused with ERROR and the connection closed",
          "[net][connection_core]") {
  courier_test::watchdog wd("connection core: bad magic", 30s);
  served s(greeter());
  s.client.open(s.sys);
  std::vector<std::byte> bad(32, std::byte{0});
  bad[0] = std::byte{'X'};
  s.client.write_bytes(bad);
  settle(s.sys);
  const std::string text = s.client.read();
  CHECK(text.rfind("error ", 0) == 0);
  CHECK(text.find("uint32 3\n") != std::string::npos);  // bad_magic
  CHECK(s.client.ended());
}

TEST_CASE("connecting: a request goes out when the system runs, and its reply settles it", "[net][connection_core]") {
  courier_test::watchdog wd("connection core: calls out", 30s);
  courier::system sys{courier::config::deterministic()};
  net::node node{sys};
  auto [ours, theirs] = *net::socket_pair();
  auto calc = node.adopt<calc_api>(std::move(ours));
  REQUIRE(calc);
  peer server(std::move(theirs), wire::role::acceptor);
  server.open(sys);

  std::optional<std::int32_t> sum;
  std::optional<courier::error> failed;
  calc->request(add{2, 3}).then([&](std::int32_t v) { sum = v; }, [&](const courier::error& e) { failed = e; });
  calc->request(add{4, 5}).then([&](std::int32_t v) { sum = v; }, [&](const courier::error& e) { failed = e; });
  settle(sys);
  CHECK(server.read() == R"(call token="ADD_" txn=1 ctx=0
  int32 2
  int32 3
call token="ADD_" txn=2 ctx=0
  int32 4
  int32 5
)");
  server.write(R"(reply token="ADD_" txn=1 ctx=0
  int32 5
)");
  settle(sys);
  CHECK(sum == 5);
  CHECK_FALSE(failed);
  server.write(R"(reply token="ADD_" txn=2 ctx=0
  string "not a number"
)");
  settle(sys);
  REQUIRE(failed);
  CHECK(failed->code == errc::protocol_error);
  CHECK(sum == 5);

  // The peer goes: a call in flight fails as lost, none is left waiting.
  failed.reset();
  calc->request(add{6, 7}).then([&](std::int32_t v) { sum = v; }, [&](const courier::error& e) { failed = e; });
  settle(sys);
  server.close();
  settle(sys);
  REQUIRE(failed);
  CHECK(failed->code == errc::connection_lost);
}

// The connection's clock is its system's: on a deterministic system, the test moves time and the
// protocol's time-outs come due with it, to the nanosecond, whatever the machine's speed.
TEST_CASE("served: a silent peer is pinged after ping_interval, and ended as dead after the intervals",
          "[net][connection_core]") {
  courier_test::watchdog wd("connection core: keepalive", 30s);
  net::connection_config cfg;
  cfg.ping_interval = 1000ms;
  cfg.dead_after_intervals = 3;
  served s(greeter(), cfg);
  s.client.open(s.sys);

  s.sys.advance_time(999ms);
  settle(s.sys);
  CHECK(s.client.read().empty());  // not silent for long enough yet
  s.sys.advance_time(1ms);
  settle(s.sys);
  const std::string ping = s.client.read();
  CHECK(ping.rfind("ping ", 0) == 0);
  CHECK_FALSE(s.client.ended());

  // Time moves in steps no longer than the connection's next deadline: a jump past it is a stall
  // of ours, and a ping sent late gives the peer its whole interval from when it went out.
  s.sys.advance_time(1000ms);
  settle(s.sys);
  CHECK(s.client.read().rfind("ping ", 0) == 0);  // the second, unanswered too
  s.sys.advance_time(999ms);                      // 2,999 ms of silence
  settle(s.sys);
  CHECK_FALSE(s.client.ended());
  CHECK(s.node.connections() == 1);
  s.sys.advance_time(1ms);  // three intervals: dead
  settle(s.sys);
  CHECK(s.client.read().empty());  // ended without a word: the peer is not listening
  CHECK(s.client.ended());
  CHECK(s.node.connections() == 0);
}

TEST_CASE("served: a peer that answers each ping stays, however long it is otherwise silent",
          "[net][connection_core]") {
  courier_test::watchdog wd("connection core: keepalive answered", 30s);
  net::connection_config cfg;
  cfg.ping_interval = 1000ms;
  cfg.dead_after_intervals = 3;
  served s(greeter(), cfg);
  s.client.open(s.sys);
  for (int i = 1; i <= 10; ++i) {
    s.sys.advance_time(1000ms);
    settle(s.sys);
    const std::string ping = s.client.read();
    INFO("ping " << i << ": " << ping);
    REQUIRE(ping == "ping token=\"\\x00\\x00\\x00\\x00\" txn=" + std::to_string(i) + " ctx=0\n");
    s.client.write("pong token=\"\\x00\\x00\\x00\\x00\" txn=" + std::to_string(i) + " ctx=0\n");
    settle(s.sys);
  }
  CHECK_FALSE(s.client.ended());
  CHECK(s.node.connections() == 1);
  s.client.close();
  settle(s.sys);
}

TEST_CASE("served: a peer that never sends its handshake is ended at handshake_timeout", "[net][connection_core]") {
  courier_test::watchdog wd("connection core: handshake time-out", 30s);
  net::connection_config cfg;
  cfg.handshake_timeout = 500ms;
  served s(greeter(), cfg);
  settle(s.sys);
  CHECK(s.client.read().rfind("handshake ", 0) == 0);  // ours goes first, at once
  s.sys.advance_time(499ms);
  settle(s.sys);
  CHECK(s.client.read().empty());
  CHECK_FALSE(s.client.ended());
  s.sys.advance_time(1ms);
  settle(s.sys);
  const std::string refused = s.client.read();
  CHECK(refused.rfind("error ", 0) == 0);
  CHECK(refused.find("uint32 22\n") != std::string::npos);  // bad_handshake
  CHECK(s.client.ended());
}

TEST_CASE("served: a session idle for idle_timeout is closed in order, and a call restarts the count",
          "[net][connection_core]") {
  courier_test::watchdog wd("connection core: idle time-out", 30s);
  net::connection_config cfg;
  cfg.idle_timeout = 2000ms;
  cfg.ping_interval = 0ms;
  served s(greeter(), cfg);
  s.client.open(s.sys);

  s.sys.advance_time(1500ms);
  settle(s.sys);
  s.client.write(R"(call token="HELO" txn=1 ctx=0
  string "ann"
)");
  settle(s.sys);
  CHECK(s.client.read() == R"(reply token="HELO" txn=1 ctx=0
  string "hello ann"
)");
  s.sys.advance_time(1999ms);  // 3,499 ms since the start, 1,999 since the call
  settle(s.sys);
  CHECK(s.client.read().empty());
  s.sys.advance_time(1ms);
  settle(s.sys);
  const std::string closing = s.client.read();
  CHECK(closing.rfind("close ", 0) == 0);
  CHECK(closing.find("idle for 2000 ms") != std::string::npos);
}
