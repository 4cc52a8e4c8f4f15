// What hostile peers found in the network layer, each reproduced from its description and checked
// end to end over real sockets: memory a header can make a server reserve, descriptor exhaustion,
// output nobody reads (server and client side), a frame that arrives slowly, keepalive timing, an
// orderly stop with calls in flight, contexts that are not open, limits, refusals, and a second
// server on a live server's socket file.
#include "courier/net/detail/wire_stream.hpp"
#include "courier/net/node.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "courier/net/options.hpp"
#include "courier/wire/encoder.hpp"
#include "net_test_util.hpp"
#include "peers.hpp"
#include "watchdog.hpp"

extern char** environ;

using namespace courier_test::peers;

namespace {

// How late a timer may fire here: the protocol's tolerance (100 ms), with room for a loaded
// machine, stretched with the build (the sanitizers slow every thread).
const auto timer_slack = courier_test::scaled(std::chrono::milliseconds(250));

}  // namespace

namespace {

// A frame header announcing `body_length` bytes of body (docs/protocol.md section 2).
std::string header_bytes(wire::kind k, std::uint32_t body_length, std::uint64_t tid = 0, std::uint64_t ctx = 0,
                         std::string_view token = "ADD_") {
  std::string h(wire::header_size, '\0');
  std::memcpy(h.data(), "COUR", 4);
  h[4] = 1;  // version
  h[5] = static_cast<char>(wire::header_size);
  h[6] = static_cast<char>(k);
  std::memcpy(h.data() + 8, &body_length, 4);
  if (k == wire::kind::call || k == wire::kind::send) std::memcpy(h.data() + 12, token.data(), 4);
  std::memcpy(h.data() + 16, &tid, 8);
  std::memcpy(h.data() + 24, &ctx, 8);
  return h;
}

// This process's address space in KiB (VmSize in /proc/self/status).
long vm_size_kib() {
  std::ifstream status("/proc/self/status");
  std::string word;
  while (status >> word)
    if (word == "VmSize:") {
      long kib = 0;
      status >> kib;
      return kib;
    }
  return -1;
}

// An ADD_ call with a third item, a string of `pad` bytes (the server refuses it: trailing_items).
struct padded_add {  // ADD_ with a third field
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 1, b = 2;
  std::string pad;
  auto fields() { return std::tie(a, b, pad); }
  auto fields() const { return std::tie(a, b, pad); }
};

std::string call_with_padding(std::uint64_t tid, std::size_t pad) {
  padded_add p;
  p.pad.assign(pad, 'x');
  return raw_peer::call_bytes(p, tid);
}

}  // namespace

TEST_CASE("a first frame larger than a handshake is refused from its header, before any body byte",
          "[net][hardening][memory]") {
  courier_test::watchdog wd("first frame too large", 60s);
  each_transport("first-large", [](const endpoint& at) {
    server srv(at, short_config());
    const long before = vm_size_kib();
    std::vector<std::unique_ptr<raw_peer>> peers;
    // 16,777,184 bytes announced by a handshake header: the size that held 16 MiB per connection.
    for (int i = 0; i < 40; ++i) {
      peers.push_back(std::make_unique<raw_peer>(srv.where));
      REQUIRE(peers.back()->write(header_bytes(wire::kind::handshake, 16'777'184)));
    }
    for (auto& p : peers) {
      std::vector<frame> seen;
      REQUIRE(p->wait_eof(5s, &seen));
      REQUIRE(seen.size() == 2);  // the server's handshake, then the refusal
      CHECK(seen[1].kind == wire::kind::error);
      CHECK(seen[1].code == static_cast<std::uint32_t>(wire::errc::frame_too_large));
    }
    CHECK(vm_size_kib() - before < 64 * 1024);  // 40 x 16 MiB would be 640 MiB
    good_client good(srv.where);
    CHECK(good.works());
  });
}

TEST_CASE("a call header announcing 16 MiB reserves no more than the bytes that arrived", "[net][hardening][memory]") {
  courier_test::watchdog wd("call header large", 60s);
  each_transport("call-large", [](const endpoint& at) {
    courier::net::connection_config cfg;
    cfg.handshake_timeout = cfg.ping_interval = cfg.close_timeout = 20s;
    server srv(at, cfg);
    const long before = vm_size_kib();
    std::vector<std::unique_ptr<raw_peer>> peers;
    for (int i = 0; i < 40; ++i) {
      peers.push_back(std::make_unique<raw_peer>(srv.where));
      REQUIRE(peers.back()->handshake());
      REQUIRE(peers.back()->write(header_bytes(wire::kind::call, 16'777'184 - 64, 1)));
    }
    REQUIRE(srv.connections_become(40));
    std::this_thread::sleep_for(200ms);          // the headers have been read
    CHECK(vm_size_kib() - before < 128 * 1024);  // 40 x 16 MiB would be 640 MiB
    good_client good(srv.where);
    CHECK(good.works());
  });
}

TEST_CASE("a large frame grows its block as it arrives, and the endpoint's receive memory bounds it",
          "[net][hardening][memory][limits]") {
  courier_test::watchdog wd("receive memory", 60s);
  each_transport("memory", [](const endpoint& at) {
    courier::net::connection_config cfg = short_config();
    cfg.max_receive_memory = 1 << 20;
    server srv(at, cfg);
    {
      // 300 KB fits: it is answered (an extra item: trailing_items), the connection goes on.
      raw_peer raw(srv.where);
      REQUIRE(raw.handshake());
      REQUIRE(raw.write(call_with_padding(7, 300'000)));
      auto answer = raw.next(5s);
      REQUIRE(answer);
      CHECK(answer->kind == wire::kind::error);
      CHECK(answer->tid == 7);
    }
    REQUIRE(srv.connections_become(0));
    {
      // 3 MB does not: a fatal ERROR that names the budget, then the close.
      raw_peer raw(srv.where);
      REQUIRE(raw.handshake());
      (void)raw.write(call_with_padding(8, 3'000'000));  // the server may close before all of it
      std::vector<frame> seen;
      REQUIRE(raw.wait_eof(5s, &seen));
      REQUIRE_FALSE(seen.empty());
      CHECK(seen.back().kind == wire::kind::error);
      CHECK(seen.back().tid == 0);
      CHECK(seen.back().code == static_cast<std::uint32_t>(courier::errc::system_shutdown));
      CHECK(seen.back().text.find("memory") != std::string::npos);
    }
    REQUIRE(srv.connections_become(0));
    good_client good(srv.where);
    CHECK(good.works());
  });
}

TEST_CASE("a frame up to the receive memory is accepted, and idle connections hold none of it",
          "[net][hardening][memory][limits]") {
  courier_test::watchdog wd("receive memory: what counts", 60s);
  each_transport("memory-counts", [](const endpoint& at) {
    courier::net::connection_config cfg = short_config();
    cfg.max_receive_memory = 1 << 20;
    server srv(at, cfg);
    // Twenty idle connections: none of them takes any of the budget (each holds its one block).
    std::vector<std::unique_ptr<raw_peer>> idle;
    for (int i = 0; i < 20; ++i) {
      idle.push_back(std::make_unique<raw_peer>(srv.where));
      REQUIRE(idle.back()->handshake());
    }
    // Frames of 52% and of 95% of the budget, beside them: each grows its block by doubling, and
    // is counted at the block's size, not at the old and the new block at once.
    raw_peer raw(srv.where);
    REQUIRE(raw.handshake());
    std::uint64_t tid = 1;
    for (const std::size_t size : {545'296u, 1'000'000u}) {
      INFO("a frame of about " << size << " bytes");
      REQUIRE(raw.write(call_with_padding(tid, size)));
      auto answer = raw.next(5s);
      REQUIRE(answer);
      CHECK(answer->kind == wire::kind::error);
      CHECK(answer->tid == tid);
      CHECK(answer->code == static_cast<std::uint32_t>(wire::errc::trailing_items));
      ++tid;
    }
    for (auto& p : idle) CHECK_FALSE(p->at_eof());
  });
}

TEST_CASE("a frame that comes in the same read as the handshake is held to the receive memory too",
          "[net][hardening][memory][limits]") {
  // The handshake and the call in one write, as a client that does not wait for the server's
  // handshake sends them: the server reads both at once, before the handshake has raised the
  // frame size from a first frame's. A frame begun there must still grow in the connection's own
  // block, against the endpoint's budget, and not be gathered anywhere else.
  courier_test::watchdog wd("receive memory, frame with the handshake", 60s);
  each_transport("memory-first-read", [](const endpoint& at) {
    courier::net::connection_config cfg = short_config();
    cfg.max_receive_memory = 1 << 20;
    server srv(at, cfg);
    {
      raw_peer raw(srv.where);
      (void)raw.write(raw_peer::handshake_bytes() + call_with_padding(8, 3'000'000));  // may be cut short by the close
      std::vector<frame> seen;
      REQUIRE(raw.wait_eof(5s, &seen));
      REQUIRE(seen.size() == 2);  // the server's handshake, then the refusal
      CHECK(seen[0].kind == wire::kind::handshake);
      CHECK(seen[1].kind == wire::kind::error);
      CHECK(seen[1].tid == 0);
      CHECK(seen[1].code == static_cast<std::uint32_t>(courier::errc::system_shutdown));
      CHECK(seen[1].text.find("memory") != std::string::npos);
    }
    REQUIRE(srv.connections_become(0));
    {
      // What fits is answered as if it had come later (trailing_items for its extra item).
      raw_peer raw(srv.where);
      REQUIRE(raw.write(raw_peer::handshake_bytes() + call_with_padding(7, 300'000)));
      auto hello = raw.next(5s);
      REQUIRE(hello);
      CHECK(hello->kind == wire::kind::handshake);
      auto answer = raw.next(5s);
      REQUIRE(answer);
      CHECK(answer->kind == wire::kind::error);
      CHECK(answer->tid == 7);
      CHECK(answer->code == static_cast<std::uint32_t>(wire::errc::trailing_items));
    }
    REQUIRE(srv.connections_become(0));
    good_client good(srv.where);
    CHECK(good.works());
  });
}

TEST_CASE("bytes of a frame still arriving keep the peer alive", "[net][hardening][keepalive]") {
  courier_test::watchdog wd("slow frame", 60s);
  each_transport("slowframe", [](const endpoint& at) {
    courier::net::connection_config cfg;
    cfg.ping_interval = 300ms;  // dead after 900 ms of silence
    cfg.handshake_timeout = cfg.close_timeout = 5s;
    server srv(at, cfg);
    raw_peer raw(srv.where);
    REQUIRE(raw.handshake());
    // 40 KB in 1,000-byte slices, one every 30 ms: 1.2 s for the frame, never 900 ms silent.
    const std::string call = call_with_padding(9, 40'000);
    for (std::size_t at_byte = 0; at_byte < call.size(); at_byte += 1000) {
      REQUIRE(raw.write(std::string_view(call).substr(at_byte, 1000)));
      std::this_thread::sleep_for(30ms);
      REQUIRE_FALSE(raw.at_eof());
    }
    // The call is answered (with its trailing item refused); pings may come before the answer.
    std::optional<frame> f;
    do {
      f = raw.next(3s);
    } while (f && f->kind == wire::kind::ping);
    REQUIRE(f);
    CHECK(f->kind == wire::kind::error);
    CHECK(f->tid == 9);
  });
}

TEST_CASE("keepalive fires at the engine's deadlines: pings at one and two intervals, dead at three",
          "[net][hardening][keepalive][long]") {
  courier_test::watchdog wd("keepalive timing", 60s);
  each_transport("ktiming", [](const endpoint& at) {
    courier::net::connection_config cfg;
    cfg.ping_interval = 1s;  // long enough that a tick a quarter late (the old fixed period) shows
    cfg.handshake_timeout = cfg.close_timeout = 5s;
    server srv(at, cfg);
    raw_peer raw(srv.where);
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(raw.handshake());  // our last byte: the handshake, sent at t0
    auto since = [t0] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    };
    auto first = raw.next(2s);
    REQUIRE(first);
    CHECK(first->kind == wire::kind::ping);
    const auto at_first = since();
    auto second = raw.next(2s);
    REQUIRE(second);
    CHECK(second->kind == wire::kind::ping);
    const auto at_second = since();
    REQUIRE(raw.wait_eof(4s));
    const auto at_end = since();
    INFO("ping at " << at_first.count() << " ms, ping at " << at_second.count() << " ms, closed at " << at_end.count()
                    << " ms");
    // Never early; late by at most the timer's tolerance (docs/protocol.md section 13), here with
    // room for a loaded machine.
    CHECK(at_first >= 1000ms);
    CHECK(at_first < 1000ms + timer_slack);
    CHECK(at_second >= 2000ms);
    CHECK(at_second < 2000ms + timer_slack);
    CHECK(at_end >= 3000ms);
    CHECK(at_end < 3000ms + timer_slack);
  });
}

TEST_CASE("a server paused on replies nobody reads ends the connection after the dead-peer time",
          "[net][hardening][backpressure]") {
  courier_test::watchdog wd("paused server", 60s);
  each_transport("paused", [](const endpoint& at) {
    courier::net::connection_config cfg;
    cfg.ping_interval = 200ms;
    cfg.handshake_timeout = cfg.close_timeout = 5s;
    cfg.outbound_high_water = 64 * 1024;
    cfg.socket_buffer_size = 16 * 1024;
    server srv(at, cfg);
    raw_peer raw(srv.where);
    REQUIRE(raw.handshake());
    // Pipelined calls, never a byte read: the replies back up until the server pauses.
    std::string batch;
    for (std::uint64_t tid = 1; tid <= 2000; ++tid) batch += raw_peer::call_bytes(add{1, 2}, tid);
    const auto until = std::chrono::steady_clock::now() + 5s;
    std::size_t sent = 0;
    while (std::chrono::steady_clock::now() < until) {
      const std::size_t at_byte = sent % batch.size();  // a write may take part of the batch
      const iovec piece{batch.data() + at_byte, batch.size() - at_byte};
      const auto put = courier::net::write_some(raw.sock(), {&piece, 1});
      if (put.status == courier::net::io_result::ok) {
        sent += put.bytes;
        continue;
      }
      if (put.status != courier::net::io_result::would_block) break;
      if (!courier_test::wait_for(raw.sock().fd(), POLLOUT, 300ms)) break;  // the server stopped reading
    }
    INFO("sent " << sent << " bytes of calls");
    REQUIRE(sent > 64 * 1024);  // more than the server's outbound mark of replies
    const auto paused = std::chrono::steady_clock::now();
    // Silent and reading nothing from here on: the server must give up on its output.
    CHECK(srv.connections_become(0, 5s));
    CHECK(std::chrono::steady_clock::now() - paused < 3s);
  });
}

TEST_CASE("a server that pings and never reads: the client stops reading above its outbound mark",
          "[net][hardening][backpressure][long]") {
  courier_test::watchdog wd("pinging server", 60s);
  each_transport("pinger", [](const endpoint& at) {
    const std::string hello = raw_peer::handshake_bytes();
    std::atomic<std::size_t> written{0};
    // A ping with a 60,000-byte string item: its pong is as large, so the client's output grows by
    // a frame for every frame it reads.
    wire::out_buffer ping_frame;
    {
      wire::frame_writer w(ping_frame, wire::frame_header{1, wire::kind::ping, 0, 0, {}, 1, 0});
      w.add(std::string_view(std::string(60'000, 'p')));
      REQUIRE(w.finish());
    }
    std::string ping = raw_peer::as_string(ping_frame);
    raw_server peer(at, [&](courier::net::socket& s) {
      // Small kernel buffers on this side too: what it manages to write is what the client read.
      (void)courier::net::set_buffer_size(s, 64 * 1024);
      courier_test::write_all(s, hello);
      const auto until = std::chrono::steady_clock::now() + 1500ms;
      std::size_t at_byte = 0;  // within the ping being written: a write may take part of it
      while (std::chrono::steady_clock::now() < until) {
        const iovec piece{ping.data() + at_byte, ping.size() - at_byte};
        const auto put = courier::net::write_some(s, {&piece, 1});
        if (put.status == courier::net::io_result::ok) {
          written += put.bytes;
          at_byte = (at_byte + put.bytes) % ping.size();
        } else if (put.status == courier::net::io_result::would_block) {
          courier_test::wait_for(s.fd(), POLLOUT, 50ms);
        } else {
          break;
        }
      }
    });
    courier::system sys;
    courier::net::node net{sys};
    courier::net::connection_config cfg;
    cfg.outbound_high_water = 1 << 20;
    cfg.socket_buffer_size = 64 * 1024;
    auto ref = net.connect<api>(peer.where, cfg);
    INFO((ref ? std::string("connected") : ref.err().describe()));
    REQUIRE(ref);
    std::this_thread::sleep_for(2s);
    // Without the pause the client read (and answered into its output) everything: hundreds of MiB.
    INFO("the server wrote " << written.load() << " bytes of pings");
    CHECK(written.load() < 8u * 1024 * 1024);
  });
}

TEST_CASE("an orderly stop answers the calls in flight, refuses later ones, then closes",
          "[net][hardening][shutdown]") {
  courier_test::watchdog wd("orderly stop", 60s);
  each_transport("stop", [](const endpoint& at) {
    auto srv = std::make_unique<server>(at, courier::net::connection_config{});
    good_client good(srv->where);
    std::vector<std::promise<courier::result<std::int32_t>>> answers(5);
    std::vector<std::future<courier::result<std::int32_t>>> calls;
    for (std::int32_t i = 0; i < 5; ++i) {
      auto* answer = &answers[static_cast<std::size_t>(i)];
      calls.push_back(answer->get_future());
      good.ref.request(slow{300, i}, 5s)
          .then([answer](std::int32_t v) { answer->set_value(v); },
                [answer](const courier::error& e) { answer->set_value(e); });
    }
    // The calls are on the server: the stream is ordered, so the answer to a call made after
    // them means the server has read them (a fixed sleep was not enough on a loaded machine).
    REQUIRE(good.works());
    const auto t0 = std::chrono::steady_clock::now();
    srv->net.stop();
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    for (std::int32_t i = 0; i < 5; ++i) {
      auto r = calls[static_cast<std::size_t>(i)].get();
      INFO("call " << i << ": " << (r ? std::to_string(*r) : r.err().describe()));
      REQUIRE(r);
      CHECK(*r == i);
    }
    // The client learnt of the close: a later call fails at once, not after its time-out.
    auto after = good.ref.ask(add{1, 2}, 5s);
    CHECK_FALSE(after);
  });
}

TEST_CASE("a call in a context that is not open gets 258 no_such_context; a context_open gets 274",
          "[net][hardening][contexts]") {
  courier_test::watchdog wd("no such context", 30s);
  each_transport("ctx", [](const endpoint& at) {
    server srv(at, short_config());
    raw_peer raw(srv.where);
    REQUIRE(raw.handshake());
    wire::out_buffer out;
    REQUIRE(wire::encode(out, add{1, 2}, wire::route{wire::kind::call, 11, 5}));
    REQUIRE(raw.write(out));
    auto f = raw.next();
    REQUIRE(f);
    CHECK(f->kind == wire::kind::error);
    CHECK(f->tid == 11);
    CHECK(f->code == static_cast<std::uint32_t>(errc::no_such_context));
    // Context 0 is served as before.
    REQUIRE(raw.write(raw_peer::call_bytes(add{2, 3}, 12)));
    auto g = raw.next();
    REQUIRE(g);
    CHECK(g->kind == wire::kind::reply);
    CHECK(g->tid == 12);
    // A server that announced no children answers an open with 274, with the open's transaction id.
    wire::out_buffer open;
    REQUIRE(
        wire::frame_writer(open, wire::frame_header{1, wire::kind::context_open, 0, 0, courier::token("CHLD"), 13, 1})
            .finish());
    REQUIRE(raw.write(open));
    auto h = raw.next();
    REQUIRE(h);
    CHECK(h->kind == wire::kind::error);
    CHECK(h->tid == 13);
    CHECK(h->code == static_cast<std::uint32_t>(errc::too_many_contexts));
  });
}

TEST_CASE("a server describes what it serves: $SVC lists each service with its signatures",
          "[net][hardening][reflection]") {
  courier_test::watchdog wd("reflection", 30s);
  each_transport("svc", [](const endpoint& at) {
    server srv(at, short_config());
    raw_peer raw(srv.where);
    REQUIRE(raw.handshake());
    auto reflection_frame = [](wire::kind k, std::uint64_t tid, std::uint64_t ctx) {
      wire::out_buffer out;
      REQUIRE(wire::frame_writer(out, wire::frame_header{1, k, 0, 0, courier::token("$SVC"), tid, ctx}).finish());
      return raw_peer::as_string(out);
    };
    // A send of it is ignored; a call in a context that is not open gets 258; a call in the parent
    // context gets the list.
    REQUIRE(raw.write(reflection_frame(wire::kind::send, 0, 0)));
    REQUIRE(raw.write(reflection_frame(wire::kind::call, 3, 5)));
    REQUIRE(raw.write(reflection_frame(wire::kind::call, 4, 0)));
    auto refused = raw.next();
    REQUIRE(refused);
    CHECK(refused->kind == wire::kind::error);
    CHECK(refused->tid == 3);
    CHECK(refused->code == static_cast<std::uint32_t>(errc::no_such_context));
    auto listed = raw.next();
    REQUIRE(listed);
    REQUIRE(listed->kind == wire::kind::reply);
    CHECK(listed->tid == 4);
    auto body = std::as_bytes(std::span<const char>(listed->body.data(), listed->body.size()));
    wire::reader r(body);
    struct entry {
      std::string token, arguments, result, description;
      std::uint8_t kind;
    };
    std::vector<entry> services;
    while (r.has_more()) {
      REQUIRE(r.begin_list());
      entry e;
      e.token = std::string(r.read<std::string_view>().value());
      e.kind = r.read<std::uint8_t>().value();
      e.arguments = std::string(r.read<std::string_view>().value());
      e.result = std::string(r.read<std::string_view>().value());
      e.description = std::string(r.read<std::string_view>().value());
      REQUIRE(r.end_list());
      services.push_back(e);
    }
    REQUIRE(services.size() == 3);
    CHECK(services[0].token == "ADD_");
    CHECK(services[0].kind == 1);
    CHECK(services[0].arguments == "(int32, int32)");  // fields() written by hand: no names
    CHECK(services[0].result == "int32");
    CHECK(services[1].token == "SLOW");
    CHECK(services[2].token == "FLAG");
    CHECK(services[2].arguments == "(bool)");
    CHECK(services[2].result == "bool");
    // The connection goes on.
    REQUIRE(raw.write(raw_peer::call_bytes(add{2, 3}, 12)));
    auto g = raw.next();
    REQUIRE(g);
    CHECK(g->kind == wire::kind::reply);
  });
}

TEST_CASE("max_connections: one connection more gets ERROR 260 with the reason, then a close",
          "[net][hardening][limits]") {
  courier_test::watchdog wd("max connections", 30s);
  each_transport("maxconn", [](const endpoint& at) {
    courier::net::connection_config cfg = short_config();
    cfg.max_connections = 2;
    server srv(at, cfg);
    good_client a(srv.where), b(srv.where);
    REQUIRE(a.works());
    REQUIRE(b.works());
    {
      raw_peer third(srv.where);
      std::vector<frame> seen;
      REQUIRE(third.wait_eof(5s, &seen));
      REQUIRE(seen.size() == 1);
      CHECK(seen[0].kind == wire::kind::error);
      CHECK(seen[0].code == static_cast<std::uint32_t>(errc::system_shutdown));
      CHECK(seen[0].text.find("too many connections") != std::string::npos);
      // A client learns it from connect().
      courier::system sys;
      courier::net::node net{sys};
      auto refused = net.connect<api>(srv.where);
      REQUIRE_FALSE(refused);
      INFO(refused.err().describe());
      CHECK(refused.err().text.find("too many connections") != std::string::npos);
    }
    b.ref.stop();
    REQUIRE(srv.connections_become(1));
    good_client c(srv.where);
    CHECK(c.works());
  });
}

namespace {

using padded_api = courier::interface<std::int32_t(padded_add), std::int32_t(slow)>;

struct call_results {
  std::promise<courier::error> big;
  std::promise<courier::result<std::int32_t>> small;
};
struct go {};

// Connects from inside an actor (connect() returns at once there) and calls at once, before the
// server's handshake has arrived: both calls are encoded while the peer's limits are unknown.
class early_caller : public courier::actor<early_caller, go> {
 public:
  early_caller(courier::net::node* net, endpoint where, call_results* out)
      : net_(net), where_(std::move(where)), out_(out) {}
  void on(const go&) {}
  void on_start() {
    auto ref = net_->connect<padded_api>(where_);
    if (!ref) {
      out_->big.set_value(ref.err());
      out_->small.set_value(ref.err());
      return;
    }
    padded_add big;
    big.pad.assign(100'000, 'x');
    ref->request(big, 5s).then([this](std::int32_t) { out_->big.set_value({}); },
                               [this](const courier::error& e) { out_->big.set_value(e); });
    ref->request(slow{0, 5}, 5s)
        .then([this](std::int32_t v) { out_->small.set_value(v); },
              [this](const courier::error& e) { out_->small.set_value(e); });
  }

 private:
  courier::net::node* net_;
  endpoint where_;
  call_results* out_;
};

}  // namespace

TEST_CASE("a frame queued during the handshake that is larger than the peer accepts fails its call alone",
          "[net][hardening][limits]") {
  courier_test::watchdog wd("held frame", 30s);
  each_transport("heldframe", [](const endpoint& at) {
    courier::net::connection_config small = short_config();
    small.limits.max_frame_size = 65536;
    server srv(at, small);
    courier::system sys;
    courier::net::node net{sys};
    call_results results;
    sys.spawn<early_caller>(&net, srv.where, &results);
    auto big = results.big.get_future();
    auto little = results.small.get_future();
    REQUIRE(big.wait_for(10s) == std::future_status::ready);
    REQUIRE(little.wait_for(10s) == std::future_status::ready);
    const courier::error e = big.get();
    INFO(e.describe());
    CHECK(e == errc::invalid_argument);
    auto v = little.get();
    INFO((v ? std::to_string(*v) : v.err().describe()));
    REQUIRE(v);  // the connection lives on: the big call was never sent
    CHECK(*v == 5);
  });
}

TEST_CASE("a second uds server on the file of a live server with a full backlog is refused at once",
          "[net][hardening][uds]") {
  courier_test::watchdog wd("uds probe", 30s);
  const std::string file = courier_test::temp_socket_path("probe");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  courier::net::socket live(fd);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, file.c_str(), file.size() + 1);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(fd, 0) == 0);
  // Fill the backlog (never accepted): further connects would block.
  std::vector<courier::net::socket> waiting;
  for (int i = 0; i < 4; ++i) {
    const int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    REQUIRE(c >= 0);
    (void)::connect(c, reinterpret_cast<const sockaddr*>(&address), sizeof address);
    waiting.emplace_back(c);
  }
  endpoint where;
  where.kind = courier::net::transport_kind::uds;
  where.file = file;
  const auto t0 = std::chrono::steady_clock::now();
  auto second = courier::net::listen(where);
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  REQUIRE_FALSE(second);
  CHECK(second.err().text.find("another server is listening") != std::string::npos);
  ::unlink(file.c_str());
}

TEST_CASE("a client's handshake time-out is reported as a time-out, within the time asked",
          "[net][hardening][timeout]") {
  courier_test::watchdog wd("handshake timeout", 30s);
  each_transport("hstimeout", [](const endpoint& at) {
    raw_server silent(at, [](courier::net::socket& s) { courier_test::read_exactly(s, 1 << 20, 3s); });
    courier::system sys;
    courier::net::node net{sys};
    courier::net::connection_config cfg;
    cfg.handshake_timeout = 500ms;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = net.connect<api>(silent.where, cfg);
    const auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE_FALSE(r);
    INFO(r.err().describe());
    CHECK(r.err() == errc::request_timeout);
    CHECK(r.err().text.find("no handshake from the peer within 500 ms") != std::string::npos);
    CHECK(r.err().text.find("bad input") == std::string::npos);
    CHECK(took >= 500ms);
    CHECK(took < 1500ms);
  });
}

TEST_CASE("socket_buffer_size sets the connection's socket buffers", "[net][hardening][options]") {
  auto pair = courier::net::socket_pair();
  REQUIRE(pair);
  int before = 0;
  socklen_t size = sizeof before;
  REQUIRE(::getsockopt(pair->first.fd(), SOL_SOCKET, SO_RCVBUF, &before, &size) == 0);
  courier::net::connection_config cfg;
  cfg.socket_buffer_size = before == 8192 ? 16384 : 8192;
  courier::net::detail::wire_stream c(std::move(pair->first), wire::role::initiator, cfg, nullptr);
  int after = 0;
  REQUIRE(::getsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &after, &size) == 0);
  // Linux doubles the value asked for (bookkeeping overhead).
  CHECK(after == static_cast<int>(cfg.socket_buffer_size) * 2);
  CHECK(after != before);
  CHECK_FALSE(c.finished());
}

#ifdef COURIER_TEST_CALC_SERVER
#include "../../examples/calc/calc_api.hpp"

namespace {

// The calc example's server in a child process: `shell_prefix` runs before it in /bin/sh (a ulimit).
pid_t start_calc_server(const std::vector<std::string>& args, const std::string& shell_prefix = {}) {
  std::string script = shell_prefix + " exec \"$0\"";
  for (std::size_t i = 0; i < args.size(); ++i) script += " \"$" + std::to_string(i + 1) + "\"";
  std::vector<std::string> words{"/bin/sh", "-c", script, COURIER_TEST_CALC_SERVER};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  REQUIRE(::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv.data(), environ) == 0);
  return pid;
}

bool file_appears(const std::string& path, std::chrono::milliseconds limit = 5s) {
  return settles([&] { return ::access(path.c_str(), F_OK) == 0; }, limit);
}

int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(10ms);
  }
}

// The child this process started last (the pipe transport started it).
pid_t newest_child() {
  std::ifstream list("/proc/self/task/" + std::to_string(::getpid()) + "/children");
  pid_t newest = -1;
  for (pid_t pid = -1; list >> pid;) newest = std::max(newest, pid);
  return newest;
}

// Kills a server process that a failed test left running (after a clean exit: nothing).
struct process_guard {
  pid_t pid;
  ~process_guard() {
    if (::kill(pid, 0) == 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

}  // namespace

// Not under ASan+UBSan: UBSan checks every virtual call by probing memory through a pipe, and a
// process with no descriptor left fails that probe and reports a valid call as invalid (and,
// built not to recover, aborts). Release and TSan run it.
#if !defined(__SANITIZE_ADDRESS__)
TEST_CASE("out of descriptors, the calc server refuses with a reason, and accepts again once they free up",
          "[net][hardening][descriptors]") {
  courier_test::watchdog wd("emfile", 60s);
  const std::string file = courier_test::temp_socket_path("emfile");
  const pid_t pid = start_calc_server({"--uds", "--file", file, "--silent"}, "ulimit -n 64;");
  const process_guard guard{pid};
  REQUIRE(file_appears(file));
  endpoint where;
  where.kind = courier::net::transport_kind::uds;
  where.file = file;
  std::vector<std::unique_ptr<raw_peer>> peers;
  int accepted = 0, refused = 0;
  for (int i = 0; i < 80; ++i) {
    peers.push_back(std::make_unique<raw_peer>(where));
    raw_peer& p = *peers.back();
    (void)p.write(raw_peer::handshake_bytes());  // a refused connection may be closed already
    auto first = p.next(3s);
    INFO("connection " << i);
    REQUIRE(first);  // never left without an answer
    if (first->kind == wire::kind::handshake) {
      ++accepted;
    } else {
      CHECK(first->kind == wire::kind::error);
      CHECK(first->code == static_cast<std::uint32_t>(errc::system_shutdown));
      CHECK(first->text.find("file descriptors") != std::string::npos);
      CHECK(p.wait_eof(3s));
      ++refused;
    }
  }
  INFO(accepted << " accepted, " << refused << " refused");
  CHECK(accepted > 10);
  CHECK(refused > 0);
  peers.clear();  // every connection closes: descriptors free up
  {
    courier::system sys;
    courier::net::node net{sys};
    // The server frees them as it sees each close: on a loaded machine that takes a while, and
    // until then a connection is refused with the reason (checked above), so try again.
    auto calc = net.connect<calc::api>(where);
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!calc && calc.err().text.find("file descriptors") != std::string::npos &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(50ms);
      calc = net.connect<calc::api>(where);
    }
    INFO((calc ? std::string("connected") : calc.err().describe()));
    REQUIRE(calc);
    auto sum = calc->ask(calc::add{2, 3}, 5s);
    REQUIRE(sum);
    CHECK(*sum == 5);
  }
  ::kill(pid, SIGTERM);
  CHECK(wait_exit(pid, 5s) == 0);
}

#endif

TEST_CASE("the calc server answers every input: overflow is an ERROR, and it goes on", "[net][hardening][examples]") {
  courier_test::watchdog wd("calc inputs", 30s);
  courier::system sys;
  courier::net::node net{sys};
  endpoint where;
  where.kind = courier::net::transport_kind::pipe;
  where.command = {COURIER_TEST_CALC_SERVER};
  auto calc = net.connect<calc::api>(where);
  REQUIRE(calc);
  constexpr std::int32_t low = std::numeric_limits<std::int32_t>::min();
  constexpr std::int32_t high = std::numeric_limits<std::int32_t>::max();
  for (auto r : {calc->ask(calc::divide{low, -1}, 5s), calc->ask(calc::add{high, 1}, 5s),
                 calc->ask(calc::add{low, -1}, 5s), calc->ask(calc::square{65536}, 5s)}) {
    REQUIRE_FALSE(r);
    CHECK(r.err() == errc::invalid_argument);
    CHECK(r.err().text.find("overflow") != std::string::npos);
  }
  auto negative = calc->ask(calc::slow{-1, 0}, 5s);
  REQUIRE_FALSE(negative);
  CHECK(negative.err() == errc::invalid_argument);
  auto after = calc->ask(calc::divide{low, 1}, 5s);
  REQUIRE(after);
  CHECK(*after == low);
}

TEST_CASE("a pipe server ends in order on SIGTERM and SIGINT", "[net][hardening][signals][pipe]") {
  courier_test::watchdog wd("pipe signals", 30s);
  for (const int sig : {SIGTERM, SIGINT}) {
    INFO("signal " << sig);
    courier::system sys;
    courier::net::node net{sys};
    endpoint where;
    where.kind = courier::net::transport_kind::pipe;
    where.command = {COURIER_TEST_CALC_SERVER};
    auto calc = net.connect<calc::api>(where);
    REQUIRE(calc);
    REQUIRE(calc->ask(calc::add{1, 1}, 5s));
    const pid_t child = newest_child();
    REQUIRE(child > 0);
    REQUIRE(::kill(child, sig) == 0);
    CHECK(settles([&] { return net.connections() == 0; }, 3s));
    auto after = calc->ask(calc::add{1, 1}, 5s);
    REQUIRE_FALSE(after);
  }
}

TEST_CASE("SIGTERM with slow calls in flight: the calc server answers them before it goes",
          "[net][hardening][signals][shutdown]") {
  courier_test::watchdog wd("sigterm in flight", 30s);
  const std::string file = courier_test::temp_socket_path("sigterm");
  const pid_t pid = start_calc_server({"--uds", "--file", file, "--silent"});
  const process_guard guard{pid};
  REQUIRE(file_appears(file));
  endpoint where;
  where.kind = courier::net::transport_kind::uds;
  where.file = file;
  courier::system sys;
  courier::net::node net{sys};
  auto calc = net.connect<calc::api>(where);
  REQUIRE(calc);
  std::vector<std::promise<courier::result<std::int32_t>>> answers(3);
  std::vector<std::future<courier::result<std::int32_t>>> calls;
  for (std::int32_t i = 0; i < 3; ++i) {
    auto* answer = &answers[static_cast<std::size_t>(i)];
    calls.push_back(answer->get_future());
    calc->request(calc::slow{400, i}, 5s)
        .then([answer](std::int32_t v) { answer->set_value(v); },
              [answer](const courier::error& e) { answer->set_value(e); });
  }
  // The answer to a call made after them says the server has read them (the stream is ordered).
  REQUIRE(calc->ask(calc::add{1, 2}, 5s));
  REQUIRE(::kill(pid, SIGTERM) == 0);
  for (std::int32_t i = 0; i < 3; ++i) {
    auto r = calls[static_cast<std::size_t>(i)].get();
    INFO("call " << i << ": " << (r ? std::to_string(*r) : r.err().describe()));
    REQUIRE(r);
    CHECK(*r == i);
  }
  CHECK(wait_exit(pid, 5s) == 0);
  CHECK(::access(file.c_str(), F_OK) != 0);  // the socket file is gone
}

// A stall of the server's own (here SIGSTOP; a loaded host or a long handler on its only worker
// alike) is not the peers' fault: bytes that arrived in time are read before any time-out is
// judged, and a live peer is declared dead only after pings that were really sent went unanswered.
TEST_CASE("a server that stalls does not charge its stall to its peers: a handshake in time, live idle clients",
          "[net][hardening][keepalive][signals]") {
  courier_test::watchdog wd("stalled server", 60s);
  const std::string file = courier_test::temp_socket_path("stall");
  const pid_t pid = start_calc_server({"--uds", "--file", file, "--timeout", "0.5", "--keepalive", "300", "--silent"});
  REQUIRE(file_appears(file));
  endpoint where;
  where.kind = courier::net::transport_kind::uds;
  where.file = file;
  courier::system sys;
  courier::net::node net{sys};
  auto idle_a = net.connect<calc::api>(where);
  auto idle_b = net.connect<calc::api>(where);
  REQUIRE(idle_a);
  REQUIRE(idle_b);
  REQUIRE(idle_a->ask(calc::add{1, 2}, 5s));
  REQUIRE(idle_b->ask(calc::add{1, 2}, 5s));
  std::this_thread::sleep_for(400ms);  // idle long enough that the server has pinged them
  raw_peer raw(where);
  auto hello = raw.next(5s);  // the server's handshake: it has accepted, its handshake timer runs
  REQUIRE(hello);
  REQUIRE(hello->kind == wire::kind::handshake);
  REQUIRE(::kill(pid, SIGSTOP) == 0);
  REQUIRE(raw.write(raw_peer::handshake_bytes() + raw_peer::call_bytes(calc::add{2, 3}, 7)));
  // Three handshake time-outs and five keepalive intervals, all of them the server's own stall.
  std::this_thread::sleep_for(1500ms);
  REQUIRE(::kill(pid, SIGCONT) == 0);
  std::optional<frame> answer;
  do {
    answer = raw.next(5s);
  } while (answer && answer->kind == wire::kind::ping);
  REQUIRE(answer);
  INFO("code " << answer->code << ": " << answer->text);
  CHECK(answer->kind == wire::kind::reply);
  CHECK(answer->tid == 7);
  for (auto* idle : {&*idle_a, &*idle_b}) {
    auto r = idle->ask(calc::add{2, 2}, 5s);
    INFO((r ? std::string("answered") : r.err().describe()));
    CHECK(r);
  }
  REQUIRE(::kill(pid, SIGTERM) == 0);
  CHECK(wait_exit(pid, 10s) == 0);
}
#endif

TEST_CASE("adopt without waiting for the handshake returns at once; the first call reports the outcome",
          "[net][hardening][adopt]") {
  courier_test::watchdog wd("adopt async", 30s);
  auto pair = courier::net::socket_pair();
  REQUIRE(pair);
  courier::net::socket silent = std::move(pair->second);  // a peer that never answers
  courier::system sys;
  courier::net::node net{sys};
  courier::net::connection_config cfg;
  cfg.wait_for_handshake = false;
  cfg.handshake_timeout = 300ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto ref = net.adopt<api>(std::move(pair->first), cfg);
  CHECK(std::chrono::steady_clock::now() - t0 < 250ms);  // a wait for the handshake would take its 300 ms
  REQUIRE(ref);
  auto r = ref->ask(add{1, 2}, 5s);
  REQUIRE_FALSE(r);
  INFO(r.err().describe());
  CHECK(r.err() == errc::request_timeout);
  CHECK(r.err().text.find("no handshake") != std::string::npos);
}

namespace {

class down_seen : public courier::actor<down_seen, courier::down> {
 public:
  down_seen(courier::actor_ref<api> target, std::promise<courier::error>* out)
      : target_(std::move(target)), out_(out) {}
  void on_start() { monitor(target_); }
  void on(const courier::down& d) {
    out_->set_value(d.reason);
    target_.reset();
  }

 private:
  courier::actor_ref<api> target_;
  std::promise<courier::error>* out_;
};

}  // namespace

TEST_CASE("down and later calls carry the reason the connection was lost, with its text", "[net][hardening][down]") {
  courier_test::watchdog wd("down text", 30s);
  each_transport("downtext", [](const endpoint& at) {
    const std::string hello = raw_peer::handshake_bytes();
    raw_server peer(at, [&hello](courier::net::socket& s) {
      courier_test::write_all(s, hello);
      courier_test::read_exactly(s, 1 << 20, 3s);  // reads, answers nothing, never pongs
    });
    courier::system sys;
    courier::net::node net{sys};
    courier::net::connection_config cfg;
    cfg.ping_interval = 100ms;  // dead after 300 ms of silence
    auto ref = net.connect<api>(peer.where, cfg);
    REQUIRE(ref);
    std::promise<courier::error> down;
    sys.spawn<down_seen>(*ref, &down);
    auto seen = down.get_future();
    REQUIRE(seen.wait_for(5s) == std::future_status::ready);
    const courier::error reason = seen.get();
    INFO(reason.describe());
    CHECK(reason == errc::connection_lost);
    CHECK(reason.text.find("silent") != std::string::npos);
    auto later = ref->ask(add{1, 2}, 2s);
    REQUIRE_FALSE(later);
    CHECK(later.err() == errc::connection_lost);
    CHECK(later.err().text.find("silent") != std::string::npos);
  });
}

TEST_CASE("a pipe 'server' that echoes our bytes (cat) is refused: the handshake is our own",
          "[net][hardening][pipe]") {
  courier_test::watchdog wd("reflected", 30s);
  courier::system sys;
  courier::net::node net{sys};
  endpoint where;
  where.kind = courier::net::transport_kind::pipe;
  where.command = {"/bin/cat"};
  auto r = net.connect<api>(where);
  REQUIRE_FALSE(r);
  INFO(r.err().describe());
  CHECK(r.err().text.find("reflected") != std::string::npos);
}

namespace {

struct echo_int {
  std::int32_t v = 0;
};
class local_echo : public courier::actor<local_echo, echo_int> {
 public:
  std::int32_t on(const echo_int& m) { return m.v; }
};

}  // namespace

TEST_CASE("a pipe server slow to exit never blocks a worker: its exit arrives through the pidfd",
          "[net][hardening][pipe]") {
  courier_test::watchdog wd("pidfd reap", 30s);
  courier::config one_worker;
  one_worker.workers = 1;
  courier::system sys{one_worker};
  courier::net::node net{sys};
  auto echo = sys.spawn<local_echo>();
  endpoint where;
  where.kind = courier::net::transport_kind::pipe;
  // Answers with 4 bytes that are not a frame, closes the socket, and lives on for 600 ms:
  // the client's connection is lost while its server has not exited.
  where.command = {"/bin/sh", "-c", "printf 'XXXX' ; exec 0<&- 1>&-; sleep 0.6; exit 3"};
  courier::net::connection_config cfg;
  cfg.wait_for_handshake = false;
  auto ref = net.connect<api>(where, cfg);
  REQUIRE(ref);
  std::promise<courier::error> failed;
  ref->request(add{1, 2}, 5s)
      .then([&failed](std::int32_t) { failed.set_value({}); },
            [&failed](const courier::error& e) { failed.set_value(e); });
  // Meanwhile the one worker answers at once: nothing waits on the child.
  const auto t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration slowest{};
  while (std::chrono::steady_clock::now() - t0 < 400ms) {
    const auto asked = std::chrono::steady_clock::now();
    auto r = echo.ask(echo_int{7}, 2s);
    REQUIRE(r);
    slowest = std::max(slowest, std::chrono::steady_clock::now() - asked);
  }
  INFO("slowest local ask: " << std::chrono::duration_cast<std::chrono::microseconds>(slowest).count() << " us");
  CHECK(slowest < 150ms);  // a worker that waited on the child stalled it for 200 ms
  auto f = failed.get_future();
  REQUIRE(f.wait_for(5s) == std::future_status::ready);
  const courier::error e = f.get();
  INFO(e.describe());
  CHECK(e == errc::protocol_error);
}
