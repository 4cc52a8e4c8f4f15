// Stopping: requests to a stopped actor fail at once; stop() inside a handler discards what is
// queued and runs on_stop.
#include "courier/actor.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
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
using courier_test::probe_state;
using courier_test::quit;

namespace {

/// Stops itself with the reason it is sent; answers `get` while it lives.
struct lose_with {
  courier::error reason;
};
class lossy : public courier::actor<lossy, lose_with, get> {
 public:
  void on(const lose_with& m) { stop(m.reason); }
  int on(const get&) { return 1; }
};

bool has(const courier::error& e, const char* text) { return e.text.find(text) != std::string::npos; }

}  // namespace

// ----------------------------------------------------------------------------------------------
// Stopping

TEST_CASE("requests to a stopped actor fail with actor_stopped at once", "[actor][stop]") {
  courier_test::watchdog wd("request to stopped");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.send(quit{});
  sys.run_until_idle();
  REQUIRE(sys.live_actors() == 0);

  std::optional<courier::error> failed;
  bool replied = false;
  c.request(get{}, 10s).then([&](int) { replied = true; }, [&](const courier::error& e) { failed = e; });
  CHECK_FALSE(failed.has_value());  // known at once, but run by the host's loop, not inside then()
  CHECK(sys.run_until_idle() == 1);
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::actor_stopped);
  CHECK_FALSE(replied);

  failed.reset();
  c.request(get{}).then([&](int) { replied = true; }, [&](const courier::error& e) { failed = e; });
  CHECK(sys.run_until_idle() == 1);
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::actor_stopped);

  const auto start = std::chrono::steady_clock::now();
  auto r = c.ask(get{}, 10s);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.err() == errc::actor_stopped);
  CHECK(sys.dead_letters() == 0);  // refused requests are not dead letters: their requesters are told
}

TEST_CASE("stop() inside a handler: queued requests fail with actor_stopped, on_stop runs", "[actor][stop]") {
  courier_test::watchdog wd("self stop");
  probe_state state;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>(&state);
  c.send(add{4, 5});
  c.send(quit{});
  std::optional<courier::error> failed;
  bool replied = false;
  c.request(get{}).then([&](int) { replied = true; }, [&](const courier::error& e) { failed = e; });
  c.send(add{100, 100});

  courier_test::expect<add>(sys).to(c);  // add
  CHECK(sys.live_actors() == 1);
  courier_test::expect<quit>(sys).to(c);  // quit: stops, discarding what is queued
  CHECK(sys.live_actors() == 0);
  CHECK_FALSE(failed.has_value());  // the request's failure is queued on the host lane
  REQUIRE(sys.run_one());
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::actor_stopped);
  CHECK_FALSE(replied);
  CHECK(state.on_stop_called);
  CHECK(state.total_at_stop == 9);
  CHECK(state.events == std::vector<std::string>{"add", "quit"});
  courier_test::expect_nothing(sys);
  CHECK_FALSE(c.send(add{1, 1}));
}

TEST_CASE("requests to an actor that stopped with a reason fail with its code and text", "[actor][stop]") {
  courier_test::watchdog wd("request to stopped with reason");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<lossy>();
  c.send(lose_with{courier::error(errc::connection_lost, "gone")});
  sys.run_until_idle();
  REQUIRE(sys.live_actors() == 0);

  for (auto timeout : {courier::infinite, courier::timespan(10s)}) {
    std::optional<courier::error> failed;
    c.request(get{}, timeout).then([](int) {}, [&](const courier::error& e) { failed = e; });
    sys.run_until_idle();
    REQUIRE(failed.has_value());
    CHECK(*failed == errc::connection_lost);
    CHECK(failed->text == "gone; the request was not sent");
  }
  auto r = c.ask(get{}, 10s);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.err() == errc::connection_lost);
  CHECK(r.err().text == "gone; the request was not sent");
  CHECK(sys.dead_letters() == 0);
}

TEST_CASE("requests queued when an actor stops with a reason fail with its code and text", "[actor][stop]") {
  courier_test::watchdog wd("queued at stop with reason");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<lossy>();
  c.send(lose_with{courier::error(errc::connection_lost, "gone")});
  std::optional<courier::error> failed;
  c.request(get{}).then([](int) {}, [&](const courier::error& e) { failed = e; });  // behind the stop
  sys.run_until_idle();
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::connection_lost);
  CHECK(failed->text == "gone; the message was not handled");
}

TEST_CASE("a reason without text: later requests get its code and its message", "[actor][stop]") {
  courier_test::watchdog wd("request to stopped by request");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.stop();
  sys.run_until_idle();
  auto r = c.ask(get{}, 1s);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.err() == errc::stopped_by_request);
  CHECK(has(r.err(), "; the request was not sent"));
  CHECK(r.err().text.size() > std::string_view("; the request was not sent").size());
}

TEST_CASE("a plain thread's requests to an actor stopped on a worker carry its reason", "[actor][stop][concurrent]") {
  courier_test::watchdog wd("threaded request to stopped with reason");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  for (int round = 0; round < 50; ++round) {
    auto c = sys.spawn<lossy>();
    c.send(lose_with{courier::error(errc::connection_lost, "keepalive: the peer was silent for 30000 ms")});
    // Races the stop: the first asks may be answered; once one fails, every later one carries the reason.
    bool stopped = false;
    for (int i = 0; i < 1000 && !stopped; ++i) {
      auto r = c.ask(get{}, 5s);
      if (r.has_value()) continue;
      stopped = true;
      CHECK(r.err() == errc::connection_lost);
      CHECK(has(r.err(), "keepalive: the peer was silent for 30000 ms"));
    }
    REQUIRE(stopped);
    std::atomic<bool> done{false};
    std::optional<courier::error> failed;
    c.request(get{}).then([](int) {},
                          [&](const courier::error& e) {
                            failed = e;
                            done = true;
                          });
    REQUIRE(courier_test::eventually([&] { return done.load(); }));
    CHECK(*failed == errc::connection_lost);
    CHECK(has(*failed, "; the request was not sent"));
  }
}
