#include "courier/system.hpp"

#include <catch2/catch.hpp>

#include <poll.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "fixtures.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;
using courier_test::add;  // the shared messages; the counter here is its own, tracing variant
using courier_test::get;
using courier_test::quit;

namespace {

struct trace {
  std::mutex mutex;
  std::vector<std::string> events;
  void note(std::string e) {
    std::lock_guard lock(mutex);
    events.push_back(std::move(e));
  }
  std::vector<std::string> copy() {
    std::lock_guard lock(mutex);
    return events;
  }
};

class counter : public courier::actor<counter, add, get, quit> {
 public:
  explicit counter(trace* t = nullptr, std::string name = "c") : trace_(t), name_(std::move(name)) {}
  void on(const add& m) {
    total_ += m.a + m.b;
    if (trace_ != nullptr) trace_->note(name_);
  }
  int on(const get&) { return total_; }
  void on(const quit&) { stop(); }
  int total() const { return total_; }

 private:
  trace* trace_;
  std::string name_;
  int total_ = 0;
};

struct tick {};
class tally : public courier::actor<tally, tick> {
 public:
  explicit tally(std::atomic<int>* n) : n_(n) {}
  void on(const tick&) { n_->fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<int>* n_;
};

/// Spawns a child from a handler (into its own system) and forwards to it.
struct make_child {};
struct child_ref {};
class parent : public courier::actor<parent, make_child, child_ref, add> {
 public:
  void on(const make_child&) { child_ = spawn<counter>(); }
  void on(const add& m) { child_.send(m); }
  courier::actor_ref<counter> on(const child_ref&) { return child_; }

 private:
  courier::actor_ref<counter> child_;
};

struct block {};
class stuck : public courier::actor<stuck, block, get> {
 public:
  stuck(std::atomic<bool>* gate, std::atomic<bool>* entered, std::atomic<bool>* finished)
      : gate_(gate), entered_(entered), finished_(finished) {}
  void on(const block&) {
    entered_->store(true);
    while (!gate_->load()) std::this_thread::sleep_for(1ms);
  }
  int on(const get&) { return 1; }
  void on_stop() { finished_->store(true); }

 private:
  std::atomic<bool>* gate_;
  std::atomic<bool>* entered_;
  std::atomic<bool>* finished_;
};

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// Deterministic mode

TEST_CASE("deterministic: run_one handles exactly one message; state can be inspected between steps",
          "[system][deterministic]") {
  courier_test::watchdog wd("deterministic steps");
  trace t;
  courier::system sys{courier::config::deterministic()};
  CHECK(sys.worker_count() == 0);
  CHECK(sys.wake_fd() == -1);
  CHECK_FALSE(sys.run_one());  // nothing to do
  auto c = sys.spawn<counter>(&t, "c");
  c.send(add{1, 0});
  c.send(add{2, 0});
  c.send(add{3, 0});
  CHECK(t.copy().empty());  // nothing runs on its own
  REQUIRE(sys.run_one());
  CHECK(t.copy().size() == 1);
  REQUIRE(sys.run_one());
  CHECK(t.copy().size() == 2);
  REQUIRE(sys.run_one());
  CHECK(t.copy().size() == 3);
  CHECK_FALSE(sys.run_one());
  CHECK(c.ask(get{}, 1s).value() == 6);
}

TEST_CASE("deterministic: ready actors take turns, one message each", "[system][deterministic]") {
  courier_test::watchdog wd("deterministic round robin");
  trace t;
  courier::system sys{courier::config::deterministic()};
  auto a = sys.spawn<counter>(&t, "a");
  auto b = sys.spawn<counter>(&t, "b");
  for (int i = 0; i < 3; ++i) a.send(add{1, 1});
  for (int i = 0; i < 2; ++i) b.send(add{1, 1});
  while (sys.run_one()) {
  }
  CHECK(t.copy() == std::vector<std::string>{"a", "b", "a", "b", "a"});
}

TEST_CASE("deterministic: run_step tells which actor ran which message, urgent ones first", "[system][deterministic]") {
  courier_test::watchdog wd("run_step");
  courier::system sys{courier::config::deterministic()};
  CHECK_FALSE(sys.run_step().has_value());  // nothing to do
  auto a = sys.spawn<counter>();
  auto b = sys.spawn<counter>();
  a.send(add{1, 2});
  b.send(get{});
  auto s = sys.run_step();
  REQUIRE(s.has_value());
  CHECK(s->actor == a.id());
  CHECK(std::string(s->message_type) == typeid(add).name());
  CHECK_FALSE(s->system_message);
  s = sys.run_step();
  REQUIRE(s.has_value());
  CHECK(s->actor == b.id());
  CHECK(std::string(s->message_type) == typeid(get).name());
  CHECK_FALSE(sys.run_step().has_value());

  // A reply to a plain thread goes to the host lane: its continuation is a step of its own.
  std::optional<int> got;
  a.request(get{}).then([&](int v) { got = v; }, [](const courier::error&) {});
  s = sys.run_step();
  REQUIRE(s.has_value());
  CHECK(s->actor == a.id());
  CHECK(std::string(s->message_type) == typeid(get).name());
  CHECK_FALSE(s->host_continuation);
  CHECK_FALSE(got.has_value());  // not inside the replying actor's turn
  s = sys.run_step();
  REQUIRE(s.has_value());
  CHECK(s->host_continuation);
  CHECK(s->system_message);
  CHECK(got == 3);

  // stop() takes the urgent lane: the step that runs next is the stop, not the queued add.
  a.send(add{3, 4});
  a.stop();
  s = sys.run_step();
  REQUIRE(s.has_value());
  CHECK(s->actor == a.id());
  CHECK(s->system_message);
  CHECK(sys.live_actors() == 1);
  CHECK_FALSE(sys.run_step().has_value());

  courier::system embedded{courier::config::embedded()};
  CHECK_THROWS_AS(embedded.run_step(), std::logic_error);
}

TEST_CASE("manual modes: run_until_idle and poll use the configured throughput per turn", "[system][deterministic]") {
  courier_test::watchdog wd("throughput turns");
  trace t;
  courier::config cfg = courier::config::deterministic();
  cfg.throughput = 2;
  courier::system sys{cfg};
  auto a = sys.spawn<counter>(&t, "a");
  auto b = sys.spawn<counter>(&t, "b");
  for (int i = 0; i < 3; ++i) a.send(add{1, 1});
  for (int i = 0; i < 3; ++i) b.send(add{1, 1});
  // A budget of four: one turn of up to two messages for each actor, then it stops.
  const courier::run_report r = sys.poll(4);
  CHECK(r.messages == 4);
  CHECK(r.more);
  CHECK(t.copy() == std::vector<std::string>{"a", "a", "b", "b"});
  CHECK(sys.run_until_idle() == 2);  // messages, not turns
  CHECK(t.copy() == std::vector<std::string>{"a", "a", "b", "b", "a", "b"});
  CHECK(sys.run_until_idle() == 0);
}

TEST_CASE("spawn from a handler; live_actors counts spawned and stopped actors", "[system][deterministic]") {
  courier_test::watchdog wd("spawn from handler");
  courier::system sys{courier::config::deterministic()};
  auto p = sys.spawn<parent>();
  CHECK(sys.live_actors() == 1);
  p.send(make_child{});
  p.send(add{20, 22});
  sys.run_until_idle();
  CHECK(sys.live_actors() == 2);
  auto child = p.ask(child_ref{}, 1s);
  REQUIRE(child.has_value());
  REQUIRE(*child);
  CHECK(child->ask(get{}, 1s).value() == 42);  // the child got the message its parent forwarded
  child->send(quit{});
  sys.run_until_idle();
  CHECK(sys.live_actors() == 1);
}

// ----------------------------------------------------------------------------------------------
// Embedded mode

TEST_CASE("embedded: wake_fd becomes readable after a send from another thread; poll runs and clears it",
          "[system][embedded][concurrent]") {
  courier_test::watchdog wd("embedded wake fd");
  courier::system sys{courier::config::embedded()};
  REQUIRE(sys.wake_fd() >= 0);
  CHECK(sys.worker_count() == 0);
  auto c = sys.spawn<counter>();
  CHECK_FALSE(readable(sys.wake_fd(), 0));

  std::thread sender([&] { c.send(add{2, 3}); });
  sender.join();
  REQUIRE(readable(sys.wake_fd(), 5000));
  const courier::run_report r = sys.poll();
  CHECK(r.messages == 1);
  CHECK_FALSE(r.more);
  CHECK_FALSE(readable(sys.wake_fd(), 0));
  CHECK(c.ask(get{}, 1s).value() == 5);

  // Again, this time driven by run_until_idle.
  std::thread second([&] {
    for (int i = 0; i < 10; ++i) c.send(add{1, 0});
  });
  second.join();
  REQUIRE(readable(sys.wake_fd(), 5000));
  CHECK(sys.run_until_idle() >= 1);
  CHECK_FALSE(readable(sys.wake_fd(), 0));
  CHECK(c.ask(get{}, 1s).value() == 15);
}

TEST_CASE("embedded: work left after poll (budget used up) keeps wake_fd readable", "[system][embedded]") {
  courier_test::watchdog wd("embedded leftover work");
  courier::config cfg = courier::config::embedded();
  cfg.throughput = 4;
  courier::system sys{cfg};
  auto c = sys.spawn<counter>();
  for (int i = 0; i < 10; ++i) c.send(add{1, 0});
  REQUIRE(readable(sys.wake_fd(), 1000));
  const courier::run_report r = sys.poll(4);  // a budget of 4 of the 10 messages
  CHECK(r.messages == 4);
  CHECK(r.more);
  // A host loop that waits on the descriptor must be woken for the other 6.
  CHECK(readable(sys.wake_fd(), 200));
  sys.run_until_idle();
  CHECK(c.ask(get{}, 1s).value() == 10);
}

TEST_CASE("embedded: a host loop waiting on wake_fd never misses a message from another thread",
          "[system][embedded][concurrent]") {
  courier_test::watchdog wd("embedded host loop", 60s);
  courier::config cfg = courier::config::embedded();
  cfg.throughput = 1u << 30;  // one turn drains the mailbox: only wake-ups matter here
  courier::system sys{cfg};
  std::atomic<int> handled{0};
  auto t = sys.spawn<tally>(&handled);
  constexpr int total = 20000;
  std::thread sender([&] {
    for (int i = 0; i < total; ++i) {
      t.send(tick{});
      if (i % 8 == 0) std::this_thread::yield();  // let the actor go idle often
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  // The host loop: wait for the descriptor, then poll. Quiet for a whole second means either
  // everything was handled or a wake-up was lost.
  while (handled.load() < total && std::chrono::steady_clock::now() < deadline) {
    if (!readable(sys.wake_fd(), 1000)) break;
    sys.poll();
  }
  const int handled_by_loop = handled.load();
  sender.join();
  sys.run_until_idle();
  CHECK(handled_by_loop == total);
  CHECK(handled.load() == total);
}

// ----------------------------------------------------------------------------------------------
// Shutdown

TEST_CASE("clean shutdown: every actor stops, the report is clean, a second shutdown is harmless",
          "[system][shutdown][concurrent]") {
  courier_test::watchdog wd("clean shutdown");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  std::vector<courier::actor_ref<counter>> actors;
  for (int i = 0; i < 20; ++i) actors.push_back(sys.spawn<counter>());
  for (auto& a : actors)
    for (int i = 0; i < 10; ++i) a.send(add{1, 1});
  CHECK(sys.live_actors() == 20);
  courier::shutdown_report report = sys.shutdown(5s);
  CHECK(report.clean);
  CHECK(report.unfinished.empty());
  courier::shutdown_report again = sys.shutdown(5s);
  CHECK(again.clean);
}

TEST_CASE("clean shutdown of a deterministic system runs the queued messages first", "[system][shutdown]") {
  courier_test::watchdog wd("deterministic shutdown");
  trace t;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>(&t, "c");
  c.send(add{1, 1});
  c.send(add{1, 1});
  courier::shutdown_report report = sys.shutdown(5s);
  CHECK(report.clean);
  CHECK(t.copy().size() == 2);
}

TEST_CASE("shutdown with a stuck handler: bounded, not clean, names the actor; requests fail",
          "[system][shutdown][concurrent]") {
  courier_test::watchdog wd("stuck shutdown");
  std::atomic<bool> gate{false}, entered{false}, finished{false};
  struct opener {
    std::atomic<bool>& gate;
    ~opener() { gate.store(true); }
  } open_on_exit{gate};
  std::optional<courier::shutdown_report> report;
  std::uint64_t stuck_id = 0;
  std::atomic<int> request_errors{0};
  std::mutex m;
  courier::error request_error;
  {
    courier::config cfg;
    cfg.workers = 2;
    courier::system sys{cfg};
    auto s = sys.spawn<stuck>(&gate, &entered, &finished);
    auto fine = sys.spawn<counter>();
    stuck_id = s.id();
    s.send(block{});
    REQUIRE(courier_test::eventually([&] { return entered.load(); }));
    s.request(get{}, 60s)
        .then([](int) {},
              [&](const courier::error& e) {
                std::lock_guard lock(m);
                request_error = e;
                request_errors.fetch_add(1);
              });
    const auto start = std::chrono::steady_clock::now();
    report = sys.shutdown(200ms);
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 200ms);
    CHECK(took < 10s);
  }
  REQUIRE(report.has_value());
  CHECK_FALSE(report->clean);
  REQUIRE(report->unfinished.size() == 1);
  CHECK(report->unfinished[0].find("stuck") != std::string::npos);
  std::string tag = "#";
  tag += std::to_string(stuck_id);
  CHECK(report->unfinished[0].find(tag) != std::string::npos);
  // The request's timer was stopped with the system: it fails now instead of in 60 s.
  CHECK(request_errors.load() == 1);
  {
    std::lock_guard lock(m);
    CHECK(request_error == errc::system_shutdown);
  }
  // Let the stuck handler return; its worker finishes the actor and ends on its own.
  gate.store(true);
  CHECK(courier_test::eventually([&] { return finished.load(); }, 10s));
  std::this_thread::sleep_for(20ms);
}

TEST_CASE("a system destroyed without shutdown shuts down cleanly", "[system][shutdown][concurrent]") {
  courier_test::watchdog wd("destructor shutdown");
  std::atomic<bool> gate{true}, entered{false}, finished{false};
  {
    courier::config cfg;
    cfg.workers = 2;
    courier::system sys{cfg};
    auto s = sys.spawn<stuck>(&gate, &entered, &finished);
    s.send(block{});
  }
  CHECK(finished.load());  // on_stop ran before the destructor returned
}

TEST_CASE("settings() reflects the config; throughput 0 is raised to 1", "[system]") {
  courier::config cfg = courier::config::deterministic();
  cfg.throughput = 0;
  courier::system sys{cfg};
  CHECK(sys.settings().mode == courier::scheduling::deterministic);
  CHECK(sys.settings().throughput == 1);
}
