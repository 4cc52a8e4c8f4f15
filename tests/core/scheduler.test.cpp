#include "courier/config.hpp"

#include <catch2/catch.hpp>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "courier/system.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COURIER_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define COURIER_TEST_SANITIZED 1
#endif
#endif
#ifndef COURIER_TEST_SANITIZED
#define COURIER_TEST_SANITIZED 0
#endif

namespace {

/// Handlers that meet: each waits until `want` of them are inside a handler at the same time. Only
/// actors running in parallel, on different workers, can all get through.
struct rendezvous {
  int want = 2;
  std::atomic<int> arrived{0};
  std::atomic<int> timed_out{0};
  std::mutex mutex;
  std::set<std::thread::id> threads;
};

struct meet {};
class meeter : public courier::actor<meeter, meet> {
 public:
  explicit meeter(rendezvous* r) : r_(r) {}
  void on(const meet&) {
    {
      std::lock_guard lock(r_->mutex);
      r_->threads.insert(std::this_thread::get_id());
    }
    r_->arrived.fetch_add(1);
    if (!courier_test::eventually([this] { return r_->arrived.load() >= r_->want; }, 10s)) r_->timed_out.fetch_add(1);
  }

 private:
  rendezvous* r_;
};

/// Sends `meet` to a list of actors from a handler, so they land on this worker's own queues.
struct fan_out {
  std::vector<courier::actor_ref<meeter>> targets;
};
class spawner : public courier::actor<spawner, fan_out> {
 public:
  void on(const fan_out& f) {
    for (const auto& t : f.targets) t.send(meet{});
  }
};

struct add {
  int n;
};
struct get {};
class counter : public courier::actor<counter, add, get> {
 public:
  void on(const add& m) { total_ += m.n; }
  long on(const get&) { return total_; }

 private:
  long total_ = 0;
};

/// Request/reply ping-pong between two actors, `rounds` times, then flags `done`.
struct ping {
  int n;
};
class ponger : public courier::actor<ponger, ping> {
 public:
  int on(const ping& p) { return p.n + 1; }
};
struct start {
  courier::actor_ref<ponger> peer;
  int rounds;
  std::atomic<int>* done;
};
class pinger : public courier::actor<pinger, start> {
 public:
  void on(const start& s) {
    peer_ = s.peer;
    rounds_ = s.rounds;
    done_ = s.done;
    next(0);
  }

 private:
  void next(int n) {
    if (n >= rounds_) {
      done_->store(n);
      return;
    }
    peer_.request(ping{n}).then([this](int m) { next(m); }, [this](const courier::error&) { done_->store(-1); });
  }
  courier::actor_ref<ponger> peer_;
  int rounds_ = 0;
  std::atomic<int>* done_ = nullptr;
};

struct spin {};
class flooder : public courier::actor<flooder, spin> {
 public:
  explicit flooder(std::atomic<long>* n) : n_(n) {}
  void on(const spin&) {
    n_->fetch_add(1, std::memory_order_relaxed);
    self().send(spin{});
  }

 private:
  std::atomic<long>* n_;
};

std::chrono::nanoseconds process_cpu_time() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

}  // namespace

// The defaults docs/guide/actors.md documents; the manual modes' factories run one message per step.
static_assert(courier::config{}.mode == courier::scheduling::threaded && courier::config{}.workers == 0);
static_assert(courier::config{}.throughput == 128 && courier::config{}.spin_rounds > 0);
static_assert(courier::config::deterministic().mode == courier::scheduling::deterministic &&
              courier::config::deterministic().throughput == 1);
static_assert(courier::config::embedded().mode == courier::scheduling::embedded);

TEST_CASE("the worker count follows the config", "[scheduler][concurrent]") {
  courier_test::watchdog wd("worker count");
  for (std::size_t n : {1u, 2u, 3u}) {
    courier::config cfg;
    cfg.workers = n;
    courier::system sys{cfg};
    CHECK(sys.worker_count() == n);
    CHECK(sys.wake_fd() == -1);
  }
  {
    courier::config cfg;  // 0: one per hardware thread
    courier::system sys{cfg};
    const std::size_t hw = std::max(1u, std::thread::hardware_concurrency());
    CHECK(sys.worker_count() == std::min<std::size_t>(hw, 64));
  }
  {
    courier::config cfg;
    cfg.workers = 64;
    courier::system sys{cfg};
    CHECK(sys.worker_count() == 64);
    cfg.workers = 100;  // more than the idle mask's 64 bits: rejected, not clamped
    CHECK_THROWS_AS(courier::system{cfg}, std::invalid_argument);
  }
  CHECK(courier::system{courier::config::deterministic()}.worker_count() == 0);
}

TEST_CASE("one worker still runs every actor", "[scheduler][concurrent]") {
  courier_test::watchdog wd("one worker");
  courier::config cfg;
  cfg.workers = 1;
  courier::system sys{cfg};
  std::vector<courier::actor_ref<counter>> actors;
  for (int i = 0; i < 50; ++i) actors.push_back(sys.spawn<counter>());
  for (int round = 0; round < 20; ++round)
    for (auto& a : actors) a.send(add{round});
  for (auto& a : actors) {
    auto r = a.ask(get{}, 10s);
    REQUIRE(r.has_value());
    CHECK(*r == 190);
  }
}

TEST_CASE("actors sent work from outside run in parallel on two workers", "[scheduler][concurrent]") {
  courier_test::watchdog wd("parallel workers", 30s);
  rendezvous r;
  r.want = 2;
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto a = sys.spawn<meeter>(&r);
  auto b = sys.spawn<meeter>(&r);
  a.send(meet{});
  b.send(meet{});
  REQUIRE(courier_test::eventually([&] { return r.arrived.load() == 2; }, 15s));
  CHECK(sys.shutdown(15s).clean);
  CHECK(r.timed_out.load() == 0);
  CHECK(r.threads.size() == 2);
}

TEST_CASE("an idle worker steals actors queued on a busy worker", "[scheduler][concurrent]") {
  courier_test::watchdog wd("work stealing", 30s);
  rendezvous r;
  r.want = 2;
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  fan_out f;
  for (int i = 0; i < 8; ++i) f.targets.push_back(sys.spawn<meeter>(&r));
  auto s = sys.spawn<spawner>();
  // All eight are woken from one handler, so they all land on that worker's own run queue;
  // the first blocks until a second meets it, which only a thief can run.
  s.send(std::move(f));
  REQUIRE(courier_test::eventually([&] { return r.arrived.load() == 8; }, 15s));
  CHECK(sys.shutdown(15s).clean);
  CHECK(r.timed_out.load() == 0);
  CHECK(r.threads.size() >= 2);
}

TEST_CASE("many actors with many messages: nothing lost across workers", "[scheduler][concurrent]") {
  courier_test::watchdog wd("many actors", 30s);
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  std::vector<courier::actor_ref<counter>> actors;
  for (int i = 0; i < 64; ++i) actors.push_back(sys.spawn<counter>());
  std::vector<std::thread> producers;
  for (int t = 0; t < 2; ++t)
    producers.emplace_back([&] {
      for (int i = 1; i <= 200; ++i)
        for (auto& a : actors) a.send(add{i});
    });
  for (auto& p : producers) p.join();
  for (auto& a : actors) {
    auto r = a.ask(get{}, 10s);
    REQUIRE(r.has_value());
    CHECK(*r == 2 * 200 * 201 / 2);
  }
}

TEST_CASE("request/reply ping-pong between actors completes, even when workers park at once",
          "[scheduler][concurrent]") {
  courier_test::watchdog wd("ping pong parking", 40s);
  for (std::uint32_t spin_rounds : {0u, 64u}) {
    INFO("spin_rounds " << spin_rounds);
    courier::config cfg;
    cfg.workers = 2;
    cfg.spin_rounds = spin_rounds;
    courier::system sys{cfg};
    std::atomic<int> done{0};
    auto pong = sys.spawn<ponger>();
    auto p = sys.spawn<pinger>();
    p.send(start{pong, 2000, &done});
    CHECK(courier_test::eventually([&] { return done.load() != 0; }, 20s));
    CHECK(done.load() == 2000);
  }
}

TEST_CASE("a self-sending actor cannot starve others, even on one worker", "[scheduler][concurrent]") {
  courier_test::watchdog wd("fairness", 30s);
  courier::config cfg;
  cfg.workers = 1;
  cfg.throughput = 16;
  courier::system sys{cfg};
  std::atomic<long> spins{0};
  auto f = sys.spawn<flooder>(&spins);
  auto c = sys.spawn<counter>();
  f.send(spin{});
  REQUIRE(courier_test::eventually([&] { return spins.load() > 1000; }));
  for (int i = 0; i < 5; ++i) {
    c.send(add{1});
    auto r = c.ask(get{}, 10s);
    REQUIRE(r.has_value());
    CHECK(*r == i + 1);
  }
  f.stop();  // the stop request overtakes the endless self-sends
  CHECK(courier_test::eventually([&] { return sys.live_actors() == 1; }));
}

TEST_CASE("an idle threaded system parks its workers and uses almost no CPU", "[scheduler][concurrent][idle]") {
  if (COURIER_TEST_SANITIZED) {
    WARN("skipped under sanitizers: their runtime threads use CPU of their own");
    return;
  }
  courier_test::watchdog wd("idle parking", 30s);
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  std::vector<courier::actor_ref<counter>> actors;
  for (int i = 0; i < 8; ++i) actors.push_back(sys.spawn<counter>());
  for (int i = 0; i < 100; ++i)
    for (auto& a : actors) a.send(add{1});
  for (auto& a : actors) REQUIRE(a.ask(get{}, 10s).has_value());
  std::this_thread::sleep_for(100ms);  // let the workers finish spinning and park

  const auto cpu_before = process_cpu_time();
  const auto wall_before = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(300ms);
  const auto cpu_used = process_cpu_time() - cpu_before;
  const auto wall = std::chrono::steady_clock::now() - wall_before;
  INFO("CPU time over " << std::chrono::duration_cast<std::chrono::milliseconds>(wall).count() << " ms idle: "
                        << std::chrono::duration_cast<std::chrono::microseconds>(cpu_used).count() << " us");
  CHECK(cpu_used < 50ms);

  // Parked workers wake up again for new work.
  actors[0].send(add{5});
  auto r = actors[0].ask(get{}, 10s);
  REQUIRE(r.has_value());
  CHECK(*r == 105);
}
