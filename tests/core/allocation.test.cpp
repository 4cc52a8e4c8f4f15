// Zero heap allocations per message in steady state, proved with a counting global allocator
// (tests/support): every operator new in the process (all threads) is counted, and so are pool
// chunks and large slots, which come from the pool's hook instead.
#include "courier/courier.hpp"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "counting_allocator.hpp"
#include "watchdog.hpp"

namespace {

/// Heap events anywhere in the process: operator new calls plus chunks and large slots that
/// the pool took from its hook.
std::uint64_t heap_events() {
  auto s = courier::pool::stats();
  return counting_allocator::allocation_count() + s.chunks_allocated + s.large_allocations;
}

struct tick {
  std::uint64_t n;
};
struct total {};

/// Sums the ticks; counts each in `seen`, which the test that spawned it keeps and reads.
class sink : public courier::actor<sink, tick, total> {
 public:
  explicit sink(std::atomic<std::uint64_t>* seen) : seen_(seen) {}
  void on(const tick& t) {
    sum_ += t.n;
    seen_->fetch_add(1, std::memory_order_release);
  }
  std::uint64_t on(const total&) { return sum_; }

 private:
  std::uint64_t sum_ = 0;
  std::atomic<std::uint64_t>* seen_;
};

// Sends in bursts and waits for the receiver to catch up, so the number of messages in flight
// (and with it the pool's working set) is bounded, as it is in any steady state. The bound is a
// burst plus the few slots whose handler has counted them but whose free has not reached the
// sender yet (a worker preempted between the two): warm up with bursts twice as large, so that the
// measured phase never needs more slots than the warm-up made, however the threads are scheduled.
void send_bursts(const courier::actor_ref<sink>& to, std::atomic<std::uint64_t>& seen, std::uint64_t bursts,
                 int burst = 256) {
  for (std::uint64_t b = 0; b < bursts; ++b) {
    const std::uint64_t target = seen.load() + static_cast<std::uint64_t>(burst);
    for (int i = 0; i < burst; ++i) REQUIRE(to.send(tick{1}));
    while (seen.load(std::memory_order_acquire) < target) std::this_thread::yield();
  }
}

struct ask_loop_start {
  std::uint64_t rounds;
};
struct value_request {
  std::uint64_t n;
};

class responder : public courier::actor<responder, value_request> {
 public:
  std::uint64_t on(const value_request& r) { return r.n + 1; }
};

/// What the requester knows of its peer: an interface, so one requester drives all three peers.
using value_api = courier::interface<std::uint64_t(value_request)>;

/// Answers later: asks the responder, then delivers through a response_promise.
class deferring_proxy : public courier::actor<deferring_proxy, value_request> {
 public:
  explicit deferring_proxy(courier::actor_ref<responder> backend) : backend_(std::move(backend)) {}
  courier::response_promise<std::uint64_t> on(const value_request& r) {
    auto answer = make_response_promise<std::uint64_t>();
    backend_.request(value_request{r.n})
        .then([answer](std::uint64_t v) mutable { answer.deliver(v); },
              [answer](const courier::error& e) mutable { answer.fail(e); });
    return answer;
  }
  void on_stop() { backend_.reset(); }

 private:
  courier::actor_ref<responder> backend_;
};

/// Hands each request on: the responder's reply goes straight back to the requester.
class delegating_proxy : public courier::actor<delegating_proxy, value_request> {
 public:
  explicit delegating_proxy(courier::actor_ref<responder> backend) : backend_(std::move(backend)) {}
  courier::delegated<std::uint64_t> on(const value_request& r) { return delegate(backend_, value_request{r.n}); }
  void on_stop() { backend_.reset(); }

 private:
  courier::actor_ref<responder> backend_;
};

/// Makes `rounds` requests one after another, each continuing in the reply handler.
class requester : public courier::actor<requester, ask_loop_start> {
 public:
  /// `failures` (when given) counts the replies that were wrong or failed, each before the `done`
  /// that follows it.
  requester(courier::actor_ref<value_api> peer, std::atomic<std::uint64_t>* done, bool with_timeout,
            std::uint64_t* failures = nullptr)
      : peer_(std::move(peer)),
        done_(done),
        with_timeout_(with_timeout),
        failures_(failures ? failures : &own_failures_) {}
  void on(const ask_loop_start& s) {
    remaining_ = s.rounds;
    next();
  }
  void on_stop() { peer_.reset(); }

 private:
  void next() {
    if (remaining_ == 0) {
      done_->fetch_add(1, std::memory_order_release);
      return;
    }
    --remaining_;
    auto timeout = with_timeout_ ? courier::timespan(std::chrono::seconds(30)) : courier::infinite;
    peer_.request(value_request{remaining_}, timeout)
        .then(
            [this](std::uint64_t v) {
              if (v != remaining_ + 1) ++*failures_;
              next();
            },
            [this](const courier::error&) { ++*failures_; });
  }
  courier::actor_ref<value_api> peer_;
  std::atomic<std::uint64_t>* done_;
  bool with_timeout_;
  std::uint64_t remaining_ = 0;
  std::uint64_t own_failures_ = 0;
  std::uint64_t* failures_;
};

void wait_for(std::atomic<std::uint64_t>& counter, std::uint64_t value) {
  while (counter.load(std::memory_order_acquire) < value) std::this_thread::yield();
}

struct ball {
  std::uint64_t remaining;
};
class player;
struct partner {
  courier::actor_ref<player> other;
};

class player : public courier::actor<player, partner, ball> {
 public:
  explicit player(std::atomic<std::uint64_t>* done) : done_(done) {}
  void on(const partner& p) { other_ = p.other; }
  void on(const ball& b) {
    if (b.remaining == 0)
      done_->fetch_add(1, std::memory_order_release);
    else
      other_.send(ball{b.remaining - 1});
  }
  void on_stop() { other_.reset(); }

 private:
  std::atomic<std::uint64_t>* done_;
  courier::actor_ref<player> other_;
};

}  // namespace

TEST_CASE("one-way sends from another thread allocate nothing in steady state", "[allocation]") {
  courier_test::watchdog wd{"allocation: send", std::chrono::seconds(60)};
  std::atomic<std::uint64_t> seen{0};
  courier::system sys;
  auto s = sys.spawn<sink>(&seen);
  send_bursts(s, seen, 100, 512);  // warm-up: pool chunks, queue blocks, thread heaps
  const auto before = heap_events();
  const auto new_before = counting_allocator::allocation_count();
  const auto chunks_before = courier::pool::stats().chunks_allocated;
  send_bursts(s, seen, 400);  // 102,400 messages
  const auto after = heap_events();
  INFO("operator new calls: " << counting_allocator::allocation_count() - new_before
                              << ", pool chunks: " << courier::pool::stats().chunks_allocated - chunks_before);
  CHECK(after - before == 0);
  auto sum = s.ask(total{}, std::chrono::seconds(10));
  REQUIRE(sum);
  CHECK(*sum == 100u * 512u + 400u * 256u);
}

TEST_CASE("request and reply between actors allocate nothing in steady state", "[allocation]") {
  courier_test::watchdog wd{"allocation: request", std::chrono::seconds(60)};
  for (bool with_timeout : {false, true}) {
    INFO("with a time-out: " << with_timeout);
    std::uint64_t failures = 0;  // outlives the system, whose requester writes it
    courier::system sys;
    std::atomic<std::uint64_t> done{0};
    auto r = sys.spawn<responder>();
    auto q = sys.spawn<requester>(r, &done, with_timeout, &failures);
    // Warm-up: the pair's own first requests (pool slots, timer storage, this thread's
    // producer on the injection queue). No warm-up of the other workers: each measured round is
    // started from this thread, so the pair may land on a worker that has never run it, and
    // that must not cost a heap call either.
    q.send(ask_loop_start{20'000});
    wait_for(done, 1);
    const auto before = heap_events();
    for (std::uint64_t round = 2; round <= 5; ++round) {
      q.send(ask_loop_start{25'000});
      wait_for(done, round);
    }
    const auto after = heap_events();
    CHECK(after - before == 0);
    CHECK(failures == 0);
  }
}

TEST_CASE("host requests in embedded mode (continuations on the host lane, host-driven time-outs) allocate nothing",
          "[allocation]") {
  courier_test::watchdog wd{"allocation: host requests", std::chrono::seconds(60)};
  for (bool with_timeout : {false, true}) {
    INFO("with a time-out: " << with_timeout);
    courier::system sys{courier::config::embedded()};
    auto r = sys.spawn<responder>();
    std::uint64_t replies = 0;
    auto round = [&](int requests) {
      for (int i = 0; i < requests; ++i) {
        auto h = with_timeout ? r.request(value_request{1}, std::chrono::seconds(10)) : r.request(value_request{1});
        std::move(h).then([&](std::uint64_t v) { replies += v; }, [](const courier::error&) {});
        if (i % 64 == 63) sys.poll();
      }
      sys.run_until_idle();
    };
    round(20'000);  // warm-up: pool slots, timer storage, queue blocks
    const auto before = heap_events();
    round(100'000);
    const auto after = heap_events();
    CHECK(after - before == 0);
    CHECK(replies == 2u * 120'000u);  // the responder answers n + 1
  }
}

TEST_CASE("ping-pong between actors and blocking ask across threads allocate nothing", "[allocation]") {
  courier_test::watchdog wd{"allocation: ping-pong", std::chrono::seconds(60)};
  courier::system sys;
  std::atomic<std::uint64_t> done{0};
  auto a = sys.spawn<player>(&done);
  auto b = sys.spawn<player>(&done);
  a.send(partner{b});
  b.send(partner{a});
  a.send(ball{50'000});  // warm-up: this pair's own slots only, not every worker's heap
  wait_for(done, 1);
  auto before = heap_events();
  const auto chunks_before = courier::pool::stats().chunks_allocated;
  for (std::uint64_t round = 2; round <= 5; ++round) {
    a.send(ball{50'000});  // each round starts from this thread: the pair may change workers
    wait_for(done, round);
  }
  INFO("pool chunks: " << courier::pool::stats().chunks_allocated - chunks_before);
  CHECK(heap_events() - before == 0);

  // The caller's thread and a worker thread ping-pong through ask().
  auto r = sys.spawn<responder>();
  for (std::uint64_t i = 0; i < 2'000; ++i) REQUIRE(r.ask(value_request{i}, std::chrono::seconds(10)));
  before = heap_events();
  for (std::uint64_t i = 0; i < 20'000; ++i) {
    auto v = r.ask(value_request{i}, std::chrono::seconds(10));
    REQUIRE(v);
    REQUIRE(*v == i + 1);
  }
  CHECK(heap_events() - before == 0);
}

TEST_CASE("deferred replies (a promise, a delegate) allocate nothing in steady state", "[allocation]") {
  courier_test::watchdog wd{"allocation: deferred", std::chrono::seconds(60)};
  for (bool delegating : {false, true}) {
    INFO("delegating: " << delegating);
    courier::system sys;
    auto peer = [&]() -> courier::actor_ref<value_api> {
      if (delegating) return sys.spawn<delegating_proxy>(sys.spawn<responder>());
      return sys.spawn<deferring_proxy>(sys.spawn<responder>());
    };
    std::atomic<std::uint64_t> warm{0};
    std::vector<courier::actor_ref<requester>> warmers;
    for (int i = 0; i < 4; ++i) {
      warmers.push_back(sys.spawn<requester>(peer(), &warm, false));
      warmers.back().send(ask_loop_start{20'000});
    }
    wait_for(warm, 4);
    std::atomic<std::uint64_t> done{0};
    std::uint64_t failures = 0;
    auto q = sys.spawn<requester>(peer(), &done, false, &failures);
    q.send(ask_loop_start{20'000});
    wait_for(done, 1);
    const auto before = heap_events();
    q.send(ask_loop_start{100'000});
    wait_for(done, 2);
    const auto after = heap_events();
    CHECK(after - before == 0);
    CHECK(failures == 0);
  }
}

namespace {

struct beat {};
struct begin_beat {};

class heart : public courier::actor<heart, beat, begin_beat> {
 public:
  explicit heart(std::uint64_t* beats) : beats_(beats) {}
  void on(const begin_beat&) { handle_ = send_periodic(std::chrono::milliseconds(1), beat{}); }
  void on(const beat&) { ++*beats_; }

 private:
  std::uint64_t* beats_;
  courier::timer_handle handle_;
};

}  // namespace

TEST_CASE("periodic ticks allocate nothing in steady state", "[allocation]") {
  courier_test::watchdog wd{"allocation: periodic", std::chrono::seconds(60)};
  std::uint64_t beats = 0;
  courier::system sys{courier::config::deterministic()};
  auto h = sys.spawn<heart>(&beats);
  h.send(begin_beat{});
  sys.run_until_idle();
  auto step = [&] {
    sys.advance_time(std::chrono::milliseconds(1));
    sys.run_until_idle();
  };
  for (int i = 0; i < 1'000; ++i) step();
  const auto before = heap_events();
  for (int i = 0; i < 10'000; ++i) step();
  CHECK(heap_events() - before == 0);
  CHECK(beats == 11'000);
}

TEST_CASE("sends to a bounded mailbox, accepted or refused, allocate nothing in steady state", "[allocation]") {
  courier_test::watchdog wd{"allocation: bounded", std::chrono::seconds(60)};
  std::atomic<std::uint64_t> seen{0};
  courier::system sys;
  auto s = sys.spawn<sink>(courier::spawn_options{.mailbox_capacity = 64}, &seen);
  std::uint64_t sent = 0, refused = 0;
  // Bursts of 256 into a mailbox of 64: some are refused (the slot goes back to the pool),
  // then wait until everything accepted was handled.
  auto bursts = [&](int count) {
    for (int b = 0; b < count; ++b) {
      for (int i = 0; i < 256; ++i) {
        if (s.try_send(tick{1}) == courier::send_result::sent)
          ++sent;
        else
          ++refused;
      }
      while (seen.load(std::memory_order_acquire) < sent) std::this_thread::yield();
    }
  };
  bursts(100);  // warm-up
  const auto before = heap_events();
  const auto refused_before = refused;
  bursts(400);
  CHECK(heap_events() - before == 0);
  CHECK(refused > refused_before);  // the full path was taken, too
  // A bounded mailbox's count drops once per batch, when the actor takes the next or goes idle,
  // not as each message is handled: the ask waits for that, or it may find the mailbox full.
  while (s.queued() != 0) std::this_thread::yield();
  auto sum = s.ask(total{}, std::chrono::seconds(10));
  INFO((sum ? std::string("answered") : sum.err().describe()));
  REQUIRE(sum);
  CHECK(*sum == sent);
}
