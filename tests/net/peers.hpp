#pragma once
// The peers of the network failure tests: a node serving a small service over uds or tcp
// (`server`), a well-behaved client (`good_client`), and a raw client that speaks the protocol byte
// by byte (`raw_peer`), so that a test checks the exact frames answered.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "courier/actor.hpp"
#include "courier/net/node.hpp"
#include "courier/system.hpp"
#include "courier/wire/encoder.hpp"
#include "courier/wire/handshake.hpp"
#include "courier/wire/message.hpp"
#include "net_test_util.hpp"
#include "watchdog.hpp"

namespace courier_test::peers {

using namespace std::chrono_literals;
using courier::errc;
using courier::net::endpoint;
namespace wire = courier::wire;

struct add {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0, b = 0;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};
struct slow {  // replies `value` after `delay_ms`
  static constexpr courier::token token{"SLOW"};
  std::int32_t delay_ms = 0, value = 0;
  auto fields() { return std::tie(delay_ms, value); }
  auto fields() const { return std::tie(delay_ms, value); }
};
struct flag {  // a bool field: a call whose bool byte is 2 is spoiled (invalid_bool)
  static constexpr courier::token token{"FLAG"};
  bool on = false;
  auto fields() { return std::tie(on); }
  auto fields() const { return std::tie(on); }
};

using api = courier::interface<std::int32_t(add), std::int32_t(slow), bool(flag)>;

struct slow_done {
  std::int32_t value;
  courier::response_promise<std::int32_t> answer;
};

class service : public courier::actor<service, add, slow, flag, slow_done> {
 public:
  std::int32_t on(const add& m) { return m.a + m.b; }
  courier::response_promise<std::int32_t> on(const slow& m) {
    auto answer = make_response_promise<std::int32_t>();
    self().delayed_send(slow_done{m.value, answer}, std::chrono::milliseconds(m.delay_ms));
    return answer;
  }
  void on(const slow_done& m) {
    auto a = m.answer;
    a.deliver(m.value);
  }
  bool on(const flag& m) { return !m.on; }
};

// A server system and node in this process, serving `service` as `api`.
struct server {
  courier::system sys;
  courier::net::node net{sys};
  courier::actor_ref<api> target = sys.spawn<service>();
  endpoint where;

  server(endpoint at, const courier::net::connection_config& cfg) : where(std::move(at)) {
    auto s = net.serve(target, where, cfg);
    REQUIRE(s);
    if (where.kind == courier::net::transport_kind::tcp) where.port = s->port;
  }

  // Waits until the node has `n` connections (a dead client's connection is gone).
  bool connections_become(std::size_t n, std::chrono::milliseconds limit = 5s) {
    const auto until = std::chrono::steady_clock::now() + courier_test::scaled(limit);
    while (net.connections() != n) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }
};

// A well-behaved client: its own system and node, one connection, checked with a call.
struct good_client {
  courier::system sys;
  courier::net::node net{sys};
  courier::actor_ref<api> ref;

  explicit good_client(const endpoint& where) {
    auto r = net.connect<api>(where);
    REQUIRE(r);
    ref = *r;
  }
  bool works(std::int32_t a = 20, std::int32_t b = 22) {
    auto r = ref.ask(add{a, b}, courier_test::scaled(5s));
    return r && *r == a + b;
  }
};

inline endpoint uds_at(const char* tag) {
  endpoint e;
  e.kind = courier::net::transport_kind::uds;
  e.file = courier_test::temp_socket_path(tag);
  return e;
}

inline endpoint tcp_at() {
  endpoint e;
  e.kind = courier::net::transport_kind::tcp;
  e.host = "127.0.0.1";
  return e;
}

// Runs `body` once over uds and once over tcp.
inline void each_transport(const char* tag, const std::function<void(const endpoint&)>& body) {
  {
    INFO("uds");
    body(uds_at(tag));
  }
  {
    INFO("tcp");
    body(tcp_at());
  }
}

// One frame as the raw peer received it.
struct frame {
  wire::kind kind{};
  std::uint64_t tid = 0;
  std::uint32_t code = 0;  // error frames
  std::string text;        // error frames
  std::string body;
};

// A client that speaks the protocol byte by byte over a raw socket.
class raw_peer {
 public:
  explicit raw_peer(const endpoint& where) {
    auto c = courier::net::connect(where);
    INFO("connect: " << (c ? std::string("ok") : c.err().describe()));
    REQUIRE(c);
    sock_ = std::move(c->sock);
  }

  const courier::net::socket& sock() const { return sock_; }

  bool write(std::string_view bytes) { return courier_test::write_all(sock_, bytes); }
  bool write(const wire::out_buffer& out) {
    return write(std::string_view(reinterpret_cast<const char*>(out.data()), out.size()));
  }

  // Sends our handshake and reads the server's; true when the server's was a handshake.
  bool handshake() {
    if (!write(handshake_bytes())) return false;
    auto f = next();
    return f && f->kind == wire::kind::handshake;
  }

  static std::string handshake_bytes() {
    wire::out_buffer out;
    wire::handshake_info info;
    info.peer_name = "raw";
    REQUIRE(wire::encode_handshake(out, info));
    return as_string(out);
  }

  template <class M>
  static std::string call_bytes(const M& msg, std::uint64_t tid) {
    wire::out_buffer out;
    REQUIRE(wire::encode(out, msg, wire::route{wire::kind::call, tid, 0}));
    return as_string(out);
  }

  // A frame with no body: close, ping, pong.
  static std::string control_bytes(wire::kind k, std::uint64_t tid = 0) {
    std::string f = call_bytes(add{}, 1).substr(0, wire::header_size);
    f[6] = static_cast<char>(k);
    std::memset(f.data() + 8, 0, 8);  // body length and token
    std::memcpy(f.data() + 16, &tid, 8);
    return f;
  }

  static std::string as_string(const wire::out_buffer& out) {
    return std::string(reinterpret_cast<const char*>(out.data()), out.size());
  }

  // The next frame from the server, or nothing at end of stream or after `limit`.
  std::optional<frame> next(std::chrono::milliseconds limit = 5s) {
    const auto until = std::chrono::steady_clock::now() + courier_test::scaled(limit);
    for (;;) {
      if (auto f = pop()) return f;
      if (eof_) return std::nullopt;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      if (!fill(left)) return std::nullopt;
    }
  }

  // Reads until end of stream (frames received on the way are kept in `seen`); false on time-out.
  bool wait_eof(std::chrono::milliseconds limit = 5s, std::vector<frame>* seen = nullptr) {
    const auto until = std::chrono::steady_clock::now() + courier_test::scaled(limit);
    while (!eof_) {
      if (auto f = pop()) {
        if (seen) seen->push_back(*f);
        continue;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      fill(left);
    }
    while (auto f = pop())
      if (seen) seen->push_back(*f);
    return true;
  }

  bool at_eof() const { return eof_; }
  void close() { sock_.close(); }

 private:
  // Reads what is there (waiting up to `limit`); false on end of stream, failure or time-out.
  bool fill(std::chrono::milliseconds limit) {
    char chunk[65536];
    const auto got = courier::net::read_some(sock_, std::as_writable_bytes(std::span<char>(chunk, sizeof chunk)));
    if (got.status == courier::net::io_result::ok) {
      if (pos_ != 0) {
        buf_.erase(0, pos_);
        pos_ = 0;
      }
      buf_.append(chunk, got.bytes);
      return true;
    }
    if (got.status == courier::net::io_result::would_block)
      return courier_test::wait_for(sock_.fd(), POLLIN, std::min<std::chrono::milliseconds>(limit, 100ms)) || true;
    eof_ = true;  // end of stream, or a reset (the server closed with our bytes unread)
    return false;
  }

  std::optional<frame> pop() {
    if (buf_.size() - pos_ < wire::header_size) return std::nullopt;
    const char* at = buf_.data() + pos_;
    std::uint32_t body_length = 0;
    std::memcpy(&body_length, at + 8, 4);  // little endian, as the hosts these tests run on
    const std::size_t total = wire::header_size + body_length;
    if (buf_.size() - pos_ < total) return std::nullopt;
    frame f;
    f.kind = static_cast<wire::kind>(at[6]);
    std::memcpy(&f.tid, at + 16, 8);
    f.body.assign(at + wire::header_size, body_length);
    if (f.kind == wire::kind::error) {
      auto v = wire::decode_frame(std::as_bytes(std::span<const char>(at, total)));
      REQUIRE(v);
      wire::reader r = v->items();
      auto code = r.read<std::uint32_t>();
      auto text = r.read<std::string_view>();
      REQUIRE(code);
      f.code = *code;
      if (text) f.text = std::string(*text);
    }
    pos_ += total;
    if (pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    }
    return f;
  }

  courier::net::socket sock_;
  std::string buf_;
  std::size_t pos_ = 0;  // frames before it were popped
  bool eof_ = false;
};

// Waits until `done` holds; false after `limit`.
inline bool settles(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  const auto until = std::chrono::steady_clock::now() + courier_test::scaled(limit);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

inline courier::net::connection_config short_config() {
  courier::net::connection_config cfg;
  cfg.handshake_timeout = courier_test::scaled(500ms);
  return cfg;
}

// The fatal-error rule of section 9: an ERROR frame with transaction id 0 and `code`, then end of
// stream. `seen` is what came after the handshake.
inline void check_fatal(raw_peer& peer, wire::errc code, std::chrono::milliseconds limit = 5s) {
  std::vector<frame> seen;
  REQUIRE(peer.wait_eof(limit, &seen));
  REQUIRE(seen.size() >= 1);
  const frame& last = seen.back();
  CHECK(last.kind == wire::kind::error);
  CHECK(last.tid == 0);
  CHECK(last.code == static_cast<std::uint32_t>(code));
}

// A one-connection peer for a client to connect to: `serve` runs on its own thread with the
// accepted socket (no REQUIRE there: Catch's assertions belong to the test's thread).
struct raw_server {
  courier::net::listener listening;
  endpoint where;
  std::thread thread;

  raw_server(const endpoint& at, std::function<void(courier::net::socket&)> serve) {
    auto l = courier::net::listen(at);
    REQUIRE(l);
    listening = std::move(*l);
    where = at;
    if (at.kind == courier::net::transport_kind::tcp) where.port = listening.port();
    thread = std::thread([this, serve = std::move(serve)] {
      if (!courier_test::wait_for(listening.fd(), POLLIN)) return;
      auto s = listening.accept();
      if (s) serve(*s);
    });
  }
  ~raw_server() { thread.join(); }
};

}  // namespace courier_test::peers
