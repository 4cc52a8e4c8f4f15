// One connection that calls and serves: each end calls the other's services over the same
// transport connection, and a service calls back into its caller while it handles a call.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <optional>

#include "courier/actor.hpp"
#include "courier/fields.hpp"
#include "courier/net/node.hpp"
#include "courier/system.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;

namespace {

struct increment {  // served by the initiator's side
  static constexpr courier::token token{"INC_"};
  std::int32_t n = 0;
  COURIER_FIELDS(n);
};
using initiator_api = courier::interface<std::int32_t(increment)>;

struct times_ten {  // served by the acceptor's side
  static constexpr courier::token token{"TEN_"};
  std::int32_t n = 0;
  COURIER_FIELDS(n);
};
struct ten_of_next {  // the acceptor asks its caller for n + 1, and answers ten times that
  static constexpr courier::token token{"TNX_"};
  std::int32_t n = 0;
  COURIER_FIELDS(n);
};
using acceptor_api = courier::interface<std::int32_t(times_ten), std::int32_t(ten_of_next)>;

class incrementer : public courier::actor<incrementer, increment> {
 public:
  std::int32_t on(const increment& m) { return m.n + 1; }
};

/// Where the acceptor's service reaches its caller: the ref to the connection's outbound half.
struct caller_is {
  courier::actor_ref<initiator_api> caller;
};

class multiplier : public courier::actor<multiplier, times_ten, ten_of_next, caller_is> {
 public:
  std::int32_t on(const times_ten& m) { return m.n * 10; }
  courier::response_promise<std::int32_t> on(const ten_of_next& m) {
    auto answer = make_response_promise<std::int32_t>();
    caller_.request(increment{m.n}, 5s)
        .then([answer](std::int32_t next) mutable { answer.deliver(next * 10); },
              [answer](const courier::error& e) mutable { answer.fail(e); });
    return answer;
  }
  void on(const caller_is& m) { caller_ = m.caller; }

 private:
  courier::actor_ref<initiator_api> caller_;
};

struct linked_pair {
  courier::system sys;
  courier::net::node net{sys};
  courier::actor_ref<acceptor_api> to_acceptor;    // the initiator's outbound half
  courier::actor_ref<initiator_api> to_initiator;  // the acceptor's outbound half

  linked_pair() {
    auto pair = courier::net::socket_pair();
    REQUIRE(pair);
    auto a = net.connect_duplex<acceptor_api>(std::move(pair->first),
                                              courier::actor_ref<initiator_api>(sys.spawn<incrementer>()),
                                              courier::wire::role::initiator);
    REQUIRE(a);
    auto served = sys.spawn<multiplier>();
    auto b = net.connect_duplex<initiator_api>(std::move(pair->second), courier::actor_ref<acceptor_api>(served),
                                               courier::wire::role::acceptor);
    REQUIRE(b);
    served.send(caller_is{*b});
    to_acceptor = *a;
    to_initiator = *b;
  }
};

}  // namespace

TEST_CASE("both ends of one connection call each other's services", "[net][both_ways]") {
  courier_test::watchdog wd("both ways", 30s);
  linked_pair p;
  auto ten = p.to_acceptor.ask(times_ten{4}, 5s);
  REQUIRE(ten);
  CHECK(*ten == 40);
  auto next = p.to_initiator.ask(increment{41}, 5s);
  REQUIRE(next);
  CHECK(*next == 42);
}

TEST_CASE("a service calls back into its caller on the same connection and answers with what it returned",
          "[net][both_ways]") {
  courier_test::watchdog wd("call back", 30s);
  linked_pair p;
  auto answer = p.to_acceptor.ask(ten_of_next{6}, 5s);  // the acceptor asks us for 7, answers 70
  REQUIRE(answer);
  CHECK(*answer == 70);
}

TEST_CASE("calls cross in both directions at once, each answered once", "[net][both_ways]") {
  courier_test::watchdog wd("crossing calls", 60s);
  linked_pair p;
  constexpr int each = 2000;
  std::atomic<int> tens{0}, nexts{0}, wrong{0};
  std::promise<void> all;
  std::atomic<int> left{2 * each};
  auto one_done = [&] {
    if (left.fetch_sub(1) == 1) all.set_value();
  };
  for (int i = 0; i < each; ++i) {
    p.to_acceptor.request(times_ten{i}, 10s)
        .then(
            [&, i](std::int32_t v) {
              (v == i * 10 ? tens : wrong).fetch_add(1);
              one_done();
            },
            [&](const courier::error&) {
              wrong.fetch_add(1);
              one_done();
            });
    p.to_initiator.request(increment{i}, 10s)
        .then(
            [&, i](std::int32_t v) {
              (v == i + 1 ? nexts : wrong).fetch_add(1);
              one_done();
            },
            [&](const courier::error&) {
              wrong.fetch_add(1);
              one_done();
            });
  }
  REQUIRE(all.get_future().wait_for(30s) == std::future_status::ready);
  CHECK(tens.load() == each);
  CHECK(nexts.load() == each);
  CHECK(wrong.load() == 0);
}
