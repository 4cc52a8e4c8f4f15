// Contexts from the calling side (courier/net/context.hpp): calls by token with items written at
// the call, in the parent and in child contexts, every call style (END, END_AND_CALLBACK,
// END_AND_WAIT), errors as courier::error, and calls both ways on one connection (a server's
// service that calls back into its client). Over uds and tcp, against dynamic and typed services.
#include "courier/net/context.hpp"
#include "courier/net/local_context.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "courier/net/node.hpp"
#include "courier/net/services.hpp"
#include "peers.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using namespace courier_test::peers;
namespace net = courier::net;

namespace {

std::string string_of(const courier::wire::items_ref& reply) {
  auto r = reply.items();
  auto s = r.read<std::string_view>();
  return s ? std::string(*s) : std::string("<not a string>");
}

// A server of dynamic services in this process, with children of its own kind and a service that
// calls back into its client.
struct dynamic_server {
  courier::system sys;
  net::node node{sys};
  endpoint where;
  std::atomic<int> sends{0};
  std::mutex answering_mutex;
  std::vector<std::thread> answering;  // threads that answer deferred calls, joined before the system goes

  ~dynamic_server() {
    std::lock_guard lock(answering_mutex);
    for (auto& t : answering) t.join();
  }

  std::shared_ptr<const net::service_table> services;

  // Serves at `at`, or (none) only makes the services, for serve_locally.
  explicit dynamic_server(std::optional<endpoint> at, std::size_t max_children = 8) {
    auto table = std::make_shared<net::service_table>();
    table->add(courier::token("HELO"), [](net::incoming& call) {
      auto name = call.read<std::string_view>();
      if (name) call.reply().add("hello, " + std::string(*name));
    });
    table->add(courier::token("FAIL"), [](net::incoming& call) {
      call.fail(courier::error(courier::errc::invalid_argument, "FAIL always fails"));
    });
    table->add(courier::token("NOTE"), [this](net::incoming&) { sends.fetch_add(1); });
    // ASKC: asks the client's NAME service (in the same context) and answers with what it said.
    table->add(courier::token("ASKC"), [](net::incoming& call) {
      auto answer = std::make_shared<net::deferred_reply>(call.defer());
      call.peer()
          .call(courier::token("NAME"), {}, 5s)
          .then(
              [answer](const courier::wire::items_ref& r) {
                const std::string name = string_of(r);
                answer->deliver([&](courier::wire::frame_writer& w) { w.add("the client says " + name); });
              },
              [answer](const courier::error& e) { answer->fail(e); });
    });
    // KIDS: opens a child context at its client, calls the client's NAME there, closes it, and
    // answers with the name: a child created from the server's side.
    table->add(courier::token("KIDS"), [](net::incoming& call) {
      auto answer = std::make_shared<net::deferred_reply>(call.defer());
      const net::context_ref client = call.peer();
      client.open_request("from the server", {}, nullptr, 5s)
          .then(
              [client, answer](net::opened_context opened) {
                const net::context_ref child = client.child(opened.id);
                child.call(courier::token("NAME"), {}, 5s)
                    .then(
                        [child, answer](const courier::wire::items_ref& r) {
                          const std::string said = string_of(r);
                          child.close();
                          answer->deliver([&](courier::wire::frame_writer& w) {
                            w.add(said).add(static_cast<std::uint64_t>(child.id()));
                          });
                        },
                        [answer](const courier::error& e) { answer->fail(e); });
              },
              [answer](const courier::error& e) { answer->fail(e); });
    });
    table->children([this](courier::token kind, std::string_view name) -> std::shared_ptr<const net::service_table> {
      if (kind != courier::token{}) return nullptr;
      auto child = std::make_shared<net::service_table>();
      auto counter = std::make_shared<std::int64_t>(0);
      child->add(courier::token("CNT_"), [counter](net::incoming& call) { call.reply().add(++*counter); });
      child->add(courier::token("NAME"), [n = std::string(name)](net::incoming& call) { call.reply().add(n); });
      child->add(courier::token("BOOM"),
                 [](net::incoming&) { throw std::runtime_error("the child's handler failed"); });
      child->add(courier::token("SLOW"), [this](net::incoming& call) {
        auto answer = std::make_shared<net::deferred_reply>(call.defer());
        std::lock_guard lock(answering_mutex);
        answering.emplace_back([answer] {
          std::this_thread::sleep_for(200ms);
          answer->deliver([](courier::wire::frame_writer& w) { w.add(std::int32_t{7}); });
        });
      });
      child->add(courier::token("ASKC"), [](net::incoming& call) {
        auto answer = std::make_shared<net::deferred_reply>(call.defer());
        call.peer()
            .call(courier::token("NAME"), {}, 5s)
            .then(
                [answer](const courier::wire::items_ref& r) {
                  const std::string said = string_of(r);
                  answer->deliver([&](courier::wire::frame_writer& w) { w.add(said); });
                },
                [answer](const courier::error& e) { answer->fail(e); });
      });
      return child;
    });
    services = table;
    if (!at) return;
    where = std::move(*at);
    net::connection_config cfg;
    cfg.max_child_contexts = max_children;
    auto s = node.serve(services, where, cfg);
    REQUIRE(s);
    if (where.kind == courier::net::transport_kind::tcp) where.port = s->port;
  }
};

// A child's CNT_: its count after this call; -1 for an error, -2 for a reply without an int64.
std::int64_t count(const net::context_ref& ctx) {
  auto r = ctx.call_wait(courier::token("CNT_"), {}, 5s);
  if (!r) return -1;
  auto items = r->items();
  auto v = items.read<std::int64_t>();
  return v ? *v : -2;
}

// What a client serves its server: NAME, in whichever context it is registered.
std::shared_ptr<const net::service_table> client_services(std::string name) {
  auto table = std::make_shared<net::service_table>();
  table->add(courier::token("NAME"), [name = std::move(name)](net::incoming& call) { call.reply().add(name); });
  return table;
}

// The same, with children the server may open at the client: each answers NAME with its own name.
std::shared_ptr<const net::service_table> client_services_with_children(std::string name) {
  auto table = std::make_shared<net::service_table>();
  table->add(courier::token("NAME"), [name = std::move(name)](net::incoming& call) { call.reply().add(name); });
  table->children([](courier::token, std::string_view child_name) -> std::shared_ptr<const net::service_table> {
    auto child = std::make_shared<net::service_table>();
    child->add(courier::token("NAME"), [n = "the client's child '" + std::string(child_name) +
                                            "'"](net::incoming& call) { call.reply().add(n); });
    return child;
  });
  return table;
}

// Runs `body` with the parent context of a dynamic server: over uds, over tcp, and in this process
// (serve_locally): the same scenario on every path, with the same results.
void each_path(const char* tag, const std::function<void(dynamic_server&, const net::context_ref&, bool local)>& body);

struct client {
  courier::system sys;
  net::node node{sys};
  net::context_ref parent;
  explicit client(const endpoint& where, std::shared_ptr<const net::service_table> served = nullptr) {
    auto c = node.connect(where, {}, std::move(served));
    INFO((c ? std::string("connected") : c.err().describe()));
    REQUIRE(c);
    parent = *c;
  }
};

void each_path(const char* tag, const std::function<void(dynamic_server&, const net::context_ref&, bool local)>& body) {
  each_transport(tag, [&](const endpoint& at) {
    dynamic_server srv(at);
    client c(srv.where);
    body(srv, c.parent, false);
  });
  INFO("local");
  dynamic_server srv(std::nullopt);
  auto ctx = net::serve_locally(srv.sys, srv.services);
  body(srv, ctx, true);
  REQUIRE(ctx.close_wait(5s));
}

}  // namespace

TEST_CASE("arguments of fixed-size values are the items a frame writer makes of them, copied and moved intact",
          "[net][contexts][arguments]") {
  auto as_written = [](const auto&... values) {
    return net::arguments::written([&](wire::frame_writer& w) { (wire::detail::write_value(w, values), ...); });
  };
  auto bytes_of = [](const net::arguments& a) {
    const auto b = a.bytes();
    return std::vector<std::byte>(b.begin(), b.end());
  };
  const auto scalars = net::args(true, false, std::int8_t{-2}, std::uint8_t{250}, std::int16_t{-30000},
                                 std::uint16_t{60000}, std::int32_t{-7}, std::uint32_t{4000000000u});
  const auto expected = bytes_of(as_written(true, false, std::int8_t{-2}, std::uint8_t{250}, std::int16_t{-30000},
                                            std::uint16_t{60000}, std::int32_t{-7}, std::uint32_t{4000000000u}));
  REQUIRE(expected.size() == 4 + 4 + 6 + 10);
  CHECK(bytes_of(scalars) == expected);
  CHECK(bytes_of(net::args(std::int64_t{-1} << 40, 2.5f, -0.125)) ==
        bytes_of(as_written(std::int64_t{-1} << 40, 2.5f, -0.125)));
  CHECK(bytes_of(net::args(std::uint64_t{1} << 63)) == bytes_of(as_written(std::uint64_t{1} << 63)));

  // Past the inline bytes (six int64 are 54 bytes) the frame writer makes them, in a pool slot.
  const auto six =
      net::args(std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, std::int64_t{4}, std::int64_t{5}, std::int64_t{6});
  CHECK(bytes_of(six) == bytes_of(as_written(std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, std::int64_t{4},
                                             std::int64_t{5}, std::int64_t{6})));

  net::arguments copied(scalars);
  CHECK(bytes_of(copied) == expected);
  net::arguments moved(std::move(copied));
  CHECK(bytes_of(moved) == expected);
  CHECK(copied.bytes().empty());
  net::arguments assigned;
  assigned = std::move(moved);
  CHECK(bytes_of(assigned) == expected);
  assigned = six;
  CHECK(bytes_of(assigned) == bytes_of(six));

  // What the server reads back is what was written.
  wire::reader r(scalars.bytes());
  CHECK(*r.read<bool>() == true);
  CHECK(*r.read<bool>() == false);
  CHECK(*r.read<std::int8_t>() == -2);
  CHECK(*r.read<std::uint8_t>() == 250);
  CHECK(*r.read<std::int16_t>() == -30000);
  CHECK(*r.read<std::uint16_t>() == 60000);
  CHECK(*r.read<std::int32_t>() == -7);
  CHECK(*r.read<std::uint32_t>() == 4000000000u);
  CHECK(!r.has_more());
}

TEST_CASE("calls by token in the parent context: END, END_AND_CALLBACK, END_AND_WAIT, and errors", "[net][contexts]") {
  courier_test::watchdog wd("context calls", 60s);
  each_path("ctxcalls", [](dynamic_server& srv, const net::context_ref& parent, bool) {
    auto hello = parent.call_wait(courier::token("HELO"), net::args(std::string_view("world")), 5s);
    INFO((hello ? std::string("reply") : hello.err().describe()));
    REQUIRE(hello);
    CHECK(string_of(*hello) == "hello, world");

    std::promise<std::string> later;
    parent.call(courier::token("HELO"), net::args(std::string_view("later")), 5s)
        .then([&](const courier::wire::items_ref& r) { later.set_value(string_of(r)); },
              [&](const courier::error& e) { later.set_value("error: " + e.describe()); });
    auto f = later.get_future();
    REQUIRE(f.wait_for(5s) == std::future_status::ready);
    CHECK(f.get() == "hello, later");

    // An ERROR is the courier::error the handler failed with, code and text.
    auto failed = parent.call_wait(courier::token("FAIL"), {}, 5s);
    REQUIRE_FALSE(failed);
    CHECK(failed.err() == courier::errc::invalid_argument);
    CHECK(failed.err().text.find("FAIL always fails") != std::string::npos);
    // A wrong item type names the expected and the actual type, and the position.
    auto wrong = parent.call_wait(courier::token("HELO"), net::args(std::int32_t{5}), 5s);
    REQUIRE_FALSE(wrong);
    INFO(wrong.err().describe());
    CHECK(wrong.err().text.find("argument 1") != std::string::npos);
    CHECK(wrong.err().text.find("int32") != std::string::npos);
    CHECK(wrong.err().text.find("string") != std::string::npos);
    auto unknown = parent.call_wait(courier::token("NOPE"), {}, 5s);
    REQUIRE_FALSE(unknown);
    CHECK(unknown.err() == courier::errc::no_such_service);

    // Reflection: $SVC lists the services, the same on every path.
    auto listed = parent.services(5s);
    REQUIRE(listed);
    std::vector<std::string> tokens;
    for (const auto& d : *listed) tokens.emplace_back(d.token.view());
    CHECK(tokens == std::vector<std::string>{"HELO", "FAIL", "NOTE", "ASKC", "KIDS"});

    // END: one-way; a call after them is answered after them (one stream, in order).
    for (int i = 0; i < 50; ++i) CHECK(parent.send(courier::token("NOTE")));
    REQUIRE(parent.call_wait(courier::token("HELO"), net::args(std::string_view("x")), 5s));
    CHECK(srv.sends.load() == 50);
  });
}

TEST_CASE("typed services are called by token too: one dispatch for typed and dynamic", "[net][contexts]") {
  courier_test::watchdog wd("typed by token", 30s);
  each_transport("ctxtyped", [](const endpoint& at) {
    server srv(at, courier::net::connection_config{});  // serves peers::api (ADD_ ...) as typed messages
    client c(srv.where);
    auto sum = c.parent.call_wait(courier::token("ADD_"), net::args(std::int32_t{20}, std::int32_t{22}), 5s);
    INFO((sum ? std::string("reply") : sum.err().describe()));
    REQUIRE(sum);
    auto r = sum->items();
    auto v = r.read<std::int32_t>();
    REQUIRE(v);
    CHECK(*v == 42);
    CHECK_FALSE(r.has_more());
    auto wrong = c.parent.call_wait(courier::token("ADD_"), net::args(std::string_view("twenty")), 5s);
    REQUIRE_FALSE(wrong);
    CHECK(wrong.err().text.find("string") != std::string::npos);
  });
}

namespace {

struct try_wait {};
// An actor whose handler tries the blocking call: refused, it must not block the worker.
class blocking_caller : public courier::actor<blocking_caller, try_wait> {
 public:
  blocking_caller(net::context_ref ctx, std::promise<courier::error>* out) : ctx_(std::move(ctx)), out_(out) {}
  void on(const try_wait&) {
    auto r = ctx_.call_wait(courier::token("HELO"), net::args(std::string_view("x")), 1s);
    out_->set_value(r ? courier::error{} : r.err());
  }

 private:
  net::context_ref ctx_;
  std::promise<courier::error>* out_;
};

}  // namespace

TEST_CASE("call_wait on a worker is refused with would_deadlock", "[net][contexts]") {
  courier_test::watchdog wd("would deadlock", 30s);
  dynamic_server srv(uds_at("ctxdead"));
  client c(srv.where);
  std::promise<courier::error> seen;
  auto a = c.sys.spawn<blocking_caller>(c.parent, &seen);
  a.send(try_wait{});
  auto f = seen.get_future();
  REQUIRE(f.wait_for(5s) == std::future_status::ready);
  CHECK(f.get() == courier::errc::would_deadlock);
}

TEST_CASE("child contexts opened by the client over a connection: the announced limit, a close that waits for calls",
          "[net][contexts][children]") {
  courier_test::watchdog wd("client children", 60s);
  each_transport("ctxkids", [](const endpoint& at) {
    dynamic_server srv(at, 2);
    client c(srv.where);
    auto a = c.parent.open_child("first");
    INFO((a ? std::string("opened") : a.err().describe()));
    REQUIRE(a);
    auto b = c.parent.open_child("second");
    REQUIRE(b);
    CHECK(b->id() != a->id());
    CHECK(count(*a) == 1);
    CHECK(count(*b) == 1);  // its own counter (services and errors per child: the next case, on every path)

    // Past the server's limit (2): too_many_contexts, from the handshake's announcement.
    auto third = c.parent.open_child("third");
    REQUIRE_FALSE(third);
    CHECK(third.err() == courier::errc::too_many_contexts);

    // Closing a child answers its calls in flight first, then the close; the parent goes on.
    std::promise<courier::result<std::int32_t>> slow;
    a->call(courier::token("SLOW"), {}, 5s)
        .then(
            [&](const courier::wire::items_ref& r) {
              auto items = r.items();
              auto v = items.read<std::int32_t>();
              slow.set_value(v ? courier::result<std::int32_t>(*v)
                               : courier::result<std::int32_t>(courier::error(courier::errc::protocol_error)));
            },
            [&](const courier::error& e) { slow.set_value(e); });
    auto closed = a->close_wait(5s);
    INFO((closed ? std::string("closed") : closed.err().describe()));
    REQUIRE(closed);
    auto s = slow.get_future();
    REQUIRE(s.wait_for(1s) == std::future_status::ready);  // answered before the close completed
    auto sv = s.get();
    REQUIRE(sv);
    CHECK(*sv == 7);
    auto after = a->call_wait(courier::token("CNT_"), {}, 5s);
    REQUIRE_FALSE(after);
    CHECK(after.err() == courier::errc::no_such_context);
    CHECK(count(*b) == 2);  // the other child lives on
    // Its slot is free again.
    auto again = c.parent.open_child("again");
    REQUIRE(again);
    CHECK(count(*again) == 1);
    REQUIRE(c.parent.call_wait(courier::token("HELO"), net::args(std::string_view("x")), 5s));
  });
}

TEST_CASE("closing the parent closes the connection and its children", "[net][contexts][children]") {
  courier_test::watchdog wd("parent close", 30s);
  each_transport("ctxparent", [](const endpoint& at) {
    dynamic_server srv(at);
    client c(srv.where);
    auto kid = c.parent.open_child("kid");
    REQUIRE(kid);
    REQUIRE(kid->call_wait(courier::token("CNT_"), {}, 5s));
    auto closed = c.parent.close_wait(5s);
    INFO((closed ? std::string("closed") : closed.err().describe()));
    CHECK(closed);
    auto later = kid->call_wait(courier::token("CNT_"), {}, 2s);
    REQUIRE_FALSE(later);
    CHECK(settles([&] { return srv.node.connections() == 0; }, 5s));
  });
}

TEST_CASE("calls both ways: a server's service calls its client's service and answers with its reply",
          "[net][contexts][both-ways]") {
  courier_test::watchdog wd("both ways", 60s);
  each_transport("ctxback", [](const endpoint& at) {
    dynamic_server srv(at);
    client c(srv.where, client_services("alice"));
    auto r = c.parent.call_wait(courier::token("ASKC"), {}, 5s);
    INFO((r ? std::string("reply") : r.err().describe()));
    REQUIRE(r);
    CHECK(string_of(*r) == "the client says alice");
    // In a child: the server calls the services the client registered for that child.
    auto kid = c.parent.open_child("kid", {}, client_services("bob, in the child"));
    REQUIRE(kid);
    auto k = kid->call_wait(courier::token("ASKC"), {}, 5s);
    INFO((k ? std::string("reply") : k.err().describe()));
    REQUIRE(k);
    CHECK(string_of(*k) == "bob, in the child");
    // A client that serves nothing: the server's call back fails, and so does the call, with the reason.
    client plain(srv.where);
    auto none = plain.parent.call_wait(courier::token("ASKC"), {}, 5s);
    REQUIRE_FALSE(none);
    CHECK(none.err() == courier::errc::no_such_service);
  });
}

TEST_CASE("many calls in flight on parent and children from several threads are each answered once",
          "[net][contexts]") {
  courier_test::watchdog wd("context load", 60s);
  dynamic_server srv(uds_at("ctxload"), 16);
  client c(srv.where);
  std::vector<net::context_ref> kids;
  for (int i = 0; i < 4; ++i) {
    auto k = c.parent.open_child("k" + std::to_string(i));
    REQUIRE(k);
    kids.push_back(*k);
  }
  std::atomic<int> good{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        auto r = kids[static_cast<std::size_t>(t)].call_wait(courier::token("CNT_"), {}, 5s);
        auto items = r ? r->items() : courier::wire::reader{};
        auto v = r ? items.read<std::int64_t>() : courier::wire::result<std::int64_t>(courier::wire::error{});
        (r && v && *v == i + 1 ? good : bad).fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(bad.load() == 0);
  CHECK(good.load() == 1200);
}

TEST_CASE("a child context opened from the server's side, with the client's services in it",
          "[net][contexts][children]") {
  courier_test::watchdog wd("server-side children", 60s);
  each_transport("ctxserverkids", [](const endpoint& at) {
    dynamic_server srv(at);
    net::connection_config cfg;
    cfg.max_child_contexts = 4;
    courier::system sys;
    net::node node{sys};
    auto parent = node.connect(srv.where, cfg, client_services_with_children("carol"));
    REQUIRE(parent);
    for (int round = 0; round < 3; ++round) {  // opened and closed again: the id's slot frees up
      auto r = parent->call_wait(courier::token("KIDS"), {}, 5s);
      INFO((r ? std::string("reply") : r.err().describe()));
      REQUIRE(r);
      auto items = r->items();
      auto said = items.read<std::string_view>();
      auto id = items.read<std::uint64_t>();
      REQUIRE(said);
      CHECK(*said == "the client's child 'from the server'");
      REQUIRE(id);
      CHECK(*id % 2 == 0);  // the accepting side's ids are even
    }
    // A client that takes no children (no factory, no limit announced): the open is refused.
    client plain(srv.where, client_services("dave"));
    auto refused = plain.parent.call_wait(courier::token("KIDS"), {}, 5s);
    REQUIRE_FALSE(refused);
    CHECK(refused.err() == courier::errc::too_many_contexts);
  });
}

TEST_CASE("child contexts behave the same over a connection and in this process", "[net][contexts][children][local]") {
  courier_test::watchdog wd("children on every path", 60s);
  each_path("ctxsame", [](dynamic_server&, const net::context_ref& parent, bool) {
    auto a = parent.open_child("first");
    INFO((a ? std::string("opened") : a.err().describe()));
    REQUIRE(a);
    CHECK(a->id() % 2 == 1);
    auto odd = parent.open_child("x", courier::token("ODD_"));
    REQUIRE_FALSE(odd);
    CHECK(odd.err() == courier::errc::no_such_service);
    auto b = parent.open_child("second");
    REQUIRE(b);
    CHECK(count(*a) == 1);
    CHECK(count(*a) == 2);
    CHECK(count(*b) == 1);
    auto name = b->call_wait(courier::token("NAME"), {}, 5s);
    REQUIRE(name);
    CHECK(string_of(*name) == "second");
    auto parents = a->call_wait(courier::token("HELO"), net::args(std::string_view("x")), 5s);
    REQUIRE_FALSE(parents);
    CHECK(parents.err() == courier::errc::no_such_service);
    // A child's failing handler fails its call only: the child and its parent go on.
    auto boom = a->call_wait(courier::token("BOOM"), {}, 5s);
    REQUIRE_FALSE(boom);
    CHECK(boom.err() == courier::errc::handler_failed);
    CHECK(boom.err().text.find("the child's handler failed") != std::string::npos);
    CHECK(count(*a) == 3);
    REQUIRE(parent.call_wait(courier::token("HELO"), net::args(std::string_view("still")), 5s));
    auto slow = a->call_wait(courier::token("SLOW"), {}, 5s);  // deferred, answered from another thread
    REQUIRE(slow);
    auto items = slow->items();
    CHECK(*items.read<std::int32_t>() == 7);
    REQUIRE(a->close_wait(5s));
    auto after = a->call_wait(courier::token("CNT_"), {}, 5s);
    REQUIRE_FALSE(after);
    CHECK(after.err() == courier::errc::no_such_context);
    auto again = a->close_wait(5s);
    REQUIRE_FALSE(again);
    CHECK(again.err() == courier::errc::no_such_context);
    CHECK(count(*b) == 2);
  });
}

TEST_CASE("a context actor served over connections: one actor's state for every client, local and remote; calls back",
          "[net][contexts][actor]") {
  courier_test::watchdog wd("context actor", 60s);
  courier::system sys;  // default workers: several connection turns at once, one context actor
  net::node node{sys};
  auto table = std::make_shared<net::service_table>();
  auto total = std::make_shared<std::int64_t>(0);  // touched only in the context actor's turns
  table->add(courier::token("ADD_"), [total](net::incoming& call) {
    auto by = call.read<std::int64_t>();
    if (by) call.reply().add(*total += *by);
  });
  table->add(courier::token("TOTL"), [total](net::incoming& call) { call.reply().add(*total); });
  table->add(courier::token("ASKC"), [](net::incoming& call) {
    const net::context_ref caller = call.peer();
    if (!caller) return call.fail(courier::error(courier::errc::no_such_service, "a local caller serves nothing"));
    auto answer = std::make_shared<net::deferred_reply>(call.defer());
    caller.call(courier::token("NAME"), {}, 5s)
        .then(
            [answer](const courier::wire::items_ref& r) {
              answer->deliver([&](courier::wire::frame_writer& w) { w.add(string_of(r)); });
            },
            [answer](const courier::error& e) { answer->fail(e); });
  });
  auto context = net::serve_locally(sys, table);
  std::vector<endpoint> places{uds_at("ctxactor"), tcp_at()};
  for (auto& at : places) {
    auto s = node.serve_on(context, at);
    REQUIRE(s);
    if (at.kind == courier::net::transport_kind::tcp) at.port = s->port;
  }
  constexpr int per_thread = 200;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      // No Catch macros on these threads (Catch is not thread-safe): failures are counted.
      courier::system client_sys;
      net::node client_node{client_sys};
      auto parent = client_node.connect(places[static_cast<std::size_t>(t % 2)]);
      if (!parent) {
        bad.fetch_add(per_thread);
        return;
      }
      for (int i = 0; i < per_thread; ++i)
        if (!parent->call_wait(courier::token("ADD_"), net::args(std::int64_t{1}), 5s)) bad.fetch_add(1);
    });
  }
  for (int i = 0; i < per_thread; ++i)  // and locally, on the same actor
    if (!context.call_wait(courier::token("ADD_"), net::args(std::int64_t{1}), 5s)) bad.fetch_add(1);
  for (auto& th : threads) th.join();
  CHECK(bad.load() == 0);
  auto sum = context.call_wait(courier::token("TOTL"), {}, 5s);
  REQUIRE(sum);
  auto items = sum->items();
  CHECK(*items.read<std::int64_t>() == 5 * per_thread);  // no update lost: one actor, one turn at a time

  // A handler of the context actor calls back the remote client that called it.
  client named(places[0], client_services("erin"));
  auto back = named.parent.call_wait(courier::token("ASKC"), {}, 5s);
  INFO((back ? std::string("reply") : back.err().describe()));
  REQUIRE(back);
  CHECK(string_of(*back) == "erin");
  auto local = context.call_wait(courier::token("ASKC"), {}, 5s);
  REQUIRE_FALSE(local);
  CHECK(local.err() == courier::errc::no_such_service);
  // Reflection goes to the actor too.
  auto listed = named.parent.call_wait(courier::token("$SVC"), {}, 5s);
  REQUIRE(listed);
  CHECK_FALSE(listed->empty());
}

TEST_CASE("a typed ref's connection called by token too: context_of gives its parent context and children",
          "[net][contexts][typed]") {
  courier_test::watchdog wd("context of a typed ref", 30s);
  each_transport("ctxof", [](const endpoint& at) {
    server srv(at, courier::net::connection_config{});  // serves peers::api as typed messages
    good_client typed(srv.where);
    REQUIRE(typed.works());
    const net::context_ref ctx = typed.net.context_of(typed.ref);
    REQUIRE(ctx);
    CHECK(ctx.id() == 0);
    auto sum = ctx.call_wait(courier::token("ADD_"), net::args(std::int32_t{2}, std::int32_t{3}), 5s);
    REQUIRE(sum);
    auto items = sum->items();
    CHECK(*items.read<std::int32_t>() == 5);
    CHECK(typed.works(7, 8));  // both views of the one connection, in turn
    // Reflection read from C++: the typed services, described from their message structs.
    auto listed = ctx.services(5s);
    INFO((listed ? std::string("listed") : listed.err().describe()));
    REQUIRE(listed);
    REQUIRE(listed->size() == 3);
    CHECK((*listed)[0].token == courier::token("ADD_"));
    CHECK((*listed)[0].returns);
    CHECK((*listed)[0].arguments == "(int32, int32)");  // fields() without names
    CHECK((*listed)[0].result == "int32");
    // Not one of this node's connections: empty.
    courier::system other;
    courier::net::node elsewhere{other};
    CHECK_FALSE(elsewhere.context_of(typed.ref));
  });
}

TEST_CASE("children of a context actor each run in an actor of their own: one blocked child holds up no other",
          "[net][contexts][actor][children]") {
  courier_test::watchdog wd("child actors", 60s);
  courier::system sys;
  net::node node{sys};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::mutex made_mutex;
  std::vector<std::weak_ptr<const net::service_table>> made;
  auto children = std::make_shared<net::service_table>();
  children->children([&](courier::token, std::string_view) -> std::shared_ptr<const net::service_table> {
    auto child = std::make_shared<net::service_table>();
    auto counter = std::make_shared<std::int64_t>(0);
    child->add(courier::token("CNT_"), [counter](net::incoming& call) { call.reply().add(++*counter); });
    // HOLD blocks its worker until the test lets it go: only this child's actor waits meanwhile.
    child->add(courier::token("HOLD"), [released](net::incoming& call) {
      released.wait();
      call.reply().add(std::string_view("let go"));
    });
    std::lock_guard lock(made_mutex);
    made.push_back(child);
    return child;
  });
  auto parent_table = std::make_shared<net::service_table>();
  parent_table->add(courier::token("PING"), [](net::incoming& call) { call.reply().add(true); });
  auto context = net::serve_locally(sys, parent_table);
  net::connection_config cfg;
  cfg.max_child_contexts = 8;
  auto at = uds_at("ctxchildactors");
  REQUIRE(node.serve_on(context, at, cfg, children));
  client c(at);
  auto a = c.parent.open_child("a");
  auto b = c.parent.open_child("b");
  REQUIRE(a);
  REQUIRE(b);
  std::promise<std::string> held;
  a->call(courier::token("HOLD"), {}, 10s)
      .then([&](const courier::wire::items_ref& r) { held.set_value(string_of(r)); },
            [&](const courier::error& e) { held.set_value(e.describe()); });
  // While a's handler blocks, b and the parent answer: each child is an actor of its own, and the
  // connection's turn never ran a's handler.
  auto counted = b->call_wait(courier::token("CNT_"), {}, 5s);
  INFO((counted ? std::string("answered") : counted.err().describe()));
  CHECK(counted);
  CHECK(c.parent.call_wait(courier::token("PING"), {}, 5s));
  release.set_value();
  auto h = held.get_future();
  REQUIRE(h.wait_for(5s) == std::future_status::ready);
  CHECK(h.get() == "let go");
  // A closed child's actor stops and lets its table go.
  REQUIRE(a->close_wait(5s));
  CHECK(settles(
      [&] {
        std::lock_guard lock(made_mutex);
        return made.size() == 2 && made[0].expired() && !made[1].expired();
      },
      5s));
  REQUIRE(b->call_wait(courier::token("CNT_"), {}, 5s));
}

TEST_CASE(
    "a client opens and closes 10,000 child contexts through context_ref: no descriptor, thread or memory left behind",
    "[net][contexts][children][mass]") {
  courier_test::watchdog wd("10,000 children", 180s);
#if defined(COURIER_TEST_TSAN) || defined(__SANITIZE_ADDRESS__)
  constexpr int cycles = 1'000;  // the sanitizers slow each round trip; the full count runs in Release
#else
  constexpr int cycles = 10'000;
#endif
  // Both kinds of server child: on the connection's turn (a table), and with an actor of its own.
  for (const bool actors : {false, true}) {
    INFO((actors ? "children with actors of their own" : "children on the connection's turn"));
    dynamic_server srv(std::nullopt);
    net::connection_config cfg;
    cfg.max_child_contexts = 2;  // a child that is not freed would refuse the rest
    auto at = uds_at(actors ? "ctxmassactors" : "ctxmass");
    net::context_ref context;
    if (actors) {
      context = net::serve_locally(srv.sys, srv.services);
      REQUIRE(srv.node.serve_on(context, at, cfg, srv.services));
    } else {
      REQUIRE(srv.node.serve(srv.services, at, cfg));
    }
    client c(at);
    auto round = [&](int i) {
      std::string name = "n";
      name += std::to_string(i);  // (GCC 12 warns falsely of overlap on "n" + std::string)
      auto child = c.parent.open_child(name);
      if (!child) return false;
      const bool counted = count(*child) == 1;
      return child->close_wait(5s) && counted;
    };
    for (int i = 0; i < 100; ++i) REQUIRE(round(i));  // warm: pool slots, blocks, tables
    const int fds = courier_test::open_descriptors();
    const std::string fds_before = courier_test::descriptor_list();
    const int threads = courier_test::thread_count();
    const auto chunks = courier::pool::stats().chunks_allocated;
    int failures = 0;
    for (int i = 0; i < cycles; ++i) failures += round(i) ? 0 : 1;
    CHECK(failures == 0);
    INFO("descriptors before:\n" << fds_before << "after:\n" << courier_test::descriptor_list());
    CHECK(courier_test::open_descriptors() == fds);
    CHECK(courier_test::thread_count() == threads);
    // Pool memory: what one child's records take, not what 10,000 would.
    CHECK(courier::pool::stats().chunks_allocated - chunks <= 4);
    CHECK(c.parent.call_wait(courier::token("HELO"), net::args(std::string_view("still")), 5s));
  }
}
