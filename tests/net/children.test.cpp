// Child contexts over a real connection (docs/protocol.md section 6): a client opens children on
// one connection, each with services of its own made by the server's factory; closing one leaves
// the others; 10,000 opened and closed in turn leave nothing behind. The client is a raw peer
// that writes the frames itself.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "courier/net/services.hpp"
#include "peers.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using namespace courier_test::peers;
namespace net = courier::net;

namespace {

// Children of the default kind get their own counter; every table made is remembered (weakly),
// to see that the connection lets go of each when its child ends.
struct child_maker {
  std::mutex mutex;
  std::vector<std::weak_ptr<const net::service_table>> made;

  std::shared_ptr<net::service_table> parent() {
    auto table = std::make_shared<net::service_table>();
    table->add(courier::token("PING"), [](net::incoming& call) { call.reply().add(std::int32_t{0}); });
    table->children([this](courier::token kind, std::string_view) -> std::shared_ptr<const net::service_table> {
      if (kind != courier::token{}) return nullptr;
      auto child = std::make_shared<net::service_table>();
      auto counter = std::make_shared<std::int64_t>(0);
      child->add(courier::token("CNT_"), [counter](net::incoming& call) { call.reply().add(++*counter); });
      std::lock_guard lock(mutex);
      made.push_back(child);
      return child;
    });
    return table;
  }
  std::size_t alive() {
    std::lock_guard lock(mutex);
    std::size_t n = 0;
    for (auto& w : made) n += w.expired() ? 0 : 1;
    return n;
  }
};

std::string frame_bytes(wire::kind k, courier::token tok, std::uint64_t txn, std::uint64_t ctx,
                        std::string_view name = {}) {
  wire::out_buffer out;
  wire::frame_writer w(out, wire::frame_header{1, k, 0, 0, tok, txn, ctx});
  if (!name.empty()) w.add(name);
  REQUIRE(w.finish());
  return raw_peer::as_string(out);
}

std::int64_t counted(const frame& f) {
  auto body = std::as_bytes(std::span<const char>(f.body.data(), f.body.size()));
  wire::reader r(body);
  return r.read<std::int64_t>().value();
}

struct served_children {
  child_maker maker;
  courier::system sys;
  net::node node{sys};
  endpoint where;
  explicit served_children(endpoint at, std::uint32_t limit) : where(std::move(at)) {
    net::connection_config cfg;
    cfg.max_child_contexts = limit;
    auto s = node.serve(maker.parent(), where, cfg);
    REQUIRE(s);
    if (where.kind == courier::net::transport_kind::tcp) where.port = s->port;
  }
};

}  // namespace

TEST_CASE("children on one connection have services of their own; closing one leaves the others", "[net][children]") {
  courier_test::watchdog wd("children", 60s);
  each_transport("children", [](const endpoint& at) {
    served_children srv(at, 8);
    raw_peer raw(srv.where);
    REQUIRE(raw.handshake());
    const courier::token none{}, count_token("CNT_");
    REQUIRE(raw.write(frame_bytes(wire::kind::context_open, none, 1, 1, "first")));
    REQUIRE(raw.write(frame_bytes(wire::kind::context_open, none, 2, 3, "second")));
    for (std::uint64_t txn : {1u, 2u}) {
      auto opened = raw.next();
      REQUIRE(opened);
      CHECK(opened->kind == wire::kind::reply);
      CHECK(opened->tid == txn);
    }
    // Each child counts for itself.
    REQUIRE(raw.write(frame_bytes(wire::kind::call, count_token, 3, 1)));
    REQUIRE(raw.write(frame_bytes(wire::kind::call, count_token, 4, 1)));
    REQUIRE(raw.write(frame_bytes(wire::kind::call, count_token, 5, 3)));
    std::int64_t got[3];
    for (auto& v : got) {
      auto f = raw.next();
      REQUIRE(f);
      REQUIRE(f->kind == wire::kind::reply);
      v = counted(*f);
    }
    CHECK(got[0] == 1);
    CHECK(got[1] == 2);
    CHECK(got[2] == 1);
    // The parent's own services are not a child's.
    REQUIRE(raw.write(frame_bytes(wire::kind::call, courier::token("PING"), 6, 1)));
    auto not_here = raw.next();
    REQUIRE(not_here);
    CHECK(not_here->kind == wire::kind::error);
    CHECK(not_here->code == static_cast<std::uint32_t>(errc::no_such_service));
    // Closing the first: answered; a call in it afterwards is for a context not open; the second
    // goes on.
    REQUIRE(raw.write(frame_bytes(wire::kind::context_close, none, 7, 1)));
    auto closed = raw.next();
    REQUIRE(closed);
    CHECK(closed->kind == wire::kind::reply);
    CHECK(closed->tid == 7);
    REQUIRE(raw.write(frame_bytes(wire::kind::call, count_token, 8, 1)));
    auto gone = raw.next();
    REQUIRE(gone);
    CHECK(gone->code == static_cast<std::uint32_t>(errc::no_such_context));
    REQUIRE(raw.write(frame_bytes(wire::kind::call, count_token, 9, 3)));
    auto second = raw.next();
    REQUIRE(second);
    CHECK(counted(*second) == 2);
    CHECK(srv.maker.alive() == 1);  // the first child's table was let go
    // A kind the server does not make is refused with 256; past the limit, 274.
    REQUIRE(raw.write(frame_bytes(wire::kind::context_open, courier::token("ODD_"), 10, 5)));
    auto odd = raw.next();
    REQUIRE(odd);
    CHECK(odd->code == static_cast<std::uint32_t>(errc::no_such_service));
    std::uint64_t txn = 11, id = 7;
    for (int i = 0; i < 7; ++i, id += 2) REQUIRE(raw.write(frame_bytes(wire::kind::context_open, none, txn++, id)));
    for (int i = 0; i < 7; ++i) {
      auto f = raw.next();
      REQUIRE(f);
      CHECK(f->kind == wire::kind::reply);
    }
    REQUIRE(raw.write(frame_bytes(wire::kind::context_open, none, txn++, id)));
    auto over = raw.next();
    REQUIRE(over);
    CHECK(over->code == static_cast<std::uint32_t>(errc::too_many_contexts));
  });
}

TEST_CASE("reflection in a child is an answered call: the child's close completes after it", "[net][children]") {
  courier_test::watchdog wd("children reflection", 60s);
  each_transport("childsvc", [](const endpoint& at) {
    served_children srv(at, 8);
    raw_peer raw(srv.where);
    REQUIRE(raw.handshake());
    const courier::token none{};
    REQUIRE(raw.write(frame_bytes(wire::kind::context_open, none, 1, 1, "probe")));
    auto opened = raw.next();
    REQUIRE(opened);
    REQUIRE(opened->kind == wire::kind::reply);
    REQUIRE(raw.write(frame_bytes(wire::kind::call, courier::token("$SVC"), 2, 1)));
    auto listed = raw.next();
    REQUIRE(listed);
    CHECK(listed->kind == wire::kind::reply);
    CHECK(listed->tid == 2);
    CHECK(listed->body.find("CNT_") != std::string::npos);
    // Every call in the child was answered, so our close of it completes at once.
    REQUIRE(raw.write(frame_bytes(wire::kind::context_close, none, 3, 1)));
    auto closed = raw.next(2s);
    REQUIRE(closed);
    CHECK(closed->kind == wire::kind::reply);
    CHECK(closed->tid == 3);
    CHECK(courier_test::eventually([&] { return srv.maker.alive() == 0; }));
  });
}

TEST_CASE("10,000 children opened and closed in turn on one connection leave nothing behind", "[net][children]") {
  courier_test::watchdog wd("many children", 120s);
  served_children srv(uds_at("many-children"), 2);
  raw_peer raw(srv.where);
  REQUIRE(raw.handshake());
  const courier::token none{}, count_token("CNT_");
  std::uint64_t txn = 1, failures = 0;
  constexpr int cycles = 10'000;
  for (int i = 0; i < cycles; ++i) {
    const std::uint64_t id = 1 + 2 * static_cast<std::uint64_t>(i);  // a new id each time, as the spec suggests
    std::string burst = frame_bytes(wire::kind::context_open, none, txn, id) +
                        frame_bytes(wire::kind::call, count_token, txn + 1, id) +
                        frame_bytes(wire::kind::context_close, none, txn + 2, id);
    txn += 3;
    REQUIRE(raw.write(burst));
    for (int k = 0; k < 3; ++k) {
      auto f = raw.next();
      REQUIRE(f);
      if (f->kind != wire::kind::reply) ++failures;
    }
  }
  CHECK(failures == 0);  // with a limit of 2, a child that was not freed would have refused the rest
  CHECK(srv.maker.alive() == 0);
  std::lock_guard lock(srv.maker.mutex);
  CHECK(srv.maker.made.size() == cycles);
}
