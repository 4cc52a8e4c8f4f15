// Monitors: every watcher hears exactly one `down`, with the exit reason.
#include "courier/actor.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "courier/system.hpp"
#include "fixtures.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;
using courier_test::add;
using courier_test::boom;
using courier_test::counter;
using courier_test::get;
using courier_test::probe_state;
using courier_test::quit;

namespace {

/// Stops itself with the reasons it is sent, in the order given (the first one should win).
struct stop_with {
  std::vector<courier::error> reasons;
};
struct stop_with_code {
  errc reason;
};
class stopper : public courier::actor<stopper, stop_with, stop_with_code, get> {
 public:
  void on(const stop_with& m) {
    for (const auto& r : m.reasons) stop(r);
  }
  void on(const stop_with_code& m) { stop(m.reason); }
  int on(const get&) { return 7; }
};

/// Collects `down` messages for the monitors tests.
struct watch {
  courier::actor_ref<counter> target;
};
struct watch_stopper {
  courier::actor_ref<stopper> target;
};
struct down_log {
  std::mutex mutex;
  std::vector<courier::down> downs;
  std::size_t size() {
    std::lock_guard lock(mutex);
    return downs.size();
  }
};

class watcher : public courier::actor<watcher, watch, watch_stopper, courier::down> {
 public:
  explicit watcher(down_log* log) : log_(log) {}
  void on(const watch& w) { monitor(w.target); }
  void on(const watch_stopper& w) { monitor(w.target); }
  void on(const courier::down& d) {
    std::lock_guard lock(log_->mutex);
    log_->downs.push_back(d);
  }

 private:
  down_log* log_;
};

}  // namespace

static_assert(!counter::accepts<watch>);

// ----------------------------------------------------------------------------------------------
// Monitors

TEST_CASE("monitors: down with no error after a normal stop", "[actor][monitor]") {
  courier_test::watchdog wd("monitor normal");
  down_log log;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  auto w1 = sys.spawn<watcher>(&log);
  auto w2 = sys.spawn<watcher>(&log);
  w1.send(watch{c});
  w2.send(watch{c});
  sys.run_until_idle();
  CHECK(log.size() == 0);
  c.send(quit{});
  sys.run_until_idle();
  REQUIRE(log.size() == 2);
  for (const auto& d : log.downs) {
    CHECK(d.id == c.id());
    CHECK_FALSE(d.reason);
  }
}

TEST_CASE("monitors: down carries handler_failed and the exception text", "[actor][monitor]") {
  courier_test::watchdog wd("monitor exception");
  down_log log;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  auto w = sys.spawn<watcher>(&log);
  w.send(watch{c});
  sys.run_until_idle();
  c.send(boom{"out of cheese"});
  sys.run_until_idle();
  REQUIRE(log.size() == 1);
  CHECK(log.downs[0].id == c.id());
  CHECK(log.downs[0].reason == errc::handler_failed);
  CHECK(log.downs[0].reason.text.find("out of cheese") != std::string::npos);
}

TEST_CASE("monitors: actor_ref::stop_after_queued gives stopped_by_request after the queued messages",
          "[actor][monitor]") {
  courier_test::watchdog wd("monitor stop request");
  down_log log;
  probe_state state;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>(&state);
  auto w = sys.spawn<watcher>(&log);
  w.send(watch{c});
  sys.run_until_idle();
  c.send(add{1, 2});
  c.send(add{3, 4});
  c.stop_after_queued();
  std::optional<courier::error> late;
  c.request(get{}).then([](int) {}, [&](const courier::error& e) { late = e; });
  sys.run_until_idle();
  CHECK(state.total_at_stop == 10);  // both adds ran before the stop request
  REQUIRE(log.size() == 1);
  CHECK(log.downs[0].reason == errc::stopped_by_request);
  REQUIRE(late.has_value());
  CHECK(*late == errc::stopped_by_request);  // queued behind the stop: dropped with its reason
}

TEST_CASE("monitors: stop(error) from a handler gives down its code and text; the first reason wins",
          "[actor][monitor]") {
  courier_test::watchdog wd("monitor stop with text");
  down_log log;
  courier::system sys{courier::config::deterministic()};
  auto s = sys.spawn<stopper>();
  auto w = sys.spawn<watcher>(&log);
  w.send(watch_stopper{s});
  sys.run_until_idle();
  s.send(stop_with{{courier::error(errc::connection_lost, "the peer closed the connection"),
                    courier::error(errc::protocol_error, "too late")}});
  sys.run_until_idle();
  REQUIRE(log.size() == 1);
  CHECK(log.downs[0].id == s.id());
  CHECK(log.downs[0].reason == errc::connection_lost);
  CHECK(log.downs[0].reason.text == "the peer closed the connection");
}

TEST_CASE("monitors: stop(errc) still gives down the code alone", "[actor][monitor]") {
  courier_test::watchdog wd("monitor stop code first");
  down_log log;
  courier::system sys{courier::config::deterministic()};
  auto s = sys.spawn<stopper>();
  auto w = sys.spawn<watcher>(&log);
  w.send(watch_stopper{s});
  sys.run_until_idle();
  s.send(stop_with_code{errc::parent_stopped});
  sys.run_until_idle();
  REQUIRE(log.size() == 1);
  CHECK(log.downs[0].reason == errc::parent_stopped);
  CHECK(log.downs[0].reason.text.empty());
}

TEST_CASE("monitors: stop with an empty error is a normal stop", "[actor][monitor]") {
  courier_test::watchdog wd("monitor stop empty error");
  down_log log;
  courier::system sys{courier::config::deterministic()};
  auto s = sys.spawn<stopper>();
  auto w = sys.spawn<watcher>(&log);
  w.send(watch_stopper{s});
  sys.run_until_idle();
  s.send(stop_with{{courier::error{}}});
  sys.run_until_idle();
  REQUIRE(log.size() == 1);
  CHECK_FALSE(log.downs[0].reason);
}

TEST_CASE("monitors: request_exit(error) gives down its code and text, graceful and urgent", "[actor][monitor]") {
  courier_test::watchdog wd("monitor request_exit with text");
  for (const bool urgent : {false, true}) {
    down_log log;
    courier::system sys{courier::config::deterministic()};
    auto s = sys.spawn<stopper>();
    auto w = sys.spawn<watcher>(&log);
    w.send(watch_stopper{s});
    sys.run_until_idle();
    s.base()->request_exit(courier::error(errc::connection_lost, "keepalive: the peer was silent"), urgent);
    s.base()->request_exit(errc::system_shutdown, urgent);  // second: loses
    sys.run_until_idle();
    INFO("urgent " << urgent);
    REQUIRE(log.size() == 1);
    CHECK(log.downs[0].reason == errc::connection_lost);
    CHECK(log.downs[0].reason.text == "keepalive: the peer was silent");
    s.base()->request_exit(courier::error(errc::protocol_error, "after the stop"), urgent);  // ignored, freed
    sys.run_until_idle();
    CHECK(log.size() == 1);
  }
}

TEST_CASE("monitors: request_exit(error) from a plain thread reaches a threaded actor's monitors",
          "[actor][monitor][concurrent]") {
  courier_test::watchdog wd("monitor request_exit threaded");
  down_log log;
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  std::vector<courier::actor_ref<stopper>> targets;
  auto w = sys.spawn<watcher>(&log);
  for (int i = 0; i < 16; ++i) {
    targets.push_back(sys.spawn<stopper>());
    w.send(watch_stopper{targets.back()});
  }
  std::thread stopping_thread([&] {
    for (std::size_t i = 0; i < targets.size(); ++i)
      targets[i].base()->request_exit(courier::error(errc::connection_lost, "peer " + std::to_string(i) + " gone"),
                                      i % 2 == 0);
  });
  stopping_thread.join();
  REQUIRE(courier_test::eventually([&] { return log.size() >= targets.size(); }));
  std::lock_guard lock(log.mutex);
  CHECK(log.downs.size() == targets.size());
  for (const auto& d : log.downs) {
    CHECK(d.reason == errc::connection_lost);
    CHECK(d.reason.text.find(" gone") != std::string::npos);
  }
}

TEST_CASE("monitors: watching an actor that already stopped delivers down at once", "[actor][monitor]") {
  courier_test::watchdog wd("monitor already stopped");
  down_log log;
  courier::system sys{courier::config::deterministic()};
  auto normal = sys.spawn<counter>();
  auto failed = sys.spawn<counter>();
  normal.send(quit{});
  failed.send(boom{"gone"});
  sys.run_until_idle();
  REQUIRE(sys.live_actors() == 0);

  auto w = sys.spawn<watcher>(&log);
  w.send(watch{normal});
  w.send(watch{failed});
  sys.run_until_idle();
  REQUIRE(log.size() == 2);
  CHECK(log.downs[0].id == normal.id());
  CHECK_FALSE(log.downs[0].reason);
  CHECK(log.downs[1].id == failed.id());
  CHECK(log.downs[1].reason == errc::handler_failed);
  CHECK(log.downs[1].reason.text.find("gone") != std::string::npos);
}

TEST_CASE("monitors across threads: every watcher hears exactly one down", "[actor][monitor][concurrent]") {
  courier_test::watchdog wd("monitor threaded");
  down_log log;
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  std::vector<courier::actor_ref<counter>> targets;
  std::vector<courier::actor_ref<watcher>> watchers;
  for (int i = 0; i < 8; ++i) targets.push_back(sys.spawn<counter>());
  for (int i = 0; i < 4; ++i) watchers.push_back(sys.spawn<watcher>(&log));
  for (auto& w : watchers)
    for (auto& t : targets) w.send(watch{t});
  // Stop the targets while the watches are still arriving: either path must deliver down once.
  for (auto& t : targets) t.send(quit{});
  REQUIRE(courier_test::eventually([&] { return log.size() >= 32; }));
  std::this_thread::sleep_for(20ms);
  CHECK(log.size() == 32);
}
