#include "courier/actor_ref.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "courier/system.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;

namespace {

struct add {
  int a, b;
};
struct get {};
struct quit {};
struct stamp {
  std::chrono::steady_clock::time_point sent;
};

struct stamp_log {
  std::mutex mutex;
  std::vector<std::chrono::steady_clock::duration> delays;
  std::size_t size() {
    std::lock_guard lock(mutex);
    return delays.size();
  }
};

class counter : public courier::actor<counter, add, get, quit, stamp> {
 public:
  explicit counter(stamp_log* log = nullptr) : log_(log) {}
  void on(const add& m) { total_ += m.a + m.b; }
  int on(const get&) { return total_; }
  void on(const quit&) { stop(); }
  void on(const stamp& s) {
    std::lock_guard lock(log_->mutex);
    log_->delays.push_back(std::chrono::steady_clock::now() - s.sent);
  }

 private:
  stamp_log* log_;
  int total_ = 0;
};

struct dead_letter_log {
  std::mutex mutex;
  std::vector<std::uint64_t> targets;
  std::vector<std::string> types;
};

void record_dead_letter(const courier::dead_letter_info& info, void* context) {
  auto* log = static_cast<dead_letter_log*>(context);
  std::lock_guard lock(log->mutex);
  log->targets.push_back(info.target_id);
  log->types.push_back(info.message_type != nullptr ? info.message_type : "");
}

}  // namespace

TEST_CASE("actor_ref: empty, copy, move, equality and ids", "[actor_ref]") {
  courier_test::watchdog wd("ref basics");
  courier::actor_ref<counter> empty;
  CHECK_FALSE(empty);
  CHECK(empty.base() == nullptr);

  courier::system sys{courier::config::deterministic()};
  auto a = sys.spawn<counter>();
  auto b = sys.spawn<counter>();
  REQUIRE(a);
  CHECK(a.id() != b.id());
  CHECK(b.id() > a.id());  // ids count up from spawn to spawn
  CHECK_FALSE(a == b);

  courier::actor_ref<counter> copy = a;
  CHECK(copy == a);
  CHECK(copy.id() == a.id());
  courier::actor_ref<counter> moved = std::move(copy);
  CHECK_FALSE(copy);  // NOLINT(bugprone-use-after-move): a moved-from ref is empty by contract
  CHECK(moved == a);
  moved.reset();
  CHECK_FALSE(moved);
  // The copies shared one actor: a send through any of them reaches the same state.
  courier::actor_ref<counter> other = a;
  other.send(add{1, 2});
  a.send(add{3, 4});
  CHECK(a.ask(get{}, 1s).value() == 10);
}

TEST_CASE("a ref keeps a stopped actor's memory alive; sends to it are dead letters", "[actor_ref]") {
  courier_test::watchdog wd("ref dead letters");
  dead_letter_log log;
  courier::config cfg = courier::config::deterministic();
  cfg.on_dead_letter = &record_dead_letter;
  cfg.dead_letter_user_data = &log;
  courier::system sys{cfg};
  auto c = sys.spawn<counter>();
  CHECK(c.send(add{1, 1}));
  c.send(quit{});
  sys.run_until_idle();
  REQUIRE(sys.live_actors() == 0);
  CHECK(sys.dead_letters() == 0);
  CHECK_FALSE(c.send(add{1, 1}));
  CHECK_FALSE(c.send(get{}));
  CHECK(sys.dead_letters() == 2);
  std::lock_guard lock(log.mutex);
  REQUIRE(log.targets.size() == 2);
  CHECK(log.targets[0] == c.id());
  CHECK(log.types[0].find("add") != std::string::npos);
  CHECK(log.types[1].find("get") != std::string::npos);
}

TEST_CASE("one-way messages queued before a stop are dead letters; requests among them fail", "[actor_ref]") {
  courier_test::watchdog wd("queued at stop");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.send(quit{});
  CHECK(c.send(add{1, 1}));  // accepted: the actor has not stopped yet
  std::optional<courier::error> failed;
  c.request(get{}).then([](int) {}, [&](const courier::error& e) { failed = e; });
  sys.run_until_idle();
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::actor_stopped);
  CHECK(sys.dead_letters() == 1);  // the add: not silently dropped
}

TEST_CASE("actor_ref::stop_after_queued lets queued messages run first, then stops", "[actor_ref]") {
  courier_test::watchdog wd("ref stop");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.send(add{5, 5});
  std::optional<int> before;
  c.request(get{}).then([&](int v) { before = v; }, [](const courier::error&) {});
  c.stop_after_queued();
  c.stop_after_queued();  // a second stop request is harmless
  sys.run_until_idle();
  REQUIRE(before.has_value());
  CHECK(*before == 10);
  CHECK(sys.live_actors() == 0);
  c.stop();  // and so is a stop request to a stopped actor
  c.stop_after_queued();
  CHECK_FALSE(c.send(add{1, 1}));
}

TEST_CASE("delayed_send arrives after the delay, not before (deterministic, virtual clock)", "[actor_ref][timer]") {
  courier_test::watchdog wd("delayed send deterministic");
  stamp_log log;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>(&log);
  c.delayed_send(stamp{std::chrono::steady_clock::now()}, 150ms);
  c.send(add{1, 1});
  sys.run_until_idle();  // only the plain send is ready
  CHECK(log.size() == 0);
  CHECK(sys.advance_time(149ms) == 0);
  sys.run_until_idle();
  CHECK(log.size() == 0);
  CHECK(sys.advance_time(1ms) == 1);
  CHECK(sys.run_until_idle() == 1);
  CHECK(log.size() == 1);
}

TEST_CASE("delayed_send on a threaded system; shorter delays arrive first", "[actor_ref][timer][concurrent]") {
  courier_test::watchdog wd("delayed send threaded");
  stamp_log log;
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto c = sys.spawn<counter>(&log);
  const auto start = std::chrono::steady_clock::now();
  c.delayed_send(stamp{start}, 200ms);
  c.delayed_send(stamp{start}, 50ms);
  REQUIRE(courier_test::eventually([&] { return log.size() == 2; }));
  std::lock_guard lock(log.mutex);
  CHECK(log.delays[0] >= 50ms);
  CHECK(log.delays[1] >= 200ms);
  CHECK(log.delays[0] < log.delays[1]);
}

TEST_CASE("delayed_send to an actor that stopped meanwhile is a dead letter", "[actor_ref][timer]") {
  courier_test::watchdog wd("delayed send dead letter");
  stamp_log log;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>(&log);
  c.delayed_send(stamp{std::chrono::steady_clock::now()}, 30ms);
  c.send(quit{});
  sys.run_until_idle();
  CHECK(sys.dead_letters() == 0);
  CHECK(sys.advance_time(30ms) == 1);
  CHECK(sys.dead_letters() == 1);
  sys.run_until_idle();
  CHECK(log.size() == 0);
}

TEST_CASE("request().then from a plain thread on a threaded system runs once per request", "[actor_ref][concurrent]") {
  courier_test::watchdog wd("threaded request then");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto c = sys.spawn<counter>();
  c.send(add{1, 0});
  constexpr int n = 500;
  std::atomic<int> values{0}, errors{0}, sum{0};
  for (int i = 0; i < n; ++i)
    c.request(get{}, 10s)
        .then(
            [&](int v) {
              sum.fetch_add(v);
              values.fetch_add(1);
            },
            [&](const courier::error&) { errors.fetch_add(1); });
  REQUIRE(courier_test::eventually([&] { return values.load() + errors.load() == n; }));
  std::this_thread::sleep_for(10ms);
  CHECK(values.load() == n);
  CHECK(errors.load() == 0);
  CHECK(sum.load() == n);
}

TEST_CASE("ask from several threads at once: every caller gets its own reply", "[actor_ref][concurrent]") {
  courier_test::watchdog wd("concurrent ask");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto c = sys.spawn<counter>();
  constexpr int threads = 4;
  constexpr int asks = 200;
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t)
    callers.emplace_back([&] {
      for (int i = 0; i < asks; ++i) {
        auto r = c.ask(add{1, 0}, 10s);
        if (!r.has_value()) failures.fetch_add(1);
      }
    });
  for (auto& t : callers) t.join();
  CHECK(failures.load() == 0);
  auto total = c.ask(get{}, 10s);
  REQUIRE(total.has_value());
  CHECK(*total == threads * asks);
}

TEST_CASE("ask on a manual system drives it from the calling thread", "[actor_ref]") {
  courier_test::watchdog wd("ask drives manual");
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  for (int i = 0; i < 10; ++i) c.send(add{i, 0});
  auto r = c.ask(get{}, 5s);
  REQUIRE(r.has_value());
  CHECK(*r == 45);
}

TEST_CASE("an empty actor_ref refuses everything with a clear error instead of crashing", "[actor_ref]") {
  courier_test::watchdog wd("empty ref");
  courier::actor_ref<counter> empty;
  CHECK_FALSE(empty.send(add{1, 1}));
  CHECK_FALSE(empty.delayed_send(add{1, 1}, 1ms));
  empty.stop();  // nothing to stop: no effect
  auto r = empty.ask(get{}, 1s);
  REQUIRE_FALSE(r);
  CHECK(r.err() == errc::empty_reference);
  // No system to run a continuation on: then() says so by throwing, and runs nothing.
  bool ran = false;
  try {
    empty.request(get{}).then([&](int) { ran = true; }, [&](const courier::error&) { ran = true; });
    FAIL("then() through an empty ref did not throw");
  } catch (const std::system_error& e) {
    CHECK(e.code() == errc::empty_reference);
  }
  CHECK_FALSE(ran);
  // With an executor the error goes to it, like any other outcome.
  struct queue_executor {
    std::vector<std::function<void()>>* jobs;
    void execute(std::function<void()> f) const { jobs->push_back(std::move(f)); }
  };
  std::vector<std::function<void()>> jobs;
  std::optional<courier::error> failed;
  empty.request(get{}).then(
      queue_executor{&jobs}, [](int) {}, [&](const courier::error& e) { failed = e; });
  CHECK_FALSE(failed.has_value());
  REQUIRE(jobs.size() == 1);
  jobs[0]();
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::empty_reference);
}

TEST_CASE("after shutdown: spawn throws system_shutdown, the rest is inert, counters keep", "[actor_ref]") {
  courier_test::watchdog wd("spawn after shutdown");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.send(quit{});
  sys.run_until_idle();
  CHECK_FALSE(c.send(add{1, 1}));
  CHECK(sys.shutdown().clean);
  CHECK(sys.dead_letters() == 1);
  CHECK(sys.live_actors() == 0);
  CHECK_FALSE(sys.run_one());
  CHECK(sys.run_until_idle() == 0);
  CHECK(sys.settings().mode == courier::scheduling::deterministic);
  try {
    (void)sys.spawn<counter>();
    FAIL("spawn after shutdown did not throw");
  } catch (const std::system_error& e) {
    CHECK(e.code() == courier::make_error_code(errc::system_shutdown));
  }
}
