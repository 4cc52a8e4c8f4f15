// Timers: request time-outs (a worker's own wheel, the shared heap), delayed sends with handles,
// periodic timers, the virtual clock of deterministic systems and the timer after shutdown.
#include "courier/timer.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "courier/system.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;

namespace {

/// Counts its live instances: shows that a message was destroyed, not leaked or delivered.
struct tracked {
  static inline std::atomic<int> live{0};
  int value = 0;
  explicit tracked(int v) : value(v) { live.fetch_add(1); }
  tracked(const tracked& o) : value(o.value) { live.fetch_add(1); }
  tracked(tracked&& o) noexcept : value(o.value) { live.fetch_add(1); }
  ~tracked() { live.fetch_sub(1); }
};

struct get {};
struct nap {
  std::chrono::milliseconds length;
};
struct tick {};
struct start_heartbeat {
  std::chrono::nanoseconds period;
};
struct cancel_heartbeat {};
struct quit {};
struct hold_handle {
  courier::timer_handle handle;
};
struct cancel_held {};

/// What a box did, kept by the test that spawned it (the box writes it from its handlers, which
/// these tests run on their own thread).
struct box_seen {
  std::vector<int> received;
  courier::timer_handle heartbeat;
  courier::timer_handle held;
  bool cancelled = false;
};

class box : public courier::actor<box, tracked, get, nap, tick, start_heartbeat, cancel_heartbeat, quit, hold_handle,
                                  cancel_held> {
 public:
  explicit box(box_seen* seen = nullptr, std::atomic<int>* ticks = nullptr, std::chrono::milliseconds tick_work = 0ms)
      : seen_(seen != nullptr ? seen : &own_), ticks_(ticks), tick_work_(tick_work) {}
  void on(const tracked& t) { seen_->received.push_back(t.value); }
  int on(const get&) { return static_cast<int>(seen_->received.size()); }
  void on(const nap& n) { std::this_thread::sleep_for(n.length); }
  void on(const tick&) {
    if (ticks_ != nullptr) ticks_->fetch_add(1);
    if (tick_work_ > 0ms) std::this_thread::sleep_for(tick_work_);
  }
  void on(const start_heartbeat& s) { seen_->heartbeat = send_periodic(s.period, tick{}); }
  void on(const cancel_heartbeat&) { seen_->cancelled = seen_->heartbeat.cancel(); }
  void on(const quit&) { stop(); }
  void on(const hold_handle& h) { seen_->held = h.handle; }
  void on(const cancel_held&) { seen_->cancelled = seen_->held.cancel(); }

 private:
  box_seen own_;
  box_seen* seen_;
  std::atomic<int>* ticks_;
  std::chrono::milliseconds tick_work_;
};

struct dead_letter_log {
  std::mutex mutex;
  std::vector<std::string> types;
  std::size_t size() {
    std::lock_guard lock(mutex);
    return types.size();
  }
};

void record_dead_letter(const courier::dead_letter_info& info, void* context) {
  auto* log = static_cast<dead_letter_log*>(context);
  std::lock_guard lock(log->mutex);
  log->types.push_back(info.message_type != nullptr ? info.message_type : "");
}

courier::config deterministic_with(dead_letter_log* log) {
  auto cfg = courier::config::deterministic();
  cfg.on_dead_letter = &record_dead_letter;
  cfg.dead_letter_user_data = log;
  return cfg;
}

/// A requester that asks `target` for `get` with a time-out and records what settled it.
struct fetch {
  courier::actor_ref<box> target;
  courier::timespan timeout;
};
struct outcome_log {
  std::mutex mutex;
  std::vector<courier::error> errors;
  int values = 0;
  std::chrono::steady_clock::time_point settled_at;
  int settled() {
    std::lock_guard lock(mutex);
    return values + static_cast<int>(errors.size());
  }
};

class requester : public courier::actor<requester, fetch> {
 public:
  explicit requester(outcome_log* log) : log_(log) {}
  void on(const fetch& f) {
    f.target.request(get{}, f.timeout)
        .then(
            [this](int) {
              std::lock_guard lock(log_->mutex);
              ++log_->values;
              log_->settled_at = std::chrono::steady_clock::now();
            },
            [this](const courier::error& e) {
              std::lock_guard lock(log_->mutex);
              log_->errors.push_back(e);
              log_->settled_at = std::chrono::steady_clock::now();
            });
  }

 private:
  outcome_log* log_;
};

}  // namespace

// ----------------------------------------------------------------------------------------------
// The virtual clock

TEST_CASE("advance_time(timespan::max()) saturates the virtual clock instead of overflowing", "[timer]") {
  courier_test::watchdog wd("advance saturates");
  box_seen seen;  // outlives the system, whose actor writes it
  courier::system sys{courier::config::deterministic()};
  auto b = sys.spawn<box>(&seen);
  b.delayed_send(tracked{1}, 1h);
  CHECK(sys.advance_time(courier::timespan::max()) == 1);
  sys.run_until_idle();
  CHECK(seen.received == std::vector<int>{1});
  // The clock stays at its end: later timers come due at the next step, none is lost.
  b.delayed_send(tracked{2}, 1ms);
  CHECK(sys.advance_time(courier::timespan::max()) == 1);
  sys.run_until_idle();
  CHECK(seen.received == std::vector<int>{1, 2});
}

TEST_CASE("advance_time rejects a negative step and leaves the clock where it was", "[timer]") {
  courier_test::watchdog wd("advance negative");
  courier::system sys{courier::config::deterministic()};
  auto b = sys.spawn<box>();
  b.delayed_send(tracked{1}, 10ms);
  CHECK_THROWS_AS(sys.advance_time(-5ms), std::invalid_argument);
  CHECK(sys.advance_time(9ms) == 0);
  CHECK(sys.advance_time(1ms) == 1);
}

TEST_CASE("a delayed message dropped because its actor stopped is a dead letter named by its type", "[timer]") {
  courier_test::watchdog wd("delayed dead letter name");
  dead_letter_log log;
  courier::system sys{deterministic_with(&log)};
  auto b = sys.spawn<box>();
  b.delayed_send(tracked{1}, 30ms);
  b.send(quit{});
  sys.run_until_idle();
  CHECK(sys.advance_time(30ms) == 1);
  REQUIRE(log.size() == 1);
  CHECK(log.types[0] == typeid(tracked).name());
  CHECK(tracked::live.load() == 0);
}

TEST_CASE("delayed messages still waiting at shutdown are dead letters named by their type", "[timer]") {
  courier_test::watchdog wd("delayed shutdown name");
  dead_letter_log log;
  {
    courier::system sys{deterministic_with(&log)};
    auto b = sys.spawn<box>();
    b.delayed_send(tracked{1}, 1h);
    CHECK(sys.shutdown().clean);
  }
  REQUIRE(log.size() == 1);
  CHECK(log.types[0] == typeid(tracked).name());
  CHECK(tracked::live.load() == 0);
}

TEST_CASE("ask on a deterministic system waits on the virtual clock, not on real time", "[timer]") {
  courier_test::watchdog wd("deterministic ask clock");
  courier::system sys{courier::config::deterministic()};
  auto slow = sys.spawn<box>();
  auto b = sys.spawn<box>();
  slow.send(nap{50ms});  // runs first and takes 50 ms of real time, no virtual time
  const auto r = b.ask(get{}, 5ms);
  REQUIRE(r.has_value());
  CHECK(*r == 0);
}

TEST_CASE("a deterministic ask that gets its reply leaves the virtual clock where it was", "[timer]") {
  courier_test::watchdog wd("deterministic ask leaves clock");
  courier::system sys{courier::config::deterministic()};
  auto b = sys.spawn<box>();
  b.delayed_send(tracked{1}, 10ms);
  auto r = b.ask(get{}, 1s);
  REQUIRE(r.has_value());
  CHECK(*r == 0);
  CHECK(sys.advance_time(9ms) == 0);  // the reply came without moving time
  CHECK(sys.advance_time(1ms) == 1);
}

// ----------------------------------------------------------------------------------------------
// Handles

TEST_CASE("cancelling a delayed send destroys the message: not delivered, not a dead letter", "[timer]") {
  courier_test::watchdog wd("cancel delayed");
  dead_letter_log log;
  box_seen seen;  // outlives the system, whose actor writes it
  courier::system sys{deterministic_with(&log)};
  auto b = sys.spawn<box>(&seen);
  courier::timer_handle h = b.delayed_send(tracked{1}, 20ms);
  CHECK(h.active());
  CHECK(h.cancel());
  CHECK_FALSE(h.active());
  CHECK_FALSE(h.cancel());  // only once
  sys.advance_time(20ms);
  sys.run_until_idle();
  CHECK(seen.received.empty());
  CHECK(log.size() == 0);
  CHECK(sys.dead_letters() == 0);
  CHECK(tracked::live.load() == 0);
}

TEST_CASE("a handle reports a delayed send that fired: cancel then returns false", "[timer]") {
  courier_test::watchdog wd("handle after fire");
  box_seen seen;  // outlives the system, whose actor writes it
  courier::system sys{courier::config::deterministic()};
  auto b = sys.spawn<box>(&seen);
  auto h = b.delayed_send(tracked{7}, 5ms);
  auto copy = h;
  CHECK(sys.advance_time(5ms) == 1);
  CHECK_FALSE(h.active());
  CHECK_FALSE(copy.cancel());
  sys.run_until_idle();
  CHECK(seen.received == std::vector<int>{7});
  courier::timer_handle empty;
  CHECK_FALSE(empty.active());
  CHECK_FALSE(empty.cancel());
  courier::actor_ref<box> no_actor;
  CHECK_FALSE(static_cast<bool>(no_actor.delayed_send(tracked{1}, 1ms)));
}

TEST_CASE("cancel from a handler of the same system destroys the message at once", "[timer]") {
  courier_test::watchdog wd("cancel in handler");
  box_seen seen;  // outlives the system, whose actor writes it
  courier::system sys{courier::config::deterministic()};
  auto b = sys.spawn<box>(&seen);
  b.send(hold_handle{b.delayed_send(tracked{1}, 1h)});
  sys.run_until_idle();
  CHECK(tracked::live.load() == 1);
  b.send(cancel_held{});
  sys.run_until_idle();
  CHECK(seen.cancelled);
  CHECK(tracked::live.load() == 0);  // not an hour later
}

TEST_CASE("handles stay safe after the actor stopped and after the system is gone", "[timer]") {
  courier_test::watchdog wd("handle lifetime");
  courier::timer_handle pending_one, heartbeat;
  {
    box_seen seen;  // outlives the system, whose actor writes it
    courier::system sys{courier::config::deterministic()};
    auto b = sys.spawn<box>(&seen);
    pending_one = b.delayed_send(tracked{1}, 1h);
    b.send(start_heartbeat{10ms});
    sys.run_until_idle();
    heartbeat = seen.heartbeat;
    CHECK(heartbeat.active());
    b.send(quit{});
    sys.run_until_idle();
  }
  CHECK_FALSE(pending_one.active());
  CHECK_FALSE(pending_one.cancel());
  CHECK_FALSE(heartbeat.active());
  CHECK_FALSE(heartbeat.cancel());
  CHECK(tracked::live.load() == 0);
}

// ----------------------------------------------------------------------------------------------
// Periodic timers

TEST_CASE("send_periodic ticks every period, one tick at a time, until cancelled", "[timer]") {
  courier_test::watchdog wd("periodic deterministic");
  std::atomic<int> ticks{0};
  box_seen seen;  // outlives the system, whose actor writes it
  courier::system sys{courier::config::deterministic()};
  auto b = sys.spawn<box>(&seen, &ticks);
  b.send(start_heartbeat{10ms});
  sys.run_until_idle();
  CHECK(sys.advance_time(9ms) == 0);
  CHECK(sys.advance_time(1ms) == 1);
  sys.run_until_idle();
  CHECK(ticks == 1);
  for (int i = 0; i < 3; ++i) {
    sys.advance_time(10ms);
    sys.run_until_idle();
  }
  CHECK(ticks == 4);
  // Not handled in between: the ticks that come due while one waits are skipped.
  for (int i = 0; i < 5; ++i) sys.advance_time(10ms);
  CHECK(sys.run_until_idle() == 1);
  CHECK(ticks == 5);
  b.send(cancel_heartbeat{});
  sys.run_until_idle();
  CHECK(seen.cancelled);
  CHECK_FALSE(seen.heartbeat.active());
  sys.advance_time(100ms);
  sys.run_until_idle();
  CHECK(ticks == 5);
}

TEST_CASE("a periodic timer ends when its actor stops", "[timer]") {
  courier_test::watchdog wd("periodic stop");
  std::atomic<int> ticks{0};
  dead_letter_log log;
  box_seen seen;  // outlives the system, whose actor writes it
  courier::system sys{deterministic_with(&log)};
  auto b = sys.spawn<box>(&seen, &ticks);
  b.send(start_heartbeat{10ms});
  sys.run_until_idle();
  auto h = seen.heartbeat;
  b.send(quit{});
  sys.run_until_idle();
  CHECK(h.active());  // noticed at the next period
  sys.advance_time(10ms);
  CHECK_FALSE(h.active());
  CHECK(ticks == 0);
  CHECK(log.size() == 0);  // a heartbeat to a stopped actor is not a dead letter
  sys.advance_time(50ms);
  CHECK(ticks == 0);
}

TEST_CASE("send_periodic rejects a period that is not positive", "[timer]") {
  courier_test::watchdog wd("periodic period");
  courier::system sys{courier::config::deterministic()};
  auto b = sys.spawn<box>();
  b.send(start_heartbeat{0ms});
  sys.run_until_idle();  // the handler throws: the actor stops with handler_failed
  CHECK(sys.live_actors() == 0);
}

// ----------------------------------------------------------------------------------------------
// Threaded: the worker's own wheel, the shared heap and its thread

TEST_CASE("a request time-out made by an actor fires on its worker, never early", "[timer][concurrent]") {
  courier_test::watchdog wd("worker time-out");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  outcome_log log;
  auto slow = sys.spawn<box>();
  auto r = sys.spawn<requester>(&log);
  slow.send(nap{1s});
  std::this_thread::sleep_for(20ms);  // a worker has taken it
  const auto start = std::chrono::steady_clock::now();
  r.send(fetch{slow, 50ms});
  REQUIRE(courier_test::eventually([&] { return log.settled() == 1; }, 5s));
  std::lock_guard lock(log.mutex);
  REQUIRE(log.errors.size() == 1);
  CHECK(log.errors[0] == errc::request_timeout);
  CHECK(log.settled_at - start >= 50ms);
  CHECK(log.settled_at - start < 800ms);  // did not wait for the reply (loose: loaded machines)
}

TEST_CASE("a reply handled on another worker cancels the time-out through its owner's inbox", "[timer][concurrent]") {
  courier_test::watchdog wd("remote cancel", 60s);
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  outcome_log log;
  auto target = sys.spawn<box>();
  auto r = sys.spawn<requester>(&log);
  constexpr int rounds = 20;
  for (int i = 0; i < rounds; ++i) {
    // The target naps on one worker, so the request (and its time-out) is made on the other;
    // the reply then wakes the requester on the target's worker, which settles it there.
    target.send(nap{10ms});
    std::this_thread::sleep_for(2ms);
    r.send(fetch{target, 5s});
    REQUIRE(courier_test::eventually([&] { return log.settled() == i + 1; }, 10s));
  }
  std::lock_guard lock(log.mutex);
  CHECK(log.values == rounds);
  CHECK(log.errors.empty());
}

TEST_CASE("many requests with time-outs across workers all get their replies", "[timer][concurrent]") {
  courier_test::watchdog wd("many time-outs", 60s);
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  constexpr int pairs = 4, rounds = 2000;
  std::vector<outcome_log> logs(pairs);
  std::vector<courier::actor_ref<requester>> rs;
  std::vector<courier::actor_ref<box>> targets;
  for (int i = 0; i < pairs; ++i) {
    rs.push_back(sys.spawn<requester>(&logs[static_cast<std::size_t>(i)]));
    targets.push_back(sys.spawn<box>());
  }
  for (int round = 0; round < rounds; ++round)
    for (int i = 0; i < pairs; ++i)
      rs[static_cast<std::size_t>(i)].send(fetch{targets[static_cast<std::size_t>(i)], 10s});
  REQUIRE(courier_test::eventually(
      [&] {
        for (auto& l : logs)
          if (l.settled() != rounds) return false;
        return true;
      },
      30s));
  for (auto& l : logs) {
    std::lock_guard lock(l.mutex);
    CHECK(l.values == rounds);
    CHECK(l.errors.empty());
  }
  CHECK(sys.shutdown().clean);
}

TEST_CASE("the timer thread survives more than 1,024 pending timers", "[timer][concurrent]") {
  courier_test::watchdog wd("timer heap growth");
  box_seen seen;                                     // outlives the system, whose actor writes it
  courier::system sys{courier::config::embedded()};  // real time, served by the timer thread
  auto b = sys.spawn<box>(&seen);
  b.delayed_send(tracked{0}, 30s);  // the thread now sleeps until this deadline
  std::this_thread::sleep_for(20ms);
  for (int i = 0; i < 2000; ++i) b.delayed_send(tracked{i + 1}, 60s);  // the heap reallocates
  b.delayed_send(tracked{-1}, 0ms);                                    // the new earliest: wakes the thread
  REQUIRE(courier_test::eventually([&] {
    sys.run_until_idle();
    return !seen.received.empty();
  }));
  CHECK(seen.received == std::vector<int>{-1});
  CHECK(sys.shutdown().clean);
  CHECK(tracked::live.load() == 0);
}

namespace {

struct gate_state {
  std::atomic<bool> open{false};
  std::atomic<bool> entered{false};
};
struct wait_at_gate {
  gate_state* gate;
};
class stuck : public courier::actor<stuck, wait_at_gate, get> {
 public:
  void on(const wait_at_gate& w) {
    w.gate->entered.store(true);
    while (!w.gate->open.load()) std::this_thread::sleep_for(1ms);
  }
  int on(const get&) { return 1; }
};

}  // namespace

TEST_CASE("after an unclean shutdown a new request time-out settles at once with system_shutdown",
          "[timer][concurrent]") {
  courier_test::watchdog wd("timer after unclean shutdown");
  gate_state gate;
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto s = sys.spawn<stuck>();
  s.send(wait_at_gate{&gate});
  REQUIRE(courier_test::eventually([&] { return gate.entered.load(); }));
  CHECK_FALSE(sys.shutdown(50ms).clean);  // the core is abandoned, refs stay usable
  std::atomic<int> errors{0}, values{0};
  courier::error seen;
  s.request(get{}, 100ms)
      .then([&](int) { values.fetch_add(1); },
            [&](const courier::error& e) {
              seen = e;
              errors.fetch_add(1);
            });
  // Settled on this thread, before the stuck actor could ever answer.
  CHECK(errors.load() == 1);
  CHECK(seen == errc::system_shutdown);
  gate.open.store(true);
  std::this_thread::sleep_for(50ms);
  CHECK(values.load() == 0);
  CHECK(errors.load() == 1);
}

TEST_CASE("a threaded heartbeat ticks, and a slow actor gets no pile-up", "[timer][concurrent]") {
  courier_test::watchdog wd("periodic threaded");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  std::atomic<int> fast_ticks{0}, slow_ticks{0};
  auto fast = sys.spawn<box>(nullptr, &fast_ticks);
  auto slow = sys.spawn<box>(nullptr, &slow_ticks, 40ms);
  const auto start = std::chrono::steady_clock::now();
  fast.send(start_heartbeat{5ms});
  slow.send(start_heartbeat{1ms});
  std::this_thread::sleep_for(200ms);
  CHECK(courier_test::eventually([&] { return fast_ticks.load() >= 5; }));
  slow.send(cancel_heartbeat{});
  fast.send(cancel_heartbeat{});
  const auto slow_at_cancel = slow_ticks.load();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  // A tick takes 40 ms: one at a time, no more than fit in the time, plus the one running.
  CHECK(slow_at_cancel <= elapsed / 40ms + 1);
  std::this_thread::sleep_for(100ms);
  CHECK(slow_ticks.load() <= slow_at_cancel + 1);  // at most the tick already queued
  CHECK(sys.shutdown().clean);
}

TEST_CASE("the timer thread fires a delay far ahead, and a shorter one armed after it on time", "[timer][concurrent]") {
  // The thread sleeps until the earliest deadline it knows (about a second ahead with none), and
  // only a deadline before that wakes it: the far timer must not be lost, nor the near one armed
  // behind it kept waiting for the far one.
  courier_test::watchdog wd("timer thread: far and near", 30s);
  courier::system sys;
  std::atomic<int> far_ticks{0}, near_ticks{0};
  auto far = sys.spawn<box>(nullptr, &far_ticks);
  auto near = sys.spawn<box>(nullptr, &near_ticks);
  const auto start = std::chrono::steady_clock::now();
  auto far_timer = far.delayed_send(tick{}, 3s);
  std::this_thread::sleep_for(1100ms);  // past the idle thread's first look: it now sleeps until the far timer
  const auto armed = std::chrono::steady_clock::now();
  auto near_timer = near.delayed_send(tick{}, 50ms);
  CHECK(courier_test::eventually([&] { return near_ticks.load() == 1; }));
  CHECK(std::chrono::steady_clock::now() - armed < 1000ms);  // not at the far timer's time, 1.9 s on
  CHECK(far_ticks.load() == 0);
  CHECK(courier_test::eventually([&] { return far_ticks.load() == 1; }));
  CHECK(std::chrono::steady_clock::now() - start >= 3s);  // never early
  CHECK(sys.shutdown().clean);
}
