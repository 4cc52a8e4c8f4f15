#include "courier/asio.hpp"

#include <catch2/catch.hpp>

#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>

#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "courier/courier.hpp"
#include "courier/executor.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;

namespace {

struct add {
  int amount;
};
struct get {};
struct sample {
  int total;
  std::thread::id thread;  // where the handler ran
};
struct stop_now {};

class counter : public courier::actor<counter, add, get, stop_now> {
 public:
  explicit counter(std::atomic<int>* stops = nullptr, std::chrono::milliseconds get_delay = {})
      : stops_(stops), get_delay_(get_delay) {}
  void on(const add& m) {
    total_ += m.amount;
    arrivals_.push_back(std::chrono::steady_clock::now());
  }
  sample on(const get&) {
    if (get_delay_ > 0ms) std::this_thread::sleep_for(get_delay_);  // a slow reply (threaded tests only)
    return {total_, std::this_thread::get_id()};
  }
  void on(const stop_now&) { stop(); }
  void on_stop() {
    if (stops_ != nullptr) stops_->fetch_add(1);
  }

 private:
  std::atomic<int>* stops_;
  std::chrono::milliseconds get_delay_;
  int total_ = 0;
  std::vector<std::chrono::steady_clock::time_point> arrivals_;
};

/// Never answers: its requests end only by their time-out (or by shutdown).
struct hold {};
class silent : public courier::actor<silent, hold> {
 public:
  courier::response_promise<int> on(const hold&) {
    kept_.push_back(make_response_promise<int>());
    return kept_.back();
  }
  void on_stop() { kept_.clear(); }

 private:
  std::vector<courier::response_promise<int>> kept_;
};

/// Sends itself `left` more messages, one per handler, so it is never idle until done.
struct more {
  int left;
};
class chatter : public courier::actor<chatter, more> {
 public:
  explicit chatter(int* handled) : handled_(handled) {}
  void on(const more& m) {
    ++*handled_;
    if (m.left > 0) self().send(more{m.left - 1});
  }

 private:
  int* handled_;
};

/// Runs `io` until `done()` holds or `limit` passes; returns done().
template <class Predicate>
bool run_until(::asio::io_context& io, Predicate done, std::chrono::milliseconds limit = 10s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until) {
    if (io.stopped()) io.restart();
    io.run_one_for(10ms);
  }
  return done();
}

/// async_shutdown, then runs `io` until it runs out of work: that it does (well before the
/// limit) shows that the loop let go of the descriptor and the timer.
courier::shutdown_report shut_down(::asio::io_context& io, courier::asio::embedded_loop& loop) {
  std::optional<courier::shutdown_report> report;
  ::asio::post(io, [&] { loop.async_shutdown([&](courier::shutdown_report r) { report = std::move(r); }); });
  if (io.stopped()) io.restart();
  const auto start = std::chrono::steady_clock::now();
  io.run_for(10s);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  REQUIRE(report.has_value());
  return *report;
}

bool fd_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

/// The two ways a loop learns that work is ready: wake_fd (config::embedded()), or on_wake
/// posting to the io_context (embedded_config: no eventfd). `io` must outlive the system.
courier::config config_for(::asio::io_context& io, bool by_post) {
  return by_post ? courier::asio::embedded_config(io) : courier::config::embedded();
}

}  // namespace

static_assert(courier::executor<courier::asio::executor<::asio::io_context::executor_type>>);

TEST_CASE("asio embedded_loop: actors and host continuations run on the io thread, never inline", "[asio][embedded]") {
  courier_test::watchdog wd("asio io thread");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys);
  auto c = sys.spawn<counter>();

  std::thread::id io_thread;
  std::optional<sample> got;
  std::thread::id continuation_thread;
  bool then_returned = false;
  bool ran_inline = false;
  ::asio::post(io, [&] {
    io_thread = std::this_thread::get_id();
    CHECK(c.send(add{2}));
    CHECK(c.send(add{40}));
    c.request(get{}, 5s).then(
        [&](sample s) {
          ran_inline = !then_returned;
          continuation_thread = std::this_thread::get_id();
          got = s;
        },
        [](const courier::error& e) { FAIL(e.describe()); });
    then_returned = true;
  });
  REQUIRE(run_until(io, [&] { return got.has_value(); }));
  CHECK(got->total == 42);
  CHECK(got->thread == io_thread);          // the actor ran in one of asio's handlers
  CHECK(continuation_thread == io_thread);  // the host lane too
  CHECK_FALSE(ran_inline);
  CHECK(shut_down(io, loop).clean);
}

TEST_CASE("asio embedded_loop: sends from another thread wake the loop", "[asio][embedded][concurrent]") {
  courier_test::watchdog wd("asio cross-thread wake", 60s);
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys, 16);
  int handled = 0;
  auto c = sys.spawn<chatter>(&handled);  // `handled` is touched only on the io thread

  constexpr int senders = 2;
  constexpr int per_sender = 2000;
  std::atomic<int> refused{0};  // Catch's assertions are for the test's own thread
  std::vector<std::thread> threads;
  for (int t = 0; t < senders; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < per_sender; ++i) {
        if (!c.send(more{0})) refused.fetch_add(1);
        if (i % 256 == 0) std::this_thread::sleep_for(1ms);  // let the loop go idle and be woken again
      }
    });
  const bool all = run_until(
      io, [&] { return handled == senders * per_sender; }, 30s);
  for (auto& t : threads) t.join();
  CHECK(refused == 0);
  REQUIRE(all);
  CHECK(shut_down(io, loop).clean);
  CHECK(handled == senders * per_sender);
}

TEST_CASE("asio embedded_loop: delayed sends and request time-outs fire from asio's timer", "[asio][embedded]") {
  courier_test::watchdog wd("asio timers");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys);
  auto c = sys.spawn<counter>();
  auto s = sys.spawn<silent>();

  const auto start = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::duration> timed_out_after;
  std::optional<courier::error> why;
  std::optional<sample> late;
  ::asio::post(io, [&] {
    // From the io thread, outside any turn: the new deadline must still reach the loop's timer.
    (void)c.delayed_send(add{7}, 60ms);
    s.request(hold{}, 30ms)
        .then([](int) { FAIL("a silent actor answered"); },
              [&](const courier::error& e) {
                timed_out_after = std::chrono::steady_clock::now() - start;
                why = e;
              });
  });
  REQUIRE(run_until(io, [&] { return why.has_value(); }));
  CHECK(*why == errc::request_timeout);
  CHECK(*timed_out_after >= 30ms);

  // The delayed add arrives after its delay: a get after it sees 7.
  ::asio::steady_timer after(io, 120ms);
  after.async_wait([&](std::error_code) {
    c.request(get{}, 1s).then([&](sample v) { late = v; }, [](const courier::error& e) { FAIL(e.describe()); });
  });
  REQUIRE(run_until(io, [&] { return late.has_value(); }));
  CHECK(late->total == 7);
  CHECK(shut_down(io, loop).clean);
}

TEST_CASE("asio embedded_loop: a delayed send alone (no message) is fired on time", "[asio][embedded]") {
  courier_test::watchdog wd("asio delayed send alone");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys);
  int handled = 0;
  auto c = sys.spawn<chatter>(&handled);
  REQUIRE(run_until(io, [&] { return sys.next_deadline() == std::chrono::steady_clock::time_point::max(); }));

  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration took{};
  ::asio::post(io, [&] { (void)c.delayed_send(more{0}, 40ms); });
  REQUIRE(run_until(io, [&] { return handled == 1; }));
  took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 40ms);
  CHECK(took < 5s);
  CHECK(shut_down(io, loop).clean);
}

TEST_CASE("asio embedded_loop: a busy actor does not starve asio's other handlers", "[asio][embedded]") {
  courier_test::watchdog wd("asio fairness");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys, 16);
  int handled = 0;
  auto c = sys.spawn<chatter>(&handled);
  constexpr int total = 20'000;

  int ticks_while_busy = 0;
  std::function<void()> tick = [&] {
    if (handled > 0 && handled < total + 1) ++ticks_while_busy;
    if (handled < total + 1) ::asio::post(io, tick);
  };
  ::asio::post(io, [&] {
    REQUIRE(c.send(more{total}));
    ::asio::post(io, tick);
  });
  REQUIRE(run_until(
      io, [&] { return handled == total + 1; }, 30s));
  // 20,001 messages at 16 a turn is 1,251 turns; the ticker re-posts itself each time it runs, so
  // it runs between turns. Far fewer would mean the loop ran the actor without yielding.
  CHECK(ticks_while_busy > 100);
  CHECK(shut_down(io, loop).clean);
}

TEST_CASE("asio embedded_loop: async_shutdown stops every actor and leaves wake_fd open", "[asio][embedded]") {
  courier_test::watchdog wd("asio shutdown");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys);
  std::atomic<int> stops{0};
  auto a = sys.spawn<counter>(&stops);
  auto b = sys.spawn<counter>(&stops);
  auto s = sys.spawn<silent>();
  (void)sys.spawn<counter>(&stops);

  std::optional<courier::error> pending_failed;
  bool running = false;
  ::asio::post(io, [&] {
    (void)a.send(add{1});
    s.request(hold{}, courier::infinite)
        .then([](int) { FAIL("a silent actor answered"); }, [&](const courier::error& e) { pending_failed = e; });
    b.request(get{}, 1s).then([&](sample) { running = true; }, [](const courier::error& e) { FAIL(e.describe()); });
  });
  REQUIRE(run_until(io, [&] { return running; }));
  CHECK(sys.live_actors() == 4);
  CHECK_FALSE(sys.stopped());

  const int fd = sys.wake_fd();
  const courier::shutdown_report report = shut_down(io, loop);  // io.run returns: nothing left in asio
  CHECK(report.clean);
  CHECK(report.unfinished.empty());
  CHECK(stops == 3);
  CHECK(sys.stopped());
  CHECK(sys.live_actors() == 0);
  CHECK_FALSE(loop.driving());
  REQUIRE(pending_failed.has_value());  // the host continuation ran before the report
  CHECK((*pending_failed == errc::actor_stopped || *pending_failed == errc::system_shutdown ||
         *pending_failed == errc::broken_promise));
  if (by_post)
    CHECK(fd == -1);  // on_wake instead: no eventfd at all
  else
    CHECK(fd_open(fd));  // released from asio, never closed: the system still owns it
  CHECK_FALSE(a.send(add{1}));

  // Asked again, it completes with the same report, asynchronously.
  std::optional<courier::shutdown_report> again;
  bool returned = false;
  ::asio::post(io, [&] {
    loop.async_shutdown([&](courier::shutdown_report r) {
      CHECK(returned);
      again = std::move(r);
    });
    returned = true;
  });
  io.restart();
  io.run_for(5s);
  REQUIRE(again.has_value());
  CHECK(again->clean);
}

TEST_CASE("asio embedded_loop: ask from an asio handler on the io thread runs the system while it waits",
          "[asio][embedded]") {
  courier_test::watchdog wd("asio ask on the io thread");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys);
  auto c = sys.spawn<counter>();
  std::optional<courier::result<sample>> asked;
  std::optional<courier::result<sample>> asked_in_continuation;
  ::asio::post(io, [&] {
    (void)c.send(add{4});
    asked = c.ask(get{}, 5s);  // the io thread drives the system: ask runs it meanwhile
    c.request(get{}, 5s).then([&](sample) { asked_in_continuation = c.ask(get{}, 5s); },
                              [](const courier::error& e) { FAIL(e.describe()); });
  });
  REQUIRE(run_until(io, [&] { return asked_in_continuation.has_value(); }));
  REQUIRE(asked->has_value());
  CHECK((*asked)->total == 4);
  REQUIRE(asked_in_continuation->has_value());
  CHECK((*asked_in_continuation)->total == 4);
  CHECK(shut_down(io, loop).clean);
}

TEST_CASE("asio embedded_loop: async_shutdown past its deadline completes with system::shutdown's report",
          "[asio][embedded]") {
  courier_test::watchdog wd("asio shutdown deadline");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys, 16);
  int handled = 0;
  auto c = sys.spawn<chatter>(&handled);
  std::optional<courier::shutdown_report> report;
  ::asio::post(io, [&] {
    (void)c.send(more{0});
    for (int i = 0; i < 1000; ++i) (void)c.send(more{0});  // far more than one turn's budget
    loop.async_shutdown(courier::timespan::zero(), [&](courier::shutdown_report r) { report = std::move(r); });
  });
  const auto start = std::chrono::steady_clock::now();
  io.run_for(10s);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  REQUIRE(report.has_value());
  CHECK_FALSE(loop.driving());
  // The deadline passed before 1,001 messages could drain at 16 a turn: shutdown(0) names the
  // chatter, and that report is what async_shutdown completes with.
  CHECK_FALSE(report->clean);
  CHECK(report->unfinished.size() == 1);
  CHECK(handled < 1001);
}

TEST_CASE("asio embedded_loop: async_shutdown of an empty system completes at once", "[asio][embedded]") {
  courier_test::watchdog wd("asio empty shutdown");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys);
  CHECK(shut_down(io, loop).clean);
  CHECK(sys.stopped());
}

TEST_CASE("asio embedded_loop: async_shutdown asked from a host continuation, inside a turn", "[asio][embedded]") {
  courier_test::watchdog wd("asio shutdown from a continuation");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys);
  std::atomic<int> stops{0};
  auto c = sys.spawn<counter>(&stops);
  std::optional<courier::shutdown_report> report;
  ::asio::post(io, [&] {
    c.request(get{}, 1s).then(
        [&](sample) { loop.async_shutdown([&](courier::shutdown_report r) { report = std::move(r); }); },
        [](const courier::error& e) { FAIL(e.describe()); });
  });
  const auto start = std::chrono::steady_clock::now();
  io.run_for(10s);  // returns once the loop has let go of everything
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  REQUIRE(report.has_value());
  CHECK(report->clean);
  CHECK(stops == 1);
  CHECK(sys.stopped());
}

TEST_CASE("asio embedded_loop: an async_shutdown still queued when the loop is destroyed completes, unclean",
          "[asio][embedded]") {
  courier_test::watchdog wd("asio shutdown after the loop");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  std::optional<courier::shutdown_report> report;
  {
    courier::system sys{config_for(io, by_post)};
    courier::asio::embedded_loop loop(io, sys);
    (void)sys.spawn<counter>();
    loop.async_shutdown([&](courier::shutdown_report r) { report = std::move(r); });  // posted, not run yet
  }  // the loop, then the system: the queued request must not reach either
  io.run_for(5s);
  REQUIRE(report.has_value());
  CHECK_FALSE(report->clean);
}

TEST_CASE("asio embedded_loop: destroyed before its system, it releases wake_fd and the system goes on",
          "[asio][embedded]") {
  courier_test::watchdog wd("asio loop destroyed");
  courier::system sys{courier::config::embedded()};
  auto c = sys.spawn<counter>();
  {
    ::asio::io_context io;
    courier::asio::embedded_loop loop(io, sys);
    std::optional<sample> got;
    ::asio::post(io, [&] {
      (void)c.send(add{5});
      c.request(get{}, 1s).then([&](sample s) { got = s; }, [](const courier::error& e) { FAIL(e.describe()); });
    });
    REQUIRE(run_until(io, [&] { return got.has_value(); }));
    CHECK(got->total == 5);
    loop.stop();
    CHECK_FALSE(loop.driving());
    // Stopped: the io_context has nothing of the loop's left to wait for.
    io.restart();
    const auto start = std::chrono::steady_clock::now();
    io.run_for(5s);
    CHECK(std::chrono::steady_clock::now() - start < 2s);
  }
  REQUIRE(fd_open(sys.wake_fd()));
  (void)c.send(add{1});
  sys.run_until_idle();
  CHECK(c.ask(get{}, 1s).value().total == 6);  // the driving thread runs the loop while it waits
  CHECK(sys.shutdown(1s).clean);
}

TEST_CASE("asio embedded_loop: refuses a system that is not embedded or has no wake_fd", "[asio]") {
  ::asio::io_context io;
  courier::config cfg;
  cfg.workers = 1;
  courier::system threaded{cfg};
  CHECK_THROWS_AS(courier::asio::embedded_loop(io, threaded), std::invalid_argument);
  courier::system deterministic{courier::config::deterministic()};
  CHECK_THROWS_AS(courier::asio::embedded_loop(io, deterministic), std::invalid_argument);
  courier::system embedded{courier::config::embedded()};
  CHECK_THROWS_AS(courier::asio::embedded_loop(io, embedded, 0), std::invalid_argument);
  courier::config woken = courier::config::embedded();
  woken.on_wake = [](void*) {};  // no eventfd then: nothing for the loop to wait on
  courier::system without_fd{woken};
  CHECK_THROWS_AS(courier::asio::embedded_loop(io, without_fd), std::invalid_argument);
  courier::system relayed{courier::asio::embedded_config(io)};
  courier::asio::embedded_loop first(io, relayed);
  CHECK_THROWS_AS(courier::asio::embedded_loop(io, relayed), std::invalid_argument);  // one loop per system
}

TEST_CASE("asio async_request: co_await in embedded mode", "[asio][embedded]") {
  courier_test::watchdog wd("asio co_await embedded");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys);
  auto c = sys.spawn<counter>();
  auto s = sys.spawn<silent>();
  auto gone = sys.spawn<counter>();

  std::optional<courier::result<sample>> value;
  std::optional<courier::result<int>> timed_out;
  std::optional<courier::result<sample>> stopped;
  std::optional<courier::result<courier::unit>> unit_reply;
  std::thread::id io_thread;
  std::thread::id resumed_on;
  bool finished = false;
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        io_thread = std::this_thread::get_id();
        (void)c.send(add{42});
        value = co_await courier::asio::async_request(c, get{}, 1s, ::asio::use_awaitable);
        resumed_on = std::this_thread::get_id();
        timed_out = co_await courier::asio::async_request(s, hold{}, 20ms, ::asio::use_awaitable);
        (void)gone.send(stop_now{});  // the get queued behind it fails when the actor stops
        stopped = co_await courier::asio::async_request(gone, get{}, 1s, ::asio::use_awaitable);
        unit_reply = co_await courier::asio::async_request(c, add{1}, 1s, ::asio::use_awaitable);
        finished = true;
      },
      ::asio::detached);
  REQUIRE(run_until(io, [&] { return finished; }));
  REQUIRE(value->has_value());
  CHECK((*value)->total == 42);
  CHECK(resumed_on == io_thread);
  REQUIRE_FALSE(timed_out->has_value());
  CHECK(timed_out->error() == errc::request_timeout);
  REQUIRE_FALSE(stopped->has_value());
  CHECK(stopped->error() == errc::actor_stopped);
  CHECK(unit_reply->has_value());
  CHECK(shut_down(io, loop).clean);
}

TEST_CASE("asio async_request: a callback without an executor runs on the host lane; none runs inline",
          "[asio][embedded]") {
  courier_test::watchdog wd("asio callback host lane");
  const bool by_post = GENERATE(false, true);
  CAPTURE(by_post);
  ::asio::io_context io;
  courier::system sys{config_for(io, by_post)};
  courier::asio::embedded_loop loop(io, sys);
  auto c = sys.spawn<counter>();
  std::optional<courier::result<sample>> got;
  std::optional<courier::result<sample>> failed;
  std::thread::id io_thread;
  std::thread::id ran_on;
  bool returned = false;
  ::asio::post(io, [&] {
    io_thread = std::this_thread::get_id();
    (void)c.send(add{3});
    courier::asio::async_request(c, get{}, 1s, [&](courier::result<sample> r) {
      CHECK(returned);
      ran_on = std::this_thread::get_id();
      got = std::move(r);
    });
    // Through an empty ref there is no host lane to run on: it throws, as then() does...
    CHECK_THROWS_AS(courier::asio::async_request(courier::actor_ref<counter>{}, get{}, 1s,
                                                 [](courier::result<sample>) { FAIL("ran without a system"); }),
                    std::system_error);
    // ...and with an executor the handler is told, later.
    courier::asio::async_request(courier::actor_ref<counter>{}, get{}, 1s,
                                 ::asio::bind_executor(io, [&](courier::result<sample> r) {
                                   CHECK(returned);
                                   failed = std::move(r);
                                 }));
    returned = true;
  });
  REQUIRE(run_until(io, [&] { return got.has_value() && failed.has_value(); }));
  REQUIRE(got->has_value());
  CHECK((*got)->total == 3);
  CHECK(ran_on == io_thread);
  CHECK(failed->error() == errc::empty_reference);
  CHECK(shut_down(io, loop).clean);
}

TEST_CASE("asio executor: threaded mode posts continuations to the io thread", "[asio][threaded][concurrent]") {
  courier_test::watchdog wd("asio threaded executor", 60s);
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto c = sys.spawn<counter>(nullptr, 30ms);  // a slow reply: io.run() must wait for it
  (void)c.send(add{9});

  ::asio::io_context io;
  const std::thread::id io_thread = std::this_thread::get_id();  // this thread runs io

  std::optional<sample> by_then;
  std::thread::id then_ran_on;
  {
    auto guard = ::asio::make_work_guard(io);  // executor() alone does not keep run() going
    c.request(get{}, 5s).then(
        courier::asio::executor(io),
        [&](sample s) {
          then_ran_on = std::this_thread::get_id();
          by_then = s;
          guard.reset();
        },
        [&](const courier::error& e) {
          guard.reset();
          FAIL(e.describe());
        });
    io.run_for(10s);
  }
  REQUIRE(by_then.has_value());
  CHECK(by_then->total == 9);
  CHECK(by_then->thread != io_thread);  // the actor ran on a worker
  CHECK(then_ran_on == io_thread);

  std::optional<courier::result<sample>> by_result;
  c.request(get{}, 5s).then(courier::asio::executor(io.get_executor()), [&](courier::result<sample> r) {
    CHECK(std::this_thread::get_id() == io_thread);
    by_result = std::move(r);
  });
  while (!by_result) {  // no guard here: poll until the reply has been posted
    io.restart();
    io.run_for(10ms);
  }
  CHECK((*by_result)->total == 9);

  // async_request keeps the io_context busy itself: run() returns only after the handler ran.
  std::optional<courier::result<sample>> by_callback;
  std::optional<courier::result<sample>> by_coroutine;
  io.restart();
  courier::asio::async_request(c, get{}, 5s, ::asio::bind_executor(io, [&](courier::result<sample> r) {
                                 CHECK(std::this_thread::get_id() == io_thread);
                                 by_callback = std::move(r);
                               }));
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        by_coroutine = co_await courier::asio::async_request(c, get{}, 5s, ::asio::use_awaitable);
        CHECK(std::this_thread::get_id() == io_thread);
      },
      ::asio::detached);
  io.run_for(10s);
  REQUIRE(by_callback.has_value());
  CHECK((*by_callback)->total == 9);
  REQUIRE(by_coroutine.has_value());
  CHECK((*by_coroutine)->total == 9);
  CHECK(sys.shutdown(5s).clean);
}

namespace {
int continuation_errors = 0;  // written by on_continuation_error, which runs on the io thread here
}

TEST_CASE("asio executor: a throwing continuation is reported, not thrown out of io.run()",
          "[asio][threaded][concurrent]") {
  courier_test::watchdog wd("asio throwing continuation");
  continuation_errors = 0;
  courier::config cfg;
  cfg.workers = 1;
  cfg.on_continuation_error = [](const courier::error&, void*) { ++continuation_errors; };
  courier::system sys{cfg};
  auto c = sys.spawn<counter>();
  ::asio::io_context io;
  auto guard = ::asio::make_work_guard(io);
  bool ran = false;
  c.request(get{}, 5s).then(
      courier::asio::executor(io),
      [&](sample) {
        ran = true;
        guard.reset();
        throw std::runtime_error("continuation failed");
      },
      [&](const courier::error&) { guard.reset(); });
  CHECK_NOTHROW(io.run_for(10s));
  CHECK(ran);
  CHECK(continuation_errors == 1);
  CHECK(sys.continuation_failures() == 1);
  CHECK(sys.shutdown(5s).clean);
}
