// Dispatch: each message reaches its handler, the return value is the reply, a handler that throws
// stops its actor, and messages arrive in the order sent.
#include "courier/actor.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
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
using courier_test::reset;
using courier_test::set_name;

// ----------------------------------------------------------------------------------------------
// Static properties

static_assert(counter::accepts<add>);
static_assert(counter::accepts<reset>);
static_assert(!counter::accepts<int>);
static_assert(counter::type_index<add> == 0);
static_assert(counter::type_index<reset> == 5);
static_assert(std::is_same_v<courier::reply_type_t<counter, get>, int>);
static_assert(std::is_same_v<courier::reply_type_t<counter, set_name>, std::string>);
static_assert(std::is_same_v<courier::reply_type_t<counter, add>, courier::unit>);

// ----------------------------------------------------------------------------------------------
// Dispatch and replies (deterministic)

TEST_CASE("typed dispatch: each message reaches its own handler, in order", "[actor]") {
  courier_test::watchdog wd("typed dispatch");
  probe_state state;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>(&state);
  CHECK(c.send(add{1, 2}));
  CHECK(c.send(set_name{"x"}));
  CHECK(c.send(reset{}));
  CHECK(c.send(add{10, 20}));
  CHECK(c.send(get{}));
  CHECK(sys.run_until_idle() > 0);
  CHECK(state.events == std::vector<std::string>{"add", "set_name", "reset", "add", "get"});
  auto r = c.ask(get{}, 1s);
  REQUIRE(r.has_value());
  CHECK(*r == 30);
}

TEST_CASE("a handler's return value is the reply: request/then and ask", "[actor]") {
  courier_test::watchdog wd("return value reply");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.send(add{20, 22});

  std::optional<int> got;
  std::optional<courier::error> failed;
  c.request(get{}, 1s).then([&](int v) { got = v; }, [&](const courier::error& e) { failed = e; });
  CHECK_FALSE(got.has_value());  // nothing runs until the system is driven
  sys.run_until_idle();
  REQUIRE(got.has_value());
  CHECK(*got == 42);
  CHECK_FALSE(failed.has_value());

  auto name = c.ask(set_name{"second"}, 1s);
  REQUIRE(name.has_value());
  CHECK(*name == "initial");
  name = c.ask(set_name{"third"}, 1s);
  REQUIRE(name.has_value());
  CHECK(*name == "second");
}

TEST_CASE("a void handler replies with unit; a continuation may take no arguments", "[actor]") {
  courier_test::watchdog wd("void reply");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  int no_arg_calls = 0;
  int unit_calls = 0;
  int errors = 0;
  c.request(add{1, 1}).then([&] { ++no_arg_calls; }, [&](const courier::error&) { ++errors; });
  c.request(add{2, 2}).then([&](courier::unit) { ++unit_calls; }, [&](const courier::error&) { ++errors; });
  sys.run_until_idle();
  CHECK(no_arg_calls == 1);
  CHECK(unit_calls == 1);
  CHECK(errors == 0);

  courier::result<courier::unit> r = c.ask(add{3, 3}, 1s);
  CHECK(r.has_value());
  CHECK(c.ask(get{}, 1s).value() == 12);
}

// ----------------------------------------------------------------------------------------------
// Handler exceptions

TEST_CASE("a handler that throws stops its actor; requests fail, the system goes on", "[actor][stop]") {
  courier_test::watchdog wd("handler exception deterministic");
  probe_state state;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>(&state);
  auto other = sys.spawn<counter>();
  c.send(add{1, 1});
  std::optional<courier::error> boom_error, queued_error;
  bool replied = false;
  c.request(boom{"the flux capacitor broke"})
      .then([&](int) { replied = true; }, [&](const courier::error& e) { boom_error = e; });
  c.request(get{}).then([&](int) { replied = true; }, [&](const courier::error& e) { queued_error = e; });
  sys.run_until_idle();

  REQUIRE(boom_error.has_value());
  CHECK(*boom_error == errc::handler_failed);
  CHECK(boom_error->text.find("the flux capacitor broke") != std::string::npos);
  REQUIRE(queued_error.has_value());
  CHECK(*queued_error == errc::handler_failed);  // the actor's exit reason, and the text says it never ran
  CHECK(queued_error->text.find("the flux capacitor broke") != std::string::npos);
  CHECK(queued_error->text.find("; the message was not handled") != std::string::npos);
  CHECK_FALSE(replied);
  CHECK(state.on_stop_called);
  CHECK(state.total_at_stop == 2);
  CHECK(sys.live_actors() == 1);
  CHECK_FALSE(c.send(add{1, 1}));

  other.send(add{3, 4});
  auto r = other.ask(get{}, 1s);
  REQUIRE(r.has_value());
  CHECK(*r == 7);
}

TEST_CASE("a handler that throws on a threaded system: ask sees handler_failed, others keep working",
          "[actor][stop][concurrent]") {
  courier_test::watchdog wd("handler exception threaded");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto c = sys.spawn<counter>();
  auto other = sys.spawn<counter>();
  auto r = c.ask(boom{"disk on fire"}, 5s);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.err() == errc::handler_failed);
  CHECK(r.err().text.find("disk on fire") != std::string::npos);
  auto after = c.ask(get{}, 5s);
  REQUIRE_FALSE(after.has_value());
  // Refused by the stopped actor or dropped as it stopped (the reply to boom may overtake its
  // stop): either way with the exit reason.
  CHECK(after.err() == errc::handler_failed);
  CHECK(after.err().text.find("disk on fire") != std::string::npos);
  for (int i = 0; i < 100; ++i) other.send(add{i, 0});
  auto total = other.ask(get{}, 5s);
  REQUIRE(total.has_value());
  CHECK(*total == 4950);
  CHECK(courier_test::eventually([&] { return sys.live_actors() == 1; }));
}

// ----------------------------------------------------------------------------------------------
// Ordering

namespace {

struct item {
  int sender;
  int seq;
};
struct report {
  int received = 0;
  int out_of_order = 0;
};
struct get_report {};

class sequence_checker : public courier::actor<sequence_checker, item, get_report> {
 public:
  void on(const item& m) {
    if (next_.size() <= static_cast<std::size_t>(m.sender)) next_.resize(m.sender + 1, 0);
    if (m.seq != next_[m.sender]) ++report_.out_of_order;
    next_[m.sender] = m.seq + 1;
    ++report_.received;
  }
  report on(const get_report&) { return report_; }

 private:
  std::vector<int> next_;
  report report_;
};

}  // namespace

TEST_CASE("messages from one sender arrive in the order sent (threaded, several senders)", "[actor][concurrent]") {
  courier_test::watchdog wd("per-sender fifo");
  constexpr int senders = 4;
  constexpr int per_sender = 3000;
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto sink = sys.spawn<sequence_checker>();
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int s = 0; s < senders; ++s)
    threads.emplace_back([&, s] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < per_sender; ++i) sink.send(item{s, i});
    });
  go.store(true);
  for (auto& t : threads) t.join();
  // Sent after every producer finished, so it is answered after all their messages.
  auto r = sink.ask(get_report{}, 10s);
  REQUIRE(r.has_value());
  CHECK(r->received == senders * per_sender);
  CHECK(r->out_of_order == 0);
}

namespace {

struct kick {
  int n;
};
struct step {
  int n;
};
struct steps_seen {};
class self_sender : public courier::actor<self_sender, kick, step, steps_seen> {
 public:
  void on(const kick& k) {
    for (int i = 0; i < k.n; ++i) sent_ok_ &= self().send(step{i});
  }
  void on(const step& s) { seen_.push_back(s.n); }
  std::vector<int> on(const steps_seen&) {
    if (!sent_ok_) return {-1};
    return seen_;
  }

 private:
  bool sent_ok_ = true;
  std::vector<int> seen_;
};

}  // namespace

TEST_CASE("messages an actor sends itself arrive in order, after what others already sent", "[actor]") {
  courier_test::watchdog wd("self send");
  courier::system sys{courier::config::deterministic()};
  auto a = sys.spawn<self_sender>();
  a.send(kick{3});
  a.send(step{100});  // queued before the handler runs, so served before the self-sends
  sys.run_until_idle();
  auto seen = a.ask(steps_seen{}, 1s);
  REQUIRE(seen.has_value());
  CHECK(*seen == std::vector<int>{100, 0, 1, 2});
}

// ----------------------------------------------------------------------------------------------
// on_turn_end: once per turn, after the turn's last message (a connection flushes its writes there)

namespace {
struct tick {};
class turn_counter : public courier::actor<turn_counter, tick> {
 public:
  turn_counter(std::vector<int>* turns) : turns_(turns) {}
  void on(const tick&) { ++in_turn_; }
  void on_turn_end() {
    turns_->push_back(in_turn_);
    in_turn_ = 0;
  }

 private:
  std::vector<int>* turns_;
  int in_turn_ = 0;
};
}  // namespace

TEST_CASE("on_turn_end runs after the last message of each turn", "[actor][turn_end][deterministic]") {
  std::vector<int> turns;
  auto cfg = courier::config::deterministic();
  cfg.throughput = 4;
  courier::system sys{cfg};
  auto a = sys.spawn<turn_counter>(&turns);
  for (int i = 0; i < 10; ++i) a.send(tick{});
  sys.run_until_idle();
  // 10 messages in turns of at most 4: the hook sees each turn's whole batch, never an empty turn.
  CHECK(turns == std::vector<int>{4, 4, 2});
  a.send(tick{});
  sys.run_until_idle();
  CHECK(turns == std::vector<int>{4, 4, 2, 1});
}

namespace {
struct echo_tick {
  int more = 0;  // ticks this one sends to its own actor
};
// As turn_counter, and its hook also runs where a batch taken from its mailbox is used up.
class batch_counter : public courier::actor<batch_counter, echo_tick> {
 public:
  static constexpr bool courier_turn_end_per_batch = true;
  batch_counter(std::vector<int>* ends) : ends_(ends) {}
  void on(const echo_tick& t) {
    ++since_end_;
    for (int i = 0; i < t.more; ++i) self().send(echo_tick{});
  }
  void on_turn_end() {
    ends_->push_back(since_end_);
    since_end_ = 0;
  }

 private:
  std::vector<int>* ends_;
  int since_end_ = 0;
};
}  // namespace

TEST_CASE("an actor that ends its turn per batch handles what it sent itself before its hook runs",
          "[actor][turn_end][deterministic]") {
  std::vector<int> ends;
  auto cfg = courier::config::deterministic();
  cfg.throughput = 16;
  courier::system sys{cfg};
  auto a = sys.spawn<batch_counter>(&ends);
  // One batch of three; the first sends two more to its own actor: they belong to this batch's
  // work, so the hook runs once, after all five.
  a.send(echo_tick{2});
  a.send(echo_tick{});
  a.send(echo_tick{});
  sys.run_until_idle();
  CHECK(ends == std::vector<int>{5});
  // The budget still ends a turn inside a batch, and the hook never sees an empty batch.
  ends.clear();
  for (int i = 0; i < 20; ++i) a.send(echo_tick{});
  sys.run_until_idle();
  CHECK(ends == std::vector<int>{16, 4});
}

namespace {
struct held_tick {
  std::atomic<bool>* handling;
  std::atomic<bool>* go_on;
};
class held_batch_counter : public courier::actor<held_batch_counter, held_tick, echo_tick> {
 public:
  static constexpr bool courier_turn_end_per_batch = true;
  held_batch_counter(std::vector<int>* ends, std::atomic<int>* hooks) : ends_(ends), hooks_(hooks) {}
  void on(const held_tick& t) {
    ++since_end_;
    t.handling->store(true);
    while (!t.go_on->load()) std::this_thread::yield();
  }
  void on(const echo_tick&) { ++since_end_; }
  void on_turn_end() {
    ends_->push_back(since_end_);
    since_end_ = 0;
    hooks_->fetch_add(1, std::memory_order_release);
  }

 private:
  std::vector<int>* ends_;
  std::atomic<int>* hooks_;
  int since_end_ = 0;
};
}  // namespace

TEST_CASE("an actor that ends its turn per batch runs on_turn_end before it takes the next batch from other threads",
          "[actor][turn_end][concurrent]") {
  courier_test::watchdog wd("turn end per batch", 30s);
  std::vector<int> ends;  // written in the actor's turns, read once `hooks` says they are done
  std::atomic<int> hooks{0};
  {
    courier::config cfg;
    cfg.workers = 1;
    courier::system sys{cfg};
    auto a = sys.spawn<held_batch_counter>(&ends, &hooks);
    std::atomic<bool> handling{false}, go_on{false};
    // The first message's handler holds the turn until two more were pushed from this thread:
    // they are the next batch, taken after the hook ran for the first.
    a.send(held_tick{&handling, &go_on});
    while (!handling.load()) std::this_thread::yield();
    a.send(echo_tick{});
    a.send(echo_tick{});
    go_on.store(true);
    // Without a hook between the batches there is only one: the wait ends at its deadline.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (hooks.load(std::memory_order_acquire) < 2 && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    sys.shutdown();  // a stop request in the same batch as the two would take their turn's end
  }
  CHECK(ends == std::vector<int>{1, 2});
}

namespace {
struct last_tick {};
// Stops from on_turn_end once it has seen a last_tick; monitors must hear at once.
class stops_at_turn_end : public courier::actor<stops_at_turn_end, tick, last_tick> {
 public:
  explicit stops_at_turn_end(int* stopped_after) : stopped_after_(stopped_after) {}
  void on(const tick&) { ++handled_; }
  void on(const last_tick&) {
    ++handled_;
    last_ = true;
  }
  void on_turn_end() {
    if (last_) stop(courier::errc::connection_lost);
  }
  void on_stop() { *stopped_after_ = handled_; }

 private:
  int* stopped_after_;
  int handled_ = 0;
  bool last_ = false;
};
struct watch {
  courier::actor_ref<stops_at_turn_end> target;
};
class watcher : public courier::actor<watcher, watch, courier::down> {
 public:
  explicit watcher(std::vector<std::error_code>* seen) : seen_(seen) {}
  void on(const watch& w) { monitor(w.target); }
  void on(const courier::down& d) { seen_->push_back(d.reason.code); }

 private:
  std::vector<std::error_code>* seen_;
};
}  // namespace

// Both places a turn ends: the mailbox found empty (run_until_idle, one turn of two messages) and
// the budget spent (run_one: a budget of one message).
TEST_CASE("stop() in on_turn_end takes effect as the hook returns, with its reason, without another message",
          "[actor][turn_end][stop][deterministic]") {
  for (const bool by_budget : {false, true}) {
    INFO((by_budget ? "the turn's budget spent" : "the mailbox found empty"));
    int stopped_after = -1;
    std::vector<std::error_code> downs;
    auto cfg = courier::config::deterministic();
    cfg.throughput = 4;
    courier::system sys{cfg};
    auto a = sys.spawn<stops_at_turn_end>(&stopped_after);
    auto w = sys.spawn<watcher>(&downs);
    w.send(watch{a});
    sys.run_until_idle();
    a.send(tick{});
    a.send(last_tick{});
    if (by_budget) {
      CHECK(sys.run_one());  // tick; its turn ends without a stop
      CHECK_FALSE(a.base()->has_stopped());
      CHECK(sys.run_one());  // last_tick; the hook stops the actor
    } else {
      CHECK(sys.run_until_idle() >= 2);
    }
    // No further message was needed for the stop to happen.
    CHECK(stopped_after == 2);
    CHECK(a.base()->has_stopped());
    CHECK(a.base()->exit_reason() == courier::errc::connection_lost);
    sys.run_until_idle();
    REQUIRE(downs.size() == 1);
    CHECK(downs[0] == courier::errc::connection_lost);
    CHECK_FALSE(a.send(tick{}));
  }
}
