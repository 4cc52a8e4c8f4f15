// Stopping: requests to a stopped actor fail at once; stop() inside a handler discards what is
// queued and runs on_stop.
#include "courier/actor.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "courier/system.hpp"
#include "expect.hpp"
#include "fixtures.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;
using courier_test::add;
using courier_test::get;
using courier_test::quit;
using courier_test::probe_state;
using courier_test::counter;

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

  courier_test::expect<add>(sys).to(c);   // add
  CHECK(sys.live_actors() == 1);
  courier_test::expect<quit>(sys).to(c);  // quit: stops, discarding what is queued
  CHECK(sys.live_actors() == 0);
  CHECK_FALSE(failed.has_value());        // the request's failure is queued on the host lane
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

