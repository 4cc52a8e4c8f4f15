// Dynamic services (courier/net/services.hpp): handlers registered by token read typed items and
// write the reply, over a real connection; a typed client calls them through message structs of
// the same tokens, as it calls typed services.
#include "courier/net/services.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "courier/fields.hpp"
#include "courier/net/detail/context_router.hpp"
#include "courier/net/local_context.hpp"
#include "courier/net/node.hpp"
#include "courier/system.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;
namespace net = courier::net;
namespace wire = courier::wire;

namespace {

// The client's view: message structs with the services' tokens.
struct hello {
  static constexpr courier::token token{"HELO"};
  std::string name;
  COURIER_FIELDS(name);
};
struct hello_wrong {  // HELO with an int32 where a string belongs
  static constexpr courier::token token{"HELO"};
  std::int32_t name = 0;
  COURIER_FIELDS(name);
};
struct hello_extra {  // HELO with one item too many
  static constexpr courier::token token{"HELO"};
  std::string name;
  std::int32_t extra = 0;
  COURIER_FIELDS(name, extra);
};
struct sum {
  static constexpr courier::token token{"SUM_"};
  std::vector<std::int32_t> values;
  COURIER_FIELDS(values);
};
struct later {
  static constexpr courier::token token{"LATE"};
  std::int32_t delay_ms = 0, value = 0;
  COURIER_FIELDS(delay_ms, value);
};
struct forgotten {
  static constexpr courier::token token{"FRGT"};
  COURIER_FIELDS();
};
struct thrower {
  static constexpr courier::token token{"THRW"};
  COURIER_FIELDS();
};
struct bump {
  static constexpr courier::token token{"BUMP"};
  COURIER_FIELDS();
};
struct count {
  static constexpr courier::token token{"CNT_"};
  COURIER_FIELDS();
};
struct anything {
  static constexpr courier::token token{"WHAT"};
  COURIER_FIELDS();
};

using api = courier::interface<std::string(hello), std::int64_t(sum), std::int32_t(later), std::int32_t(forgotten),
                               courier::unit(thrower), void(bump), std::int32_t(count), std::string(anything)>;
// Views of HELO that get its arguments wrong (an interface names each token once).
using wrong_api = courier::interface<std::string(hello_wrong)>;
using extra_api = courier::interface<std::string(hello_extra)>;

// The threads that answer deferred calls, joined before the system goes (an answer touches it).
struct answerers {
  std::mutex mutex;
  std::vector<std::thread> threads;
  template <class F>
  void start(F&& f) {
    std::lock_guard lock(mutex);
    threads.emplace_back(std::forward<F>(f));
  }
  ~answerers() {
    for (auto& t : threads) t.join();
  }
};

std::shared_ptr<net::service_table> make_services(std::atomic<int>& bumps, answerers& later_threads) {
  auto t = std::make_shared<net::service_table>();
  t->add(courier::token("HELO"),
         [](net::incoming& call) {
           auto name = call.read<std::string_view>();
           if (name) call.reply().add("hello " + std::string(*name));
         },
         {"(string name)", "string", "says hello"});
  t->add(courier::token("SUM_"),
         [](net::incoming& call) {
           wire::reader& items = call.items();
           std::int64_t total = 0;
           if (!items.begin_list())
             return call.fail(courier::error(errc::invalid_argument, "SUM_ takes a list of int32"));
           while (items.peek() == wire::item_type::int32) total += *items.read<std::int32_t>();
           if (!items.end_list())
             return call.fail(courier::error(errc::invalid_argument, "SUM_ takes a list of int32"));
           call.reply().add(total);
         },
         {"(list of int32 values)", "int64", ""});
  t->add(courier::token("LATE"), [&later_threads](net::incoming& call) {
    const auto delay = call.read<std::int32_t>();
    const auto value = call.read<std::int32_t>();
    if (!delay || !value) return;
    later_threads.start([answer = call.defer(), ms = *delay, v = *value]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      answer.deliver([v](wire::frame_writer& w) { w.add(v); });
    });
  });
  t->add(courier::token("FRGT"), [](net::incoming& call) { (void)call.defer(); });  // dropped at once
  t->add(courier::token("THRW"), [](net::incoming&) { throw std::runtime_error("on purpose"); });
  t->add(courier::token("BUMP"), [&bumps](net::incoming&) { bumps.fetch_add(1); }, {"()", "()", "", false});
  t->add(courier::token("CNT_"), [&bumps](net::incoming& call) { call.reply().add(std::int32_t{bumps.load()}); });
  t->otherwise([](net::incoming& call) { call.reply().add(std::string("no ") + std::string(call.token().view())); });
  return t;
}

net::endpoint uds_at(const char* tag) {
  net::endpoint e;
  e.kind = net::transport_kind::uds;
  e.file = "/tmp/courier-services-" + std::to_string(::getpid()) + "-" + tag + ".sock";
  return e;
}

struct served {
  std::atomic<int> bumps{0};
  courier::system sys;
  net::node node{sys};
  answerers later_threads;  // destroyed first: joined while the system still runs
  net::endpoint where;
  explicit served(const char* tag) : where(uds_at(tag)) {
    REQUIRE(node.serve(make_services(bumps, later_threads), where));
  }
};

template <class I = api>
struct client {
  courier::system sys;
  net::node node{sys};
  courier::actor_ref<I> ref;
  explicit client(const net::endpoint& where) {
    auto r = node.template connect<I>(where);
    REQUIRE(r);
    ref = *r;
  }
};

}  // namespace

TEST_CASE("a dynamic service reads its arguments and writes its reply; a typed client calls it", "[net][services]") {
  courier_test::watchdog wd("dynamic hello", 30s);
  served s("hello");
  client<> c(s.where);
  auto greeting = c.ref.ask(hello{"courier"}, 5s);
  REQUIRE(greeting);
  CHECK(*greeting == "hello courier");
  auto total = c.ref.ask(sum{{1, 2, 3, 40}}, 5s);
  REQUIRE(total);
  CHECK(*total == 46);
}

TEST_CASE("a wrong argument fails the call, naming the expected and the actual item type and the position",
          "[net][services]") {
  courier_test::watchdog wd("dynamic mismatch", 30s);
  served s("mismatch");
  client<> c(s.where);
  client<wrong_api> w(s.where);
  client<extra_api> x(s.where);
  auto wrong = w.ref.ask(hello_wrong{7}, 5s);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.err().code == wire::make_error_code(wire::errc::type_mismatch));
  INFO(wrong.err().text);
  CHECK(wrong.err().text.find("HELO: argument 1") != std::string::npos);
  CHECK(wrong.err().text.find("expected string") != std::string::npos);
  CHECK(wrong.err().text.find("int32") != std::string::npos);
  auto extra = x.ref.ask(hello_extra{"x", 1}, 5s);
  REQUIRE_FALSE(extra);
  CHECK(extra.err().code == wire::make_error_code(wire::errc::trailing_items));
  // The connection goes on.
  auto fine = c.ref.ask(hello{"again"}, 5s);
  REQUIRE(fine);
  CHECK(*fine == "hello again");
}

TEST_CASE("a dynamic service may defer its reply; a deferred reply dropped unanswered is a broken promise",
          "[net][services]") {
  courier_test::watchdog wd("dynamic defer", 30s);
  served s("defer");
  client<> c(s.where);
  auto late = c.ref.ask(later{50, 9}, 5s);
  REQUIRE(late);
  CHECK(*late == 9);
  auto dropped = c.ref.ask(forgotten{}, 5s);
  REQUIRE_FALSE(dropped);
  CHECK(dropped.err() == errc::broken_promise);
}

TEST_CASE(
    "a throwing handler fails its call with handler_failed; sends run the service; the catch-all answers the rest",
    "[net][services]") {
  courier_test::watchdog wd("dynamic misc", 30s);
  served s("misc");
  client<> c(s.where);
  auto thrown = c.ref.ask(thrower{}, 5s);
  REQUIRE_FALSE(thrown);
  CHECK(thrown.err() == errc::handler_failed);
  CHECK(thrown.err().text.find("on purpose") != std::string::npos);
  for (int i = 0; i < 3; ++i) CHECK(c.ref.send(bump{}));
  auto counted = c.ref.ask(count{}, 5s);  // behind the sends on the same connection
  REQUIRE(counted);
  CHECK(*counted == 3);
  auto other = c.ref.ask(anything{}, 5s);
  REQUIRE(other);
  CHECK(*other == "no WHAT");
}

TEST_CASE("many deferred and immediate dynamic calls at once are each answered once", "[net][services]") {
  courier_test::watchdog wd("dynamic many", 60s);
  served s("many");
  client<> c(s.where);
  constexpr int calls = 500;
  std::atomic<int> right{0}, wrong{0}, done{0};
  for (int i = 0; i < calls; ++i) {
    c.ref.request(later{i % 3, i}, 10s)
        .then(
            [&, i](std::int32_t v) {
              (v == i ? right : wrong).fetch_add(1);
              done.fetch_add(1);
            },
            [&](const courier::error&) {
              wrong.fetch_add(1);
              done.fetch_add(1);
            });
    c.ref.request(hello{std::to_string(i)}, 10s)
        .then(
            [&, i](const std::string& v) {
              (v == "hello " + std::to_string(i) ? right : wrong).fetch_add(1);
              done.fetch_add(1);
            },
            [&](const courier::error&) {
              wrong.fetch_add(1);
              done.fetch_add(1);
            });
  }
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (done.load() < 2 * calls && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  CHECK(right.load() == 2 * calls);
  CHECK(wrong.load() == 0);
}

namespace {

// Typed services registered in a table (service_table::on), beside a dynamic one.
struct add {
  static constexpr courier::token token{"ADD_"};
  static constexpr std::string_view courier_description = "a + b";
  std::int32_t a = 0, b = 0;
  COURIER_FIELDS(a, b);
};
struct divide {
  static constexpr courier::token token{"DIV_"};
  std::int32_t a = 0, b = 0;
  COURIER_FIELDS(a, b);
};
struct note {
  static constexpr courier::token token{"NOTE"};
  std::int32_t amount = 0;
  COURIER_FIELDS(amount);
};
struct noted {
  static constexpr courier::token token{"NTED"};
  COURIER_FIELDS();
};
using typed_api =
    courier::interface<std::int32_t(add), std::int32_t(divide), void(note), std::int32_t(noted), std::string(hello)>;

std::shared_ptr<net::service_table> mixed_services(std::atomic<int>& notes) {
  auto t = std::make_shared<net::service_table>();
  t->on([](const add& m) { return m.a + m.b; });
  t->on([](const divide& m) -> courier::result<std::int32_t> {
    if (m.b == 0) return courier::error(errc::invalid_argument, "divide by zero");
    return m.a / m.b;
  });
  t->on([&notes](const note& m) { notes.fetch_add(m.amount); });
  t->on([&notes](const noted&) { return std::int32_t{notes.load()}; });
  t->add(courier::token("HELO"), [](net::incoming& call) {
    auto name = call.read<std::string_view>();
    if (name) call.reply().add("hello " + std::string(*name));
  });
  return t;
}

// The same checks through any context_ref (a remote parent, a local context): typed services by
// token, a wrong argument, reflection.
void check_typed_by_token(const net::context_ref& ctx) {
  auto sum = ctx.call_wait(courier::token("ADD_"), net::args(std::int32_t{2}, std::int32_t{40}), 5s);
  REQUIRE(sum);
  CHECK(sum->items().read<std::int32_t>().value_or(-1) == 42);
  auto by_zero = ctx.call_wait(courier::token("DIV_"), net::args(std::int32_t{1}, std::int32_t{0}), 5s);
  REQUIRE_FALSE(by_zero);
  CHECK(by_zero.err() == errc::invalid_argument);
  CHECK(by_zero.err().text == "divide by zero");
  auto wrong = ctx.call_wait(courier::token("ADD_"), net::args(std::int32_t{2}, std::string_view("x")), 5s);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.err().code == wire::make_error_code(wire::errc::type_mismatch));
  INFO(wrong.err().text);
  CHECK(wrong.err().text.find("argument 2") != std::string::npos);
  CHECK(wrong.err().text.find("int32") != std::string::npos);
  auto short_of_one = ctx.call_wait(courier::token("ADD_"), net::args(std::int32_t{2}), 5s);
  REQUIRE_FALSE(short_of_one);
  CHECK(short_of_one.err().code == wire::make_error_code(wire::errc::no_more_items));
  auto extra = ctx.call_wait(courier::token("ADD_"), net::args(std::int32_t{2}, std::int32_t{3}, true), 5s);
  REQUIRE_FALSE(extra);
  CHECK(extra.err().code == wire::make_error_code(wire::errc::trailing_items));
  CHECK(ctx.send(courier::token("NOTE"), net::args(std::int32_t{5})));
  auto seen = ctx.call_wait(courier::token("NTED"), {}, 5s);  // behind the send, in order
  REQUIRE(seen);
  CHECK(seen->items().read<std::int32_t>().value_or(-1) == 5);

  auto listed = ctx.services(5s);
  REQUIRE(listed);
  bool add_listed = false, note_listed = false, hello_listed = false;
  for (const auto& s : *listed) {
    if (s.token == courier::token("ADD_")) {
      add_listed = true;
      CHECK(s.returns);
      CHECK(s.arguments == "(int32 a, int32 b)");
      CHECK(s.result == "int32");
      CHECK(s.description == "a + b");
    } else if (s.token == courier::token("NOTE")) {
      note_listed = true;
      CHECK_FALSE(s.returns);
      CHECK(s.arguments == "(int32 amount)");
    } else if (s.token == courier::token("HELO")) {
      hello_listed = true;
    }
  }
  CHECK(add_listed);
  CHECK(note_listed);
  CHECK(hello_listed);
}

}  // namespace

TEST_CASE("typed services in a table: a typed client and a call by token reach the same handler, remotely and locally",
          "[net][services][typed]") {
  courier_test::watchdog wd("typed services in a table", 30s);
  std::atomic<int> notes{0};
  courier::system sys;
  net::node node{sys};
  const auto services = mixed_services(notes);
  const auto where = uds_at("typed");
  REQUIRE(node.serve(services, where));

  SECTION("a typed client: the table is the server of its interface") {
    client<typed_api> c(where);
    auto sum = c.ref.ask(add{20, 22}, 5s);
    REQUIRE(sum);
    CHECK(*sum == 42);
    auto by_zero = c.ref.ask(divide{1, 0}, 5s);
    REQUIRE_FALSE(by_zero);
    CHECK(by_zero.err() == errc::invalid_argument);
    CHECK(by_zero.err().text == "divide by zero");
    CHECK(c.ref.send(note{3}));
    CHECK(c.ref.send(note{4}));
    auto seen = c.ref.ask(noted{}, 5s);
    REQUIRE(seen);
    CHECK(*seen == 7);
    auto greeting = c.ref.ask(hello{"typed"}, 5s);  // the dynamic service of the same table
    REQUIRE(greeting);
    CHECK(*greeting == "hello typed");
  }
  SECTION("by token, over uds") {
    courier::system client_sys;
    net::node client_node{client_sys};
    auto ctx = client_node.connect(where);
    REQUIRE(ctx);
    check_typed_by_token(*ctx);
  }
  SECTION("by token, locally") { check_typed_by_token(net::serve_locally(sys, services)); }
}

TEST_CASE("the router finds each context's own handler again after its tables change", "[net][services]") {
  // The router keeps what it found last; a table replaced, a child closed or another opened in
  // its place must not be answered from it.
  const auto table_of = [](int n) {
    auto t = std::make_shared<net::service_table>();
    t->add(courier::token("WHO_"), [n](net::incoming& call) { call.reply().add(std::int32_t{n}); });
    return t;
  };
  auto parent = table_of(1);
  net::detail::context_router router(parent);
  const courier::token who("WHO_");
  const net::service_handler* first = router.find(0, who);
  REQUIRE(first == parent->find(who));
  CHECK(router.find(0, who) == first);
  CHECK(router.find(0, courier::token("NONE")) == nullptr);

  auto second = table_of(2);
  router.serve_parent(second);
  CHECK(router.find(0, who) == second->find(who));

  auto child_a = table_of(3);
  router.add_child(5, child_a);
  CHECK(router.find(5, who) == child_a->find(who));
  CHECK(router.find(0, who) == second->find(who));
  CHECK(router.remove_child(5));
  CHECK(router.find(5, who) == nullptr);
  auto child_b = table_of(4);
  router.add_child(5, child_b);
  CHECK(router.find(5, who) == child_b->find(who));
  router.add_child(5, child_a);  // the same id given another table
  CHECK(router.find(5, who) == child_a->find(who));
  router.clear();
  CHECK(router.find(0, who) == nullptr);
  CHECK(router.find(5, who) == nullptr);
}
