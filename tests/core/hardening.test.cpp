// Regression tests for core hardening: reference lifetime across shutdown, spawn racing shutdown,
// shutdown deadlines, continuations of plain threads, leaks on crash and on throwing messages,
// alignment of actors and messages.
#include "courier/system.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "fixtures.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;
using courier_test::add;
using courier_test::boom;
using courier_test::counter;  // add, get, quit; boom throws
using courier_test::get;
using courier_test::quit;

namespace {

bool aligned_to(const void* p, std::size_t alignment) { return reinterpret_cast<std::uintptr_t>(p) % alignment == 0; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// References after shutdown

TEST_CASE("every ref operation fails cleanly after shutdown, and after the system is gone", "[hardening][shutdown]") {
  courier_test::watchdog wd("refs after shutdown");
  std::optional<courier::system> sys;
  sys.emplace(courier::config::deterministic());
  auto c = sys->spawn<counter>();
  c.send(add{1, 2});
  REQUIRE(sys->shutdown(5s).clean);

  auto check_all = [&] {
    CHECK_FALSE(c.send(add{1, 1}));
    auto r = c.ask(get{}, 1s);
    REQUIRE_FALSE(r.has_value());
    CHECK((r.err() == errc::actor_stopped || r.err() == errc::system_shutdown));
    for (auto timeout : {courier::infinite, courier::timespan(10ms)}) {
      std::optional<courier::error> failed;
      bool replied = false;
      c.request(get{}, timeout).then([&](int) { replied = true; }, [&](const courier::error& e) { failed = e; });
      REQUIRE(failed.has_value());
      CHECK((*failed == errc::actor_stopped || *failed == errc::system_shutdown));
      CHECK_FALSE(replied);
    }
    c.delayed_send(add{1, 1}, 1ms);
    c.stop();
  };
  check_all();
  sys.reset();  // destroying the system with live refs is allowed
  check_all();
  CHECK(c.id() != 0);
}

TEST_CASE("plain threads sending while shutdown runs see clean failures", "[hardening][shutdown][concurrent]") {
  courier_test::watchdog wd("send during shutdown", 60s);
  for (int round = 0; round < 20; ++round) {
    courier::config cfg;
    cfg.workers = 2;
    std::optional<courier::system> sys;
    sys.emplace(cfg);
    std::vector<courier::actor_ref<counter>> refs;
    for (int i = 0; i < 4; ++i) refs.push_back(sys->spawn<counter>());
    std::atomic<bool> go{false};
    std::vector<std::thread> senders;
    for (int t = 0; t < 2; ++t)
      senders.emplace_back([&, t] {
        auto mine = refs;  // copies, so each thread owns its references
        while (!go.load()) std::this_thread::yield();
        for (int i = 0; i < 2000; ++i) {
          auto& r = mine[static_cast<std::size_t>(i + t) % mine.size()];
          r.send(add{1, 1});
          if (i % 50 == 0) r.request(get{}, 1ms).then([](int) {}, [](const courier::error&) {});
          if (i % 200 == 0) r.delayed_send(add{0, 0}, 1ms);
        }
      });
    go = true;
    sys->shutdown(5s);
    if (round % 2 == 0) sys.reset();
    for (auto& s : senders) s.join();
  }
}

// ---------------------------------------------------------------------------------------------
// spawn racing shutdown

TEST_CASE("spawn from another thread while shutdown runs throws system_shutdown, never crashes",
          "[hardening][shutdown][concurrent]") {
  courier_test::watchdog wd("spawn during shutdown", 60s);
  for (int round = 0; round < 20; ++round) {
    courier::config cfg;
    cfg.workers = 2;
    courier::system sys{cfg};
    std::atomic<bool> go{false};
    std::atomic<int> refused{0};
    std::thread spawner([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 2000; ++i) {
        try {
          auto c = sys.spawn<counter>();
          c.send(add{1, 1});
        } catch (const std::system_error& e) {
          CHECK(e.code() == courier::make_error_code(errc::system_shutdown));
          ++refused;
        }
      }
    });
    go = true;
    const auto report = sys.shutdown(5s);
    spawner.join();
    CHECK(report.clean);
    CHECK(sys.live_actors() == 0);
  }
}

TEST_CASE("threads that spawn without pause do not keep shutdown from finishing", "[hardening][shutdown][concurrent]") {
  courier_test::watchdog wd("spawners racing shutdown", 60s);
  for (int round = 0; round < 10; ++round) {
    courier::config cfg;
    cfg.workers = 2;
    courier::system sys{cfg};
    std::atomic<bool> spawning{false};
    std::atomic<int> refused{0};  // with system_shutdown (Catch's checks are for this thread only)
    std::vector<std::thread> spawners;
    for (int t = 0; t < 2; ++t)
      spawners.emplace_back([&] {
        for (;;) {
          try {
            sys.spawn<counter>().send(add{1, 1});
          } catch (const std::system_error& e) {
            if (e.code() == courier::make_error_code(errc::system_shutdown)) ++refused;
            return;
          }
          spawning = true;
        }
      });
    while (!spawning.load()) std::this_thread::yield();
    std::this_thread::sleep_for(5ms);  // a steady stream of spawns and stops is under way
    const auto start = std::chrono::steady_clock::now();
    const auto report = sys.shutdown(1s);
    const auto took = std::chrono::steady_clock::now() - start;
    for (auto& s : spawners) s.join();
    INFO("round " << round << ": " << report.unfinished.size() << " unfinished");
    CHECK(report.clean);
    CHECK(took < 900ms);
    CHECK(refused.load() == 2);
  }
}

// ---------------------------------------------------------------------------------------------
// Shutdown deadlines and reports

namespace {

struct spawn_child {};
class child : public courier::actor<child, get> {
 public:
  int on(const get&) { return 1; }
};

/// What a spawner saw: how many children it spawned, and the refusals it caught.
struct spawn_log {
  std::mutex mutex;
  int spawned = 0;
  std::vector<std::error_code> refusals;
  std::vector<std::string> texts;
};

/// Spawns a child per spawn_child; with a log, catches a refused spawn and notes it, without one
/// lets the exception escape the handler.
class spawner : public courier::actor<spawner, spawn_child> {
 public:
  explicit spawner(courier::system* sys, spawn_log* log = nullptr) : sys_(sys), log_(log) {}
  void on(const spawn_child&) {
    if (log_ == nullptr) {
      kept_ = sys_->spawn<child>();
      return;
    }
    try {
      kept_ = sys_->spawn<child>();
      std::lock_guard lock(log_->mutex);
      ++log_->spawned;
    } catch (const std::system_error& e) {
      std::lock_guard lock(log_->mutex);
      log_->refusals.push_back(e.code());
      log_->texts.emplace_back(e.what());
    }
  }
  void on_stop() { kept_.reset(); }

 private:
  courier::system* sys_;
  spawn_log* log_;
  courier::actor_ref<child> kept_;
};

}  // namespace

TEST_CASE("spawn once shutdown has begun throws system_shutdown, from a plain thread as from a handler",
          "[hardening][shutdown]") {
  courier_test::watchdog wd("spawn after begin_shutdown");
  courier::system sys{courier::config::deterministic()};
  spawn_log log;
  auto s = sys.spawn<spawner>(&sys, &log);
  s.send(spawn_child{});
  sys.run_until_idle();
  s.send(spawn_child{});  // handled after begin_shutdown, before the stop request
  sys.begin_shutdown();
  try {
    sys.spawn<child>();
    FAIL("spawn after begin_shutdown did not throw");
  } catch (const std::system_error& e) {
    CHECK(e.code() == courier::make_error_code(errc::system_shutdown));
    CHECK(std::string(e.what()).find("shuts down") != std::string::npos);
  }
  const auto report = sys.shutdown(2s);
  CHECK(report.clean);
  CHECK(report.unfinished.empty());
  CHECK(log.spawned == 1);
  REQUIRE(log.refusals.size() == 1);
  CHECK(log.refusals[0] == courier::make_error_code(errc::system_shutdown));
}

TEST_CASE("a handler whose spawn is refused by shutdown stops its actor, and shutdown stays clean",
          "[hardening][shutdown]") {
  courier_test::watchdog wd("refused spawn escapes a handler");
  courier::system sys{courier::config::deterministic()};
  auto s = sys.spawn<spawner>(&sys);
  s.send(spawn_child{});  // handled by shutdown, before the stop request: its spawn throws
  const auto report = sys.shutdown(2s);
  CHECK(report.clean);
  CHECK(report.unfinished.empty());
  CHECK(sys.live_actors() == 0);
}

TEST_CASE("an actor spawning while a threaded shutdown runs does not make it wait out its deadline",
          "[hardening][shutdown][concurrent]") {
  courier_test::watchdog wd("threaded spawn while shutting down");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  spawn_log log;
  auto s = sys.spawn<spawner>(&sys, &log);
  for (int i = 0; i < 10; ++i) s.send(spawn_child{});
  const auto start = std::chrono::steady_clock::now();
  const auto report = sys.shutdown(3s);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK(report.clean);
  std::lock_guard lock(log.mutex);
  CHECK(log.spawned + static_cast<int>(log.refusals.size()) == 10);
  for (const auto& code : log.refusals) CHECK(code == courier::make_error_code(errc::system_shutdown));
}

TEST_CASE("shutdown(infinite) waits for the actors instead of overflowing", "[hardening][shutdown]") {
  courier_test::watchdog wd("shutdown infinite");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.send(add{1, 1});
  const auto report = sys.shutdown(courier::infinite);
  CHECK(report.clean);
  CHECK(report.unfinished.empty());
}

TEST_CASE("a second shutdown after an unclean one reports the same result", "[hardening][shutdown]") {
  courier_test::watchdog wd("second unclean shutdown");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  const auto first = sys.shutdown(courier::timespan::zero());  // no time to run the stop request
  REQUIRE_FALSE(first.clean);
  REQUIRE(first.unfinished.size() == 1);
  const auto second = sys.shutdown();
  CHECK_FALSE(second.clean);
  CHECK(second.unfinished == first.unfinished);
}

// ---------------------------------------------------------------------------------------------
// Continuations of plain threads

namespace {

struct continuation_log {
  std::vector<std::string> texts;
};
void record_continuation_error(const courier::error& e, void* context) {
  static_cast<continuation_log*>(context)->texts.push_back(e.describe());
}

}  // namespace

TEST_CASE("a plain thread's continuation that throws does not harm the replying actor", "[hardening][continuation]") {
  courier_test::watchdog wd("throwing continuation");
  continuation_log log;
  courier::config cfg = courier::config::deterministic();
  cfg.on_continuation_error = &record_continuation_error;
  cfg.continuation_error_user_data = &log;
  courier::system sys{cfg};
  auto c = sys.spawn<counter>();
  c.request(get{}).then([](int) { throw std::runtime_error("value continuation"); }, [](const courier::error&) {});
  sys.run_until_idle();
  CHECK(sys.live_actors() == 1);
  CHECK(c.send(add{2, 3}));
  auto r = c.ask(get{}, 1s);
  REQUIRE(r.has_value());
  CHECK(*r == 5);
  CHECK(sys.continuation_failures() == 1);
  REQUIRE(log.texts.size() == 1);
  CHECK(log.texts[0].find("value continuation") != std::string::npos);

  c.request(boom{}).then([](int) {}, [](const courier::error&) { throw std::runtime_error("error continuation"); });
  sys.run_until_idle();
  CHECK(sys.live_actors() == 0);            // boom's own throw stops it; the continuation's adds nothing
  CHECK(sys.continuation_failures() == 2);  // not swallowed
  REQUIRE(log.texts.size() == 2);
  CHECK(log.texts[1].find("error continuation") != std::string::npos);
}

TEST_CASE("a request made in a plain thread's continuation settles exactly once", "[hardening][continuation]") {
  courier_test::watchdog wd("request in continuation");
  courier::system sys{courier::config::deterministic()};
  auto a = sys.spawn<counter>();
  auto b = sys.spawn<counter>();
  b.send(add{20, 22});
  sys.run_until_idle();
  int values = 0, errors = 0, nested_value = 0;
  a.request(get{}).then(
      [&](int) {
        b.request(get{}).then(
            [&](int v) {
              ++values;
              nested_value = v;
            },
            [&](const courier::error&) { ++errors; });
      },
      [](const courier::error&) {});
  REQUIRE(sys.run_one());  // a replies; the nested request goes to b
  a.send(quit{});          // a stops before b's reply could reach it
  sys.run_until_idle();
  CHECK(values + errors == 1);
  CHECK(values == 1);
  CHECK(nested_value == 42);
}

// ---------------------------------------------------------------------------------------------
// Leaks when an actor crashes while sending to itself

namespace {

std::atomic<int> crashers_alive{0};

struct crash_with_self_monitor {};
struct crash_with_self_request {};
class crasher : public courier::actor<crasher, crash_with_self_monitor, crash_with_self_request, get, courier::down> {
 public:
  crasher() { ++crashers_alive; }
  ~crasher() { --crashers_alive; }
  void on(const crash_with_self_monitor&) {
    monitor(self());
    throw std::runtime_error("crash");
  }
  void on(const crash_with_self_request&) {
    self().request(get{}).then([](int) {}, [](const courier::error&) {});
    throw std::runtime_error("crash");
  }
  int on(const get&) { return 0; }
  void on(const courier::down&) {}
};

}  // namespace

TEST_CASE("an actor that crashes frees what it sends itself while stopping", "[hardening][leak]") {
  courier_test::watchdog wd("crash self send");
  courier::system sys{courier::config::deterministic()};
  {
    auto a = sys.spawn<crasher>();
    a.send(crash_with_self_monitor{});
    auto b = sys.spawn<crasher>();
    b.send(crash_with_self_request{});
    sys.run_until_idle();
    CHECK(sys.live_actors() == 0);
  }
  CHECK(crashers_alive == 0);
}

// ---------------------------------------------------------------------------------------------
// Messages whose constructor throws

namespace {

std::atomic<bool> moves_throw{false};
struct fragile {
  int value = 0;
  fragile() = default;
  fragile(const fragile& o) : value(o.value) {
    if (moves_throw) throw std::runtime_error("copy");
  }
  fragile(fragile&& o) : value(o.value) {
    if (moves_throw) throw std::runtime_error("move");
  }
};
class fragile_sink : public courier::actor<fragile_sink, fragile> {
 public:
  int on(const fragile& f) { return f.value; }
};

struct moves_throw_scope {
  moves_throw_scope() { moves_throw = true; }
  ~moves_throw_scope() { moves_throw = false; }
};

}  // namespace

TEST_CASE("request and ask clean up when the message's constructor throws", "[hardening][leak]") {
  courier_test::watchdog wd("throwing message");
  courier::system sys{courier::config::deterministic()};
  auto s = sys.spawn<fragile_sink>();
  auto capture = std::make_shared<int>(0);
  bool settled = false;
  {
    auto handle = s.request(fragile{}, 10ms);
    moves_throw_scope scope;
    CHECK_THROWS_AS(std::move(handle).then([capture, &settled](int) { settled = true; },
                                           [capture, &settled](const courier::error&) { settled = true; }),
                    std::runtime_error);
  }
  CHECK(capture.use_count() == 1);  // the continuations were destroyed
  sys.advance_time(20ms);
  sys.run_until_idle();
  CHECK_FALSE(settled);  // a request never sent does not time out later
  {
    fragile f;
    moves_throw_scope scope;
    CHECK_THROWS_AS(s.ask(f, 1s), std::runtime_error);
  }
  moves_throw = false;
  auto r = s.ask(fragile{}, 1s);
  REQUIRE(r.has_value());
}

// ---------------------------------------------------------------------------------------------
// Alignment

namespace {

struct ping {};
/// Says from its handler whether it and its member were placed as aligned as they ask.
class wide : public courier::actor<wide, ping> {
 public:
  explicit wide(bool* object_aligned, bool* member_aligned)
      : object_aligned_(object_aligned), member_aligned_(member_aligned) {}
  void on(const ping&) {
    *object_aligned_ = aligned_to(this, 128);
    *member_aligned_ = aligned_to(&block_, 128);
  }

 private:
  bool* object_aligned_;
  bool* member_aligned_;
  alignas(128) char block_[128] = {};
};

}  // namespace

TEST_CASE("spawn honours an actor's alignment above 64", "[hardening][alignment]") {
  courier_test::watchdog wd("actor alignment");
  courier::system sys{courier::config::deterministic()};
  for (int i = 0; i < 64; ++i) {
    bool object_aligned = false, member_aligned = false;
    auto w = sys.spawn<wide>(&object_aligned, &member_aligned);
    w.send(ping{});
    sys.run_until_idle();
    CHECK(object_aligned);
    CHECK(member_aligned);
  }
}

TEST_CASE("pool allocations honour every alignment from 16 to 4096", "[hardening][alignment]") {
  for (std::size_t alignment = 16; alignment <= 4096; alignment *= 2) {
    for (std::size_t size : {std::size_t{1}, std::size_t{16}, std::size_t{100}, alignment, alignment + 8, 2 * alignment,
                             std::size_t{4096}, std::size_t{5000}, std::size_t{10000}}) {
      std::vector<void*> blocks;
      bool all_aligned = true;
      for (int i = 0; i < 16; ++i) {
        void* p = courier::pool::allocate(size, alignment);
        all_aligned = all_aligned && aligned_to(p, alignment);
        std::memset(p, 0xab, size);
        blocks.push_back(p);
      }
      INFO("size " << size << " alignment " << alignment);
      CHECK(all_aligned);
      for (void* p : blocks) courier::pool::deallocate(p, size, alignment);
    }
  }
}

namespace {

template <std::size_t A>
struct alignas(A) aligned_message {
  char bytes[A];
};
/// What an aligned_sink counted, kept by the test.
struct alignment_count {
  int misaligned = 0;
  int seen = 0;
};
template <std::size_t... A>
class aligned_sink : public courier::actor<aligned_sink<A...>, aligned_message<A>...> {
 public:
  explicit aligned_sink(alignment_count* count) : count_(count) {}
  template <std::size_t N>
  void on(const aligned_message<N>& m) {
    if (!aligned_to(&m, N)) ++count_->misaligned;
    ++count_->seen;
  }

 private:
  alignment_count* count_;
};

}  // namespace

TEST_CASE("messages aligned from 16 to 4096 arrive aligned", "[hardening][alignment]") {
  courier_test::watchdog wd("message alignment");
  alignment_count count;
  courier::system sys{courier::config::deterministic()};
  using sink = aligned_sink<16, 32, 64, 128, 256, 512, 1024, 2048, 4096>;
  auto s = sys.spawn<sink>(&count);
  for (int i = 0; i < 8; ++i) {
    s.send(aligned_message<16>{});
    s.send(aligned_message<32>{});
    s.send(aligned_message<64>{});
    s.send(aligned_message<128>{});
    s.send(aligned_message<256>{});
    s.send(aligned_message<512>{});
    s.send(aligned_message<1024>{});
    s.send(aligned_message<2048>{});
    s.send(aligned_message<4096>{});
  }
  sys.run_until_idle();
  CHECK(count.seen == 72);
  CHECK(count.misaligned == 0);
}

// ---------------------------------------------------------------------------------------------
// Large messages across threads (ThreadSanitizer must stay quiet)

namespace {

struct big {
  char bytes[8192];
  int index;
};
class big_sink : public courier::actor<big_sink, big, get> {
 public:
  void on(const big& b) {
    if (b.bytes[100] == static_cast<char>(b.index)) ++ok_;
  }
  int on(const get&) { return ok_; }

 private:
  int ok_ = 0;
};

}  // namespace

TEST_CASE("messages above 4 KiB cross threads cleanly", "[hardening][concurrent]") {
  courier_test::watchdog wd("large messages");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto s = sys.spawn<big_sink>();
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([s] {
      for (int i = 0; i < 500; ++i) {
        auto b = std::make_unique<big>();
        b->index = i % 100;
        b->bytes[100] = static_cast<char>(b->index);
        s.send(*b);
      }
    });
  for (auto& t : threads) t.join();
  auto r = s.ask(get{}, 10s);
  REQUIRE(r.has_value());
  CHECK(*r == 1000);
}

// ---------------------------------------------------------------------------------------------
// Smaller mismatches

TEST_CASE("requests are never dead letters: dropped at once or queued at the stop alike", "[hardening][dead letters]") {
  courier_test::watchdog wd("request dead letters");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.send(quit{});
  int failed = 0;
  c.request(get{}).then([](int) {}, [&](const courier::error&) { ++failed; });  // queued at the stop
  sys.run_until_idle();
  CHECK(failed == 1);
  CHECK(sys.dead_letters() == 0);
  c.request(get{}).then([](int) {}, [&](const courier::error&) { ++failed; });  // already stopped
  sys.run_until_idle();
  CHECK(failed == 2);
  CHECK_FALSE(c.ask(get{}, 1s).has_value());
  CHECK(sys.dead_letters() == 0);
  CHECK_FALSE(c.send(add{1, 1}));
  CHECK(sys.dead_letters() == 1);
}

TEST_CASE("more than 64 workers is rejected", "[hardening][config]") {
  courier::config cfg;
  cfg.workers = 65;
  CHECK_THROWS_AS(courier::system{cfg}, std::invalid_argument);
}

namespace {

class by_reference : public courier::actor<by_reference, get> {
 public:
  const std::string& on(const get&) { return text_; }

 private:
  std::string text_ = "kept";
};

}  // namespace

TEST_CASE("a handler returning const T& replies with a copy", "[hardening][reply]") {
  courier_test::watchdog wd("const ref reply");
  courier::system sys{courier::config::deterministic()};
  auto a = sys.spawn<by_reference>();
  auto r = a.ask(get{}, 1s);
  REQUIRE(r.has_value());
  CHECK(*r == "kept");
  std::string got;
  a.request(get{}).then([&](std::string s) { got = std::move(s); }, [](const courier::error&) {});
  sys.run_until_idle();
  CHECK(got == "kept");
}

TEST_CASE("id() of an empty ref is 0", "[hardening][actor_ref]") {
  courier::actor_ref<counter> empty;
  CHECK(empty.id() == 0);
}
