// Embedding: where host continuations run, the loop contract (budgets, wake_fd, host-driven
// timers, on_wake), blocking calls on the host thread, and shutdown from a host loop.

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <dirent.h>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "courier/courier.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;

namespace {

struct add {
  int n;
};
struct get {};
struct quit {};
struct hold {};  // never answered: keeps a request waiting (for time-outs)
struct arm {};   // starts a delayed add to itself from the handler

class counter : public courier::actor<counter, add, get, quit, hold, arm> {
 public:
  int on(const arm&) {
    (void)self().delayed_send(add{1}, std::chrono::milliseconds(30));
    return total_;
  }
  void on(const add& a) { total_ += a.n; }
  int on(const get&) { return total_; }
  void on(const quit&) { stop(); }
  courier::response_promise<int> on(const hold&) {
    held_ = make_response_promise<int>();
    return held_;
  }
  void on_stop() { held_ = {}; }  // the last copy: a held request fails with broken_promise

 private:
  int total_ = 0;
  courier::response_promise<int> held_;
};

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

int thread_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

/// Marks the host's run calls, so a continuation can tell whether it runs inside one.
struct host_loop {
  courier::system& sys;
  bool inside = false;
  courier::run_report poll(std::size_t budget = courier::system::default_poll_budget) {
    inside = true;
    auto r = sys.poll(budget);
    inside = false;
    return r;
  }
};

/// A host's own queue, as an executor: what Courier hands it runs when the host drains it.
struct job_queue {
  std::mutex m;
  std::deque<std::function<void()>> jobs;
  std::vector<std::thread::id> execute_threads;
  std::size_t drain() {
    std::size_t n = 0;
    for (;;) {
      std::function<void()> f;
      {
        std::lock_guard lock(m);
        if (jobs.empty()) return n;
        f = std::move(jobs.front());
        jobs.pop_front();
      }
      f();
      ++n;
    }
  }
};
struct queue_executor {
  job_queue* q;
  void execute(std::function<void()> f) const {
    std::lock_guard lock(q->m);
    q->execute_threads.push_back(std::this_thread::get_id());
    q->jobs.push_back(std::move(f));
  }
};

struct hook_log {
  std::atomic<int> calls{0};
};
void count_hook(const courier::error&, void* ctx) { static_cast<hook_log*>(ctx)->calls.fetch_add(1); }

}  // namespace

// ----------------------------------------------------------------------------------------------
// Where continuations run

TEST_CASE("embedded: a reply's and an error's continuations run inside the host's poll, on its thread", "[embedding]") {
  courier_test::watchdog wd("embedded continuations");
  courier::system sys{courier::config::embedded()};
  host_loop loop{sys};
  auto c = sys.spawn<counter>();
  c.send(add{5});
  const auto host = std::this_thread::get_id();
  std::optional<int> value;
  bool value_inside_poll = false;
  std::thread::id value_thread;
  c.request(get{}).then(
      [&](int v) {
        value = v;
        value_inside_poll = loop.inside;
        value_thread = std::this_thread::get_id();
      },
      [](const courier::error&) {});
  CHECK_FALSE(value.has_value());  // not inside then()
  loop.poll();
  REQUIRE(value.has_value());
  CHECK(*value == 5);
  CHECK(value_inside_poll);
  CHECK(value_thread == host);

  // An error known at once (the target has stopped) waits for the loop too.
  c.send(quit{});
  loop.poll();
  std::optional<courier::error> failed;
  bool error_inside_poll = false;
  c.request(get{}).then([](int) {},
                        [&](const courier::error& e) {
                          failed = e;
                          error_inside_poll = loop.inside;
                        });
  CHECK_FALSE(failed.has_value());
  CHECK(readable(sys.wake_fd(), 0));  // the host is told there is something to run
  const courier::run_report r = loop.poll();
  CHECK(r.messages == 1);
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::actor_stopped);
  CHECK(error_inside_poll);
}

TEST_CASE("embedded: no hidden thread; a time-out fires when the host drives time, inside its poll",
          "[embedding][timer]") {
  courier_test::watchdog wd("embedded time-out");
  const int threads_before = thread_count();
  courier::system sys{courier::config::embedded()};
  CHECK(thread_count() == threads_before);  // no workers, no timer thread
  host_loop loop{sys};
  auto c = sys.spawn<counter>();
  CHECK(sys.next_deadline() == std::chrono::steady_clock::time_point::max());
  const auto before = std::chrono::steady_clock::now();
  std::optional<courier::error> failed;
  bool inside = false;
  c.request(hold{}, 30ms)
      .then([](int) {},
            [&](const courier::error& e) {
              failed = e;
              inside = loop.inside;
            });
  const auto deadline = sys.next_deadline();
  CHECK(deadline >= before + 30ms);
  CHECK(deadline <= std::chrono::steady_clock::now() + 30ms);
  loop.poll();                        // the counter takes the request and holds it
  CHECK(sys.fire_due_timers() == 0);  // not due yet
  CHECK_FALSE(failed.has_value());
  // The host's own timer: sleep until the deadline Courier gave, then poll.
  std::this_thread::sleep_until(deadline);
  loop.poll();
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::request_timeout);
  CHECK(inside);
  CHECK(sys.next_deadline() == std::chrono::steady_clock::time_point::max());
}

TEST_CASE("embedded: a delayed send fires through fire_due_timers, and a timer set on another thread wakes the host",
          "[embedding][timer][concurrent]") {
  courier_test::watchdog wd("embedded delayed send");
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  sys.run_until_idle();
  CHECK_FALSE(readable(sys.wake_fd(), 0));
  std::thread other([&] { (void)c.delayed_send(add{7}, 20ms); });
  other.join();
  // A new earliest deadline from another thread: the host must re-arm its timer.
  REQUIRE(readable(sys.wake_fd(), 5000));
  const auto deadline = sys.next_deadline();
  REQUIRE(deadline != std::chrono::steady_clock::time_point::max());
  CHECK(sys.poll().messages == 0);  // nothing to run yet; the poll cleared the descriptor
  CHECK_FALSE(readable(sys.wake_fd(), 0));
  std::this_thread::sleep_until(deadline);
  CHECK(sys.fire_due_timers() == 1);
  CHECK(readable(sys.wake_fd(), 0));  // the message it sent is ready: level-triggered
  CHECK(sys.poll().messages == 1);
  CHECK_FALSE(readable(sys.wake_fd(), 0));
  CHECK(c.ask(get{}, 1s).value() == 7);
}

TEST_CASE("embedded: a request made on another thread still continues on the host's thread",
          "[embedding][concurrent]") {
  courier_test::watchdog wd("embedded foreign request");
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  c.send(add{3});
  std::atomic<bool> sent{false};
  std::atomic<bool> done{false};
  std::thread::id ran_on;
  std::thread other([&] {
    c.request(get{}).then(
        [&](int) {
          ran_on = std::this_thread::get_id();
          done.store(true);
        },
        [](const courier::error&) {});
    sent.store(true);
  });
  other.join();
  REQUIRE(sent.load());
  while (!done.load()) {
    REQUIRE(readable(sys.wake_fd(), 5000));
    sys.poll();
  }
  CHECK(ran_on == std::this_thread::get_id());
}

TEST_CASE(
    "threaded: a plain thread's continuation runs on a worker, outside the replying actor, and a throw harms nobody",
    "[embedding][concurrent]") {
  courier_test::watchdog wd("threaded host lane");
  hook_log log;
  courier::config cfg;
  cfg.workers = 2;
  cfg.on_continuation_error = &count_hook;
  cfg.continuation_error_user_data = &log;
  courier::system sys{cfg};
  auto c = sys.spawn<counter>();
  c.send(add{2});
  std::atomic<int> ran{0};
  std::thread::id ran_on;
  std::mutex m;
  c.request(get{}).then(
      [&](int v) {
        {
          std::lock_guard lock(m);
          ran_on = std::this_thread::get_id();
        }
        ran.fetch_add(v);
        throw std::runtime_error("host code failed");
      },
      [](const courier::error&) {});
  REQUIRE(courier_test::eventually([&] { return log.calls.load() == 1; }));
  CHECK(ran.load() == 2);
  {
    std::lock_guard lock(m);
    CHECK(ran_on != std::this_thread::get_id());
  }
  CHECK(sys.continuation_failures() == 1);
  // The replying actor never saw the exception: it is alive and keeps its state.
  CHECK(c.ask(get{}, 5s).value() == 2);
  CHECK(sys.live_actors() == 1);
}

TEST_CASE("then(executor): the continuation is handed to the executor, reply, error and time-out alike",
          "[embedding][executor][concurrent]") {
  courier_test::watchdog wd("executor continuations");
  hook_log log;
  courier::config cfg;
  cfg.workers = 1;
  cfg.on_continuation_error = &count_hook;
  cfg.continuation_error_user_data = &log;
  courier::system sys{cfg};
  auto c = sys.spawn<counter>();
  c.send(add{4});
  job_queue q;
  std::atomic<int> values{0};
  std::vector<errc> errors;
  c.request(get{}).then(
      queue_executor{&q}, [&](int v) { values.fetch_add(v); },
      [&](const courier::error& e) { errors.push_back(errc(e.code.value())); });
  c.request(hold{}, 20ms)
      .then(
          queue_executor{&q}, [&](int v) { values.fetch_add(v); },
          [&](const courier::error& e) { errors.push_back(errc(e.code.value())); });
  // One continuation taking the outcome, which throws: the hook hears of it.
  c.request(get{}).then(queue_executor{&q}, [&](courier::result<int> r) {
    if (r.has_value()) throw std::runtime_error("host code failed");
  });
  std::size_t ran = 0;
  REQUIRE(courier_test::eventually([&] {
    ran += q.drain();
    return ran == 3;
  }));
  CHECK(values.load() == 4);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0] == errc::request_timeout);
  CHECK(log.calls.load() == 1);
  // execute() was called on the settling threads (the worker, the timer), never on this one.
  std::lock_guard lock(q.m);
  for (auto id : q.execute_threads) CHECK(id != std::this_thread::get_id());
}

// ----------------------------------------------------------------------------------------------
// The loop contract

TEST_CASE("poll(budget) runs at most the budget and says whether work remains", "[embedding][budget]") {
  courier_test::watchdog wd("poll budget");
  courier::system sys{courier::config::embedded()};
  auto a = sys.spawn<counter>();
  auto b = sys.spawn<counter>();
  for (int i = 0; i < 300; ++i) a.send(add{1});
  for (int i = 0; i < 300; ++i) b.send(add{1});
  CHECK(sys.poll(0).messages == 0);
  courier::run_report r = sys.poll(100);
  CHECK(r.messages == 100);
  CHECK(r.more);
  CHECK(readable(sys.wake_fd(), 0));  // work left: still readable
  std::size_t total = r.messages;
  while (r.more) {
    r = sys.poll(100);
    CHECK(r.messages <= 100);
    total += r.messages;
  }
  CHECK(total == 600);
  CHECK_FALSE(readable(sys.wake_fd(), 0));  // nothing left: cleared
  CHECK(a.ask(get{}, 1s).value() == 300);
  CHECK(b.ask(get{}, 1s).value() == 300);
}

TEST_CASE("wake_fd: every run call clears it; run_one leaves it readable only while work remains",
          "[embedding][wake]") {
  courier_test::watchdog wd("wake fd run_one");
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  c.send(add{1});
  c.send(add{1});
  REQUIRE(readable(sys.wake_fd(), 0));
  REQUIRE(sys.run_one());
  CHECK(readable(sys.wake_fd(), 0));  // one message left
  REQUIRE(sys.run_one());
  // The loop that used run_one() spun here, since only poll() cleared the descriptor.
  CHECK_FALSE(readable(sys.wake_fd(), 0));
  CHECK_FALSE(sys.run_one());
  c.send(add{1});
  REQUIRE(readable(sys.wake_fd(), 0));
  CHECK(sys.fire_due_timers() == 0);  // a run call too: it clears, then re-arms for the work left
  CHECK(readable(sys.wake_fd(), 0));
  CHECK(sys.run_until_idle() == 1);
  CHECK_FALSE(readable(sys.wake_fd(), 0));
}

TEST_CASE("wake_fd works edge-triggered: every send after a run call is a new edge", "[embedding][wake][concurrent]") {
  courier_test::watchdog wd("wake fd edge", 60s);
  courier::config cfg = courier::config::embedded();
  courier::system sys{cfg};
  auto c = sys.spawn<counter>();
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  REQUIRE(ep >= 0);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  REQUIRE(::epoll_ctl(ep, EPOLL_CTL_ADD, sys.wake_fd(), &ev) == 0);
  constexpr int total = 5000;
  std::thread sender([&] {
    for (int i = 0; i < total; ++i) {
      c.send(add{1});
      if (i % 16 == 0) std::this_thread::yield();
    }
  });
  int handled = 0;
  while (handled < total) {
    epoll_event out{};
    const int n = ::epoll_wait(ep, &out, 1, 2000);
    if (n == 0) break;  // a lost edge: the loop would sleep forever
    courier::run_report r;
    do {
      r = sys.poll(64);
      handled += static_cast<int>(r.messages);
    } while (r.more);
  }
  sender.join();
  ::close(ep);
  CHECK(handled == total);
}

TEST_CASE("wake_fd belongs to Courier until the system is destroyed", "[embedding][wake]") {
  int fd = -1;
  {
    courier::system sys{courier::config::embedded()};
    fd = sys.wake_fd();
    REQUIRE(fd >= 0);
    CHECK(sys.shutdown().clean);
    CHECK(sys.wake_fd() == fd);  // still there after shutdown: the host unregisters it
    CHECK(::fcntl(fd, F_GETFD) != -1);
  }
  CHECK(::fcntl(fd, F_GETFD) == -1);  // closed by the destructor, not by the host
}

namespace {
struct wake_counter {
  std::atomic<int> calls{0};
};
void on_wake(void* ctx) { static_cast<wake_counter*>(ctx)->calls.fetch_add(1); }
}  // namespace

TEST_CASE("on_wake: a host without descriptors is called once per batch of new work", "[embedding][wake][concurrent]") {
  courier_test::watchdog wd("on_wake");
  wake_counter w;
  courier::config cfg = courier::config::embedded();
  cfg.on_wake = &on_wake;
  cfg.wake_user_data = &w;
  courier::system sys{cfg};
  CHECK(sys.wake_fd() == -1);  // a callback instead of a descriptor
  auto c = sys.spawn<counter>();
  sys.run_until_idle();
  w.calls.store(0);
  std::thread t([&] {
    for (int i = 0; i < 10; ++i) c.send(add{1});
  });
  t.join();
  CHECK(w.calls.load() == 1);  // once until the host runs
  CHECK(sys.run_until_idle() == 10);
  std::thread t2([&] { c.send(add{1}); });
  t2.join();
  CHECK(w.calls.load() == 2);  // a run call re-arms it
  sys.run_until_idle();
  CHECK(c.ask(get{}, 1s).value() == 11);
}

// ----------------------------------------------------------------------------------------------
// Blocking calls on the host thread

TEST_CASE("embedded: ask from the host thread runs the loop, also inside a host continuation", "[embedding][ask]") {
  courier_test::watchdog wd("ask in continuation");
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  c.send(add{9});
  CHECK(c.ask(get{}, 1s).value() == 9);  // runs the loop itself
  std::optional<courier::result<int>> inner;
  c.request(get{}).then([&](int) { inner = c.ask(get{}, 1s); }, [](const courier::error&) {});
  sys.run_until_idle();
  REQUIRE(inner.has_value());
  REQUIRE(inner->has_value());  // not would_deadlock: this is the host's thread, outside actors
  CHECK(**inner == 9);
}

TEST_CASE("embedded: ask from another thread waits for the host's loop instead of running host code",
          "[embedding][ask][concurrent]") {
  courier_test::watchdog wd("ask from other thread");
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  c.send(add{1});
  sys.run_until_idle();  // this thread drives the system
  std::atomic<bool> host_continuation_ran_elsewhere{false};
  // A host continuation queued before the other thread asks: only this thread may run it.
  c.request(get{}).then(
      [&, host = std::this_thread::get_id()](int) {
        if (std::this_thread::get_id() != host) host_continuation_ran_elsewhere.store(true);
      },
      [](const courier::error&) {});
  std::optional<courier::result<int>> answer;
  std::atomic<bool> answered{false};
  std::thread other([&] {
    answer = c.ask(get{}, 10s);
    answered.store(true);
  });
  while (!answered.load()) {
    if (readable(sys.wake_fd(), 10)) sys.poll();
  }
  other.join();
  REQUIRE(answer.has_value());
  REQUIRE(answer->has_value());
  CHECK(**answer == 1);
  sys.run_until_idle();
  CHECK_FALSE(host_continuation_ran_elsewhere.load());
}

// ----------------------------------------------------------------------------------------------
// Shutdown from a host loop

TEST_CASE("begin_shutdown + stopped: a host loop shuts down without blocking; host continuations still run",
          "[embedding][shutdown]") {
  courier_test::watchdog wd("host loop shutdown");
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  auto d = sys.spawn<counter>();
  c.send(add{1});
  std::optional<courier::error> held_failed;
  c.request(hold{}).then([](int) {}, [&](const courier::error& e) { held_failed = e; });
  sys.run_until_idle();
  CHECK_FALSE(sys.stopped());
  sys.begin_shutdown();
  CHECK_FALSE(sys.stopped());  // the stop requests are queued, not run: begin_shutdown never blocks
  int polls = 0;
  while (!sys.stopped()) {
    REQUIRE(readable(sys.wake_fd(), 1000));
    sys.poll(1);
    ++polls;
  }
  CHECK(polls >= 3);  // two stops and the continuation, one message each
  // The held promise was dropped with its actor: its continuation ran in the host's loop.
  REQUIRE(held_failed.has_value());
  CHECK(*held_failed == errc::broken_promise);
  const auto start = std::chrono::steady_clock::now();
  const courier::shutdown_report report = sys.shutdown();
  CHECK(report.clean);
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  CHECK_THROWS_AS(sys.spawn<counter>(), std::system_error);
  CHECK_FALSE(d.send(add{1}));
}

TEST_CASE("shutdown runs the host continuations still queued on the host's thread, and none after is lost",
          "[embedding][shutdown]") {
  courier_test::watchdog wd("shutdown drains host lane");
  std::optional<courier::error> late;
  std::optional<courier::error> queued;
  courier::actor_ref<counter> c;
  {
    courier::system sys{courier::config::embedded()};
    c = sys.spawn<counter>();
    c.request(hold{}, 10s).then([](int) {}, [&](const courier::error& e) { queued = e; });
    CHECK(sys.shutdown().clean);  // fails the held request; its continuation runs here
    REQUIRE(queued.has_value());
    // After shutdown there is no loop to queue to: the continuation runs where it settles.
    c.request(get{}).then([](int) {}, [&](const courier::error& e) { late = e; });
    REQUIRE(late.has_value());
    CHECK(*late == errc::system_shutdown);  // the actor's exit reason
  }
}

// ----------------------------------------------------------------------------------------------
// Regressions found in review

TEST_CASE("shutdown called from inside a host continuation still runs the continuations queued behind it",
          "[embedding][shutdown]") {
  courier_test::watchdog wd("shutdown inside a continuation");
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  bool shut_down = false;
  bool second_ran = false;
  c.request(get{}).then(
      [&](int) {
        shut_down = sys.shutdown().clean;  // the owning thread, inside the host lane's turn
      },
      [](const courier::error&) {});
  c.request(get{}).then([&](int) { second_ran = true; }, [&](const courier::error&) { second_ran = true; });
  for (int i = 0; i < 100 && !second_ran; ++i) sys.run_one();  // a budget of one message per call
  CHECK(shut_down);
  CHECK(second_ran);
  CHECK_FALSE(readable(sys.wake_fd(), 0));  // nothing stranded: a level-triggered host sleeps
}

TEST_CASE("a timer started while ask drives the system from the host thread wakes the host", "[embedding][timer]") {
  courier_test::watchdog wd("timer during ask");
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  sys.run_until_idle();
  REQUIRE(sys.next_deadline() == std::chrono::steady_clock::time_point::max());
  // Outside any run call (as from an asio handler): ask runs the handler, which starts a timer.
  REQUIRE(c.ask(arm{}, 1s).has_value());
  CHECK(sys.next_deadline() != std::chrono::steady_clock::time_point::max());
  // The host reads next_deadline() only after its own run calls: it must be told.
  CHECK(readable(sys.wake_fd(), 0));
}

namespace {
struct stopped_probe {
  courier::system* sys = nullptr;
  std::atomic<int> calls{0};
  std::atomic<int> stopped_seen{0};
};
void probe_stopped(void* ctx) {
  auto* p = static_cast<stopped_probe*>(ctx);
  p->calls.fetch_add(1);
  if (p->sys != nullptr && p->sys->stopped()) p->stopped_seen.fetch_add(1);  // takes the registry lock
}
}  // namespace

TEST_CASE("on_wake may call back into the system while begin_shutdown asks actors to stop", "[embedding][shutdown]") {
  courier_test::watchdog wd("on_wake during begin_shutdown");
  stopped_probe probe;
  courier::config cfg = courier::config::embedded();
  cfg.on_wake = &probe_stopped;
  cfg.wake_user_data = &probe;
  courier::system sys{cfg};
  probe.sys = &sys;
  auto c = sys.spawn<counter>();
  sys.run_until_idle();
  probe.calls.store(0);
  sys.begin_shutdown();  // used to call on_wake with the registry lock held
  CHECK(probe.calls.load() == 1);
  CHECK(probe.stopped_seen.load() == 0);  // the stop is queued, not run
  while (!sys.stopped()) sys.poll();
  CHECK(sys.shutdown().clean);
}

TEST_CASE("embedded: once another thread drives, asks here only wait: host code stays on the host thread",
          "[embedding][ask][concurrent]") {
  courier_test::watchdog wd("driver moves");
  // Built on this thread (the first driver), then driven by another.
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  std::atomic<bool> stop{false};
  std::atomic<bool> polled{false};
  std::atomic<std::thread::id> host_id{};
  std::thread host([&] {
    host_id.store(std::this_thread::get_id());
    while (!stop.load()) {
      sys.poll();
      polled.store(true);
      std::this_thread::yield();
    }
  });
  while (!polled.load()) std::this_thread::yield();
  std::atomic<int> elsewhere{0};
  std::atomic<int> ran{0};
  for (int i = 0; i < 200; ++i) {
    c.request(get{}).then(
        [&](int) {
          if (std::this_thread::get_id() != host_id.load()) elsewhere.fetch_add(1);
          ran.fetch_add(1);
        },
        [](const courier::error&) {});
    REQUIRE(c.ask(get{}, 5s).has_value());  // answered by the host's loop
  }
  REQUIRE(courier_test::eventually([&] { return ran.load() == 200; }));
  stop.store(true);
  host.join();
  CHECK(elsewhere.load() == 0);
}
