// Bounded mailboxes and the urgent lane, seen through actors and refs: capacity per type and per
// spawn, what send / try_send / request / ask do at capacity, that replies, stops and downs are
// never refused, and that an urgent stop overtakes a long queue while a graceful one drains it.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "courier/courier.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;
using courier::send_result;

namespace {

struct item {
  std::uint64_t n;
};
struct get {};

/// Counts what it handled; unbounded unless spawned with options.
class tally : public courier::actor<tally, item, get> {
 public:
  explicit tally(std::uint64_t* handled = nullptr) : handled_(handled) {}
  void on(const item&) {
    if (handled_ != nullptr) ++*handled_;
    ++count_;
  }
  std::uint64_t on(const get&) { return count_; }

 private:
  std::uint64_t* handled_;
  std::uint64_t count_ = 0;
};

/// The same, bounded by its type.
class small_tally : public courier::actor<small_tally, item, get> {
 public:
  static constexpr std::size_t mailbox_capacity = 3;
  void on(const item&) { ++count_; }
  std::uint64_t on(const get&) { return count_; }

 private:
  std::uint64_t count_ = 0;
};

struct dead_letters {
  std::vector<courier::dead_letter_reason> reasons;
  static void hook(const courier::dead_letter_info& info, void* self) {
    static_cast<dead_letters*>(self)->reasons.push_back(info.reason);
  }
  std::size_t count(courier::dead_letter_reason r) const {
    std::size_t n = 0;
    for (auto x : reasons) n += x == r;
    return n;
  }
};

courier::config deterministic_with(dead_letters& log) {
  auto cfg = courier::config::deterministic();
  cfg.on_dead_letter = &dead_letters::hook;
  cfg.dead_letter_user_data = &log;
  return cfg;
}

}  // namespace

TEST_CASE("bounded: a type's mailbox_capacity refuses the send past it, with the reason", "[bounded]") {
  courier_test::watchdog wd("bounded by type");
  dead_letters log;
  courier::system sys{deterministic_with(log)};
  auto t = sys.spawn<small_tally>();
  CHECK(t.mailbox_capacity() == 3);
  CHECK(t.send(item{1}));
  CHECK(t.send(item{2}));
  CHECK(t.try_send(item{3}) == send_result::sent);
  CHECK(t.queued() == 3);
  CHECK_FALSE(t.send(item{4}));
  CHECK(t.try_send(item{5}) == send_result::full);
  CHECK(sys.dead_letters() == 1);  // the refused send; try_send tells its caller instead
  REQUIRE(log.reasons.size() == 1);
  CHECK(log.reasons[0] == courier::dead_letter_reason::mailbox_full);

  std::optional<courier::error> failed;
  t.request(get{}).then([](std::uint64_t) {}, [&](const courier::error& e) { failed = e; });
  CHECK_FALSE(failed.has_value());  // refused at once, but host code runs in the host's loop
  CHECK(log.count(courier::dead_letter_reason::mailbox_full) == 1);  // a refused request is no dead letter

  sys.run_until_idle();
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::mailbox_full);
  CHECK(t.queued() == 0);
  CHECK(t.try_send(item{6}) == send_result::sent);  // room again
  std::optional<std::uint64_t> count;
  t.request(get{}).then([&](std::uint64_t c) { count = c; }, [](const courier::error&) {});
  sys.run_until_idle();
  REQUIRE(count.has_value());
  CHECK(*count == 4);
}

TEST_CASE("bounded: spawn_options set or override the capacity; plain spawn stays unbounded", "[bounded]") {
  courier_test::watchdog wd("bounded by spawn");
  courier::system sys{courier::config::deterministic()};
  std::uint64_t handled = 0;
  auto plain = sys.spawn<tally>(&handled);  // spawn<T>(args...) is unchanged
  CHECK(plain.mailbox_capacity() == 0);
  for (int i = 0; i < 10'000; ++i) REQUIRE(plain.try_send(item{1}) == send_result::sent);
  CHECK(plain.queued() == 0);  // unbounded mailboxes keep no count

  auto two = sys.spawn<tally>(courier::spawn_options{.mailbox_capacity = 2}, &handled);
  CHECK(two.mailbox_capacity() == 2);
  CHECK(two.try_send(item{1}) == send_result::sent);
  CHECK(two.try_send(item{1}) == send_result::sent);
  CHECK(two.try_send(item{1}) == send_result::full);

  auto bigger = sys.spawn<small_tally>(courier::spawn_options{.mailbox_capacity = 5});
  CHECK(bigger.mailbox_capacity() == 5);
  auto by_type = sys.spawn<small_tally>(courier::spawn_options{});
  CHECK(by_type.mailbox_capacity() == 3);

  courier::actor_ref<tally> empty;
  CHECK(empty.try_send(item{1}) == send_result::empty_reference);
  CHECK(empty.queued() == 0);
  sys.run_until_idle();
  CHECK(handled == 10'002);
  plain.stop();
  sys.run_until_idle();
  CHECK(plain.try_send(item{1}) == send_result::stopped);
}

namespace {

struct start {};
struct ping {};
struct filler {};

class server : public courier::actor<server, ping> {
 public:
  int on(const ping&) { return 42; }
};

/// Bounded to one message: its own requests' replies and downs must still get in.
class client : public courier::actor<client, start, filler, courier::down> {
 public:
  static constexpr std::size_t mailbox_capacity = 1;
  client(courier::actor_ref<server> s, std::optional<int>* reply, std::optional<std::uint64_t>* down)
      : server_(std::move(s)), reply_(reply), down_(down) {}
  void on(const start&) {
    monitor(server_);
    server_.request(ping{}).then([this](int v) { *reply_ = v; }, [](const courier::error&) {});
  }
  void on(const filler&) {}
  void on(const courier::down& d) { *down_ = d.id; }
  void on_stop() { server_.reset(); }

 private:
  courier::actor_ref<server> server_;
  std::optional<int>* reply_;
  std::optional<std::uint64_t>* down_;
};

}  // namespace

TEST_CASE("bounded: replies, downs and stop requests are never refused by a full mailbox", "[bounded][urgent]") {
  courier_test::watchdog wd("bounded system messages");
  courier::system sys{courier::config::deterministic()};
  std::optional<int> reply;
  std::optional<std::uint64_t> down;
  auto s = sys.spawn<server>();
  auto c = sys.spawn<client>(s, &reply, &down);
  REQUIRE(c.send(start{}));
  REQUIRE(sys.run_one());  // client: start, sends the request
  REQUIRE(c.send(filler{}));
  CHECK_FALSE(c.send(filler{}));  // full now
  sys.run_until_idle();
  REQUIRE(reply.has_value());
  CHECK(*reply == 42);

  REQUIRE(c.send(filler{}));  // full again
  s.stop();
  sys.run_until_idle();
  REQUIRE(down.has_value());
  CHECK(*down == s.id());

  REQUIRE(c.send(filler{}));
  CHECK_FALSE(c.send(filler{}));
  c.stop_after_queued();  // a graceful stop is not refused either
  sys.run_until_idle();
  CHECK(sys.live_actors() == 0);
}

TEST_CASE("urgent: stop overtakes 1,000,000 queued messages; stop_after_queued drains them", "[urgent]") {
  courier_test::watchdog wd("urgent stop", std::chrono::seconds(60));
  constexpr std::uint64_t n = 1'000'000;
  {
    courier::system sys{courier::config::deterministic()};
    std::uint64_t handled = 0;
    auto t = sys.spawn<tally>(&handled);
    for (std::uint64_t i = 0; i < n; ++i) REQUIRE(t.send(item{i}));
    REQUIRE(sys.run_one());  // the first message; the rest now wait in the actor's batch
    CHECK(handled == 1);
    t.stop();
    REQUIRE(sys.run_one());  // the stop, not the second message
    CHECK(handled == 1);
    CHECK(sys.live_actors() == 0);
    CHECK(sys.dead_letters() == n - 1);  // the rest were dropped, each reported
    CHECK_FALSE(t.send(item{0}));
  }
  {
    courier::system sys{courier::config::deterministic()};
    std::uint64_t handled = 0;
    auto t = sys.spawn<tally>(&handled);
    for (std::uint64_t i = 0; i < n; ++i) REQUIRE(t.send(item{i}));
    t.stop_after_queued();
    CHECK(t.send(item{0}));  // accepted, but queued behind the stop request: dropped
    sys.run_until_idle();
    CHECK(handled == n);
    CHECK(sys.live_actors() == 0);
    CHECK(sys.dead_letters() == 1);
  }
}

namespace {

struct slow_state {
  std::atomic<std::uint64_t> handled{0};
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
};
struct work {};

/// Holds its first message until released, so a test knows what is queued behind it.
class slow : public courier::actor<slow, work> {
 public:
  explicit slow(slow_state* s) : s_(s) {}
  void on(const work&) {
    s_->started.store(true, std::memory_order_release);
    while (!s_->release.load(std::memory_order_acquire)) std::this_thread::yield();
    s_->handled.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  slow_state* s_;
};

}  // namespace

TEST_CASE("urgent: stop from another thread ends a busy actor after its current message", "[urgent][concurrent]") {
  courier_test::watchdog wd("urgent stop threaded", std::chrono::seconds(60));
  slow_state state;
  courier::system sys{courier::config{.workers = 2}};
  auto a = sys.spawn<slow>(&state);
  for (int i = 0; i < 100'000; ++i) REQUIRE(a.send(work{}));
  REQUIRE(courier_test::eventually([&] { return state.started.load(); }, 10s));
  a.stop();
  state.release.store(true, std::memory_order_release);
  REQUIRE(courier_test::eventually([&] { return sys.live_actors() == 0; }, 20s));
  CHECK(state.handled.load() == 1);
  CHECK(sys.dead_letters() == 100'000 - 1);
}
