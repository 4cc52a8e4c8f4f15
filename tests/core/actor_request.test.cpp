// Requests from handlers: continuations run later inside the requester; time-outs on the
// requester's clock; blocking ask() from a handler is refused.
#include "courier/actor.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "courier/system.hpp"
#include "expect.hpp"
#include "fixtures.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;
using courier_test::add;
using courier_test::counter;
using courier_test::get;
using courier_test::quit;

namespace {

/// Requests from inside a handler; the continuation runs later in this actor.
struct fetch {
  courier::actor_ref<counter> from;
  courier::timespan timeout = courier::infinite;
};
struct ask_inside {
  courier::actor_ref<counter> target;
};
struct fetch_log {
  std::mutex mutex;
  std::vector<int> values;
  std::vector<courier::error> errors;
  std::vector<bool> ran_in_actor;  // was the continuation run with this actor current?
  std::size_t settled() {
    std::lock_guard lock(mutex);
    return values.size() + errors.size();
  }
};

class requester : public courier::actor<requester, fetch, ask_inside> {
 public:
  explicit requester(fetch_log* log) : log_(log) {}
  void on(const fetch& f) {
    f.from.request(get{}, f.timeout)
        .then(
            [this](int v) {
              std::lock_guard lock(log_->mutex);
              log_->values.push_back(v);
              log_->ran_in_actor.push_back(courier::detail::current_actor == this);
            },
            [this](const courier::error& e) {
              std::lock_guard lock(log_->mutex);
              log_->errors.push_back(e);
              log_->ran_in_actor.push_back(courier::detail::current_actor == this);
            });
  }
  int on(const ask_inside& a) {
    auto r = a.target.ask(get{}, 1s);
    return r.has_value() ? -1 : r.err().code.value();
  }

 private:
  fetch_log* log_;
};

/// Blocks its worker in a handler until the test opens the gate.
struct block {};
class blocker : public courier::actor<blocker, block, get> {
 public:
  explicit blocker(std::atomic<bool>* gate, std::atomic<bool>* entered) : gate_(gate), entered_(entered) {}
  void on(const block&) {
    entered_->store(true);
    while (!gate_->load()) std::this_thread::sleep_for(1ms);
  }
  int on(const get&) { return 7; }

 private:
  std::atomic<bool>* gate_;
  std::atomic<bool>* entered_;
};

/// Opens a gate when it goes out of scope, so a failing REQUIRE cannot leave a worker stuck.
struct gate_opener {
  std::atomic<bool>& gate;
  ~gate_opener() { gate.store(true); }
};

}  // namespace

// ----------------------------------------------------------------------------------------------
// Requests from handlers (deterministic)

TEST_CASE("request from a handler: the reply runs the continuation later, inside the requester",
          "[actor][deterministic]") {
  courier_test::watchdog wd("request from handler");
  fetch_log log;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  auto r = sys.spawn<requester>(&log);
  c.send(add{2, 3});
  r.send(fetch{c});

  courier_test::expect<add>(sys).to(c);    // counter: add
  courier_test::expect<fetch>(sys).to(r);  // requester: fetch, sends the request
  CHECK(log.settled() == 0);
  courier_test::expect<get>(sys).to(c);  // counter: get, replies into the requester's mailbox
  CHECK(log.settled() == 0);
  courier_test::expect<courier_test::system_message>(sys).to(r);  // requester: the reply runs the continuation
  courier_test::expect_nothing(sys);
  REQUIRE(log.values == std::vector<int>{5});
  CHECK(log.errors.empty());
  CHECK(log.ran_in_actor == std::vector<bool>{true});
}

TEST_CASE("request from a handler to a stopped actor: the error continuation runs in the requester",
          "[actor][deterministic]") {
  courier_test::watchdog wd("request from handler to stopped");
  fetch_log log;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  auto r = sys.spawn<requester>(&log);
  c.send(quit{});
  sys.run_until_idle();
  REQUIRE(sys.live_actors() == 1);
  r.send(fetch{c, 10s});
  courier_test::expect<fetch>(sys).to(r);  // fetch: the request is refused, its error queued to the requester
  CHECK(log.settled() == 0);
  courier_test::expect<courier_test::system_message>(sys).to(r);  // the error runs the continuation
  courier_test::expect_nothing(sys);
  REQUIRE(log.errors.size() == 1);
  CHECK(log.errors[0] == errc::actor_stopped);
  CHECK(log.ran_in_actor == std::vector<bool>{true});
  CHECK(log.values.empty());
  CHECK(sys.dead_letters() == 0);  // a refused request is not a dead letter: its requester is told
}

// ----------------------------------------------------------------------------------------------
// Time-outs

TEST_CASE("request time-out from a plain thread: on_error gets request_timeout, a late reply is dropped",
          "[actor][timeout]") {
  courier_test::watchdog wd("request timeout plain thread");
  courier::system sys{courier::config::deterministic()};  // virtual clock: nothing fires by itself
  auto c = sys.spawn<counter>();
  int values = 0;
  int errors = 0;
  courier::error seen;
  c.request(get{}, 50ms)
      .then([&](int) { ++values; },
            [&](const courier::error& e) {
              seen = e;
              ++errors;
            });
  CHECK(sys.advance_time(49ms) == 0);
  CHECK(errors == 0);
  CHECK(sys.advance_time(1ms) == 1);  // exactly at the deadline
  CHECK(errors == 0);                 // queued for the host's loop, not run by the timer
  // The request is still queued too; handling it must not run either continuation again.
  CHECK(sys.run_until_idle() >= 2);
  REQUIRE(errors == 1);
  CHECK(seen == errc::request_timeout);
  CHECK(values == 0);
}

TEST_CASE("request time-out inside an actor: the error continuation runs in the requester", "[actor][timeout]") {
  courier_test::watchdog wd("request timeout in actor");
  fetch_log log;
  courier::system mine{courier::config::deterministic()};
  courier::system never_driven{courier::config::deterministic()};
  auto target = never_driven.spawn<counter>();
  auto r = mine.spawn<requester>(&log);
  r.send(fetch{target, 50ms});
  CHECK(mine.run_until_idle() == 1);
  // The deadline runs on the requester's clock, not the target's.
  CHECK(never_driven.advance_time(1h) == 0);
  CHECK(mine.advance_time(49ms) == 0);
  CHECK(mine.advance_time(1ms) == 1);
  CHECK(log.settled() == 0);  // the time-out arrives as a message: the requester must run
  CHECK(mine.run_until_idle() == 1);
  REQUIRE(log.errors.size() == 1);
  CHECK(log.errors[0] == errc::request_timeout);
  CHECK(log.ran_in_actor == std::vector<bool>{true});
  // Now the target replies; the requester drops the late reply.
  never_driven.run_until_idle();
  mine.run_until_idle();
  CHECK(log.values.empty());
  CHECK(log.settled() == 1);
}

TEST_CASE("ask time-out against a stuck threaded actor", "[actor][timeout][concurrent]") {
  courier_test::watchdog wd("ask timeout");
  std::atomic<bool> gate{false}, entered{false};
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  gate_opener opener{gate};
  auto b = sys.spawn<blocker>(&gate, &entered);
  b.send(block{});
  REQUIRE(courier_test::eventually([&] { return entered.load(); }));
  const auto start = std::chrono::steady_clock::now();
  auto r = b.ask(get{}, 100ms);
  CHECK(std::chrono::steady_clock::now() - start >= 100ms);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.err() == errc::request_timeout);
  gate.store(true);
  // Unblocked, the actor answers again (and drops the reply nobody waits for).
  auto again = b.ask(get{}, 5s);
  REQUIRE(again.has_value());
  CHECK(*again == 7);
}

// ----------------------------------------------------------------------------------------------
// Blocking calls from handlers

TEST_CASE("ask() from inside a handler is refused with would_deadlock", "[actor]") {
  courier_test::watchdog wd("ask inside handler");
  fetch_log log;
  SECTION("deterministic") {
    courier::system sys{courier::config::deterministic()};
    auto c = sys.spawn<counter>();
    auto r = sys.spawn<requester>(&log);
    auto code = r.ask(ask_inside{c}, 1s);
    REQUIRE(code.has_value());
    CHECK(*code == static_cast<int>(errc::would_deadlock));
  }
  SECTION("threaded") {
    courier::config cfg;
    cfg.workers = 2;
    courier::system sys{cfg};
    auto c = sys.spawn<counter>();
    auto r = sys.spawn<requester>(&log);
    auto code = r.ask(ask_inside{c}, 5s);
    REQUIRE(code.has_value());
    CHECK(*code == static_cast<int>(errc::would_deadlock));
  }
}
