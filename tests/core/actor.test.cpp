#include "courier/actor.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
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
struct set_name {
  std::string name;
};
struct boom {
  std::string why;
};
struct quit {};
struct reset {};

/// What an actor reports to its test; the test owns it, the actor writes it from its handlers.
struct probe_state {
  std::mutex mutex;
  std::vector<std::string> events;
  bool on_stop_called = false;
  int total_at_stop = -1;
  void note(std::string e) {
    std::lock_guard lock(mutex);
    events.push_back(std::move(e));
  }
};

class counter : public courier::actor<counter, add, get, set_name, boom, quit, reset> {
 public:
  explicit counter(probe_state* state = nullptr) : state_(state) {}

  void on(const add& m) {
    total_ += m.a + m.b;
    note("add");
  }
  int on(const get&) {
    note("get");
    return total_;
  }
  std::string on(const set_name& r) {
    note("set_name");
    std::string old = std::move(name_);
    name_ = r.name;
    return old;
  }
  int on(const boom& b) {
    note("boom");
    throw std::runtime_error(b.why);
  }
  void on(const quit&) {
    note("quit");
    stop();
  }
  void on(const reset&) {
    note("reset");
    total_ = 0;
  }
  void on_stop() {
    if (state_ == nullptr) return;
    std::lock_guard lock(state_->mutex);
    state_->on_stop_called = true;
    state_->total_at_stop = total_;
  }

 private:
  void note(const char* what) {
    if (state_ != nullptr) state_->note(what);
  }
  probe_state* state_;
  int total_ = 0;
  std::string name_ = "initial";
};

/// Collects `down` messages for the monitors tests.
struct watch {
  courier::actor_ref<counter> target;
};
struct down_log {
  std::mutex mutex;
  std::vector<courier::down> downs;
  std::size_t size() {
    std::lock_guard lock(mutex);
    return downs.size();
  }
};

class watcher : public courier::actor<watcher, watch, courier::down> {
 public:
  explicit watcher(down_log* log) : log_(log) {}
  void on(const watch& w) { monitor(w.target); }
  void on(const courier::down& d) {
    std::lock_guard lock(log_->mutex);
    log_->downs.push_back(d);
  }

 private:
  down_log* log_;
};

/// Requests from inside a handler; the continuation runs later in this actor.
struct fetch {
  courier::actor_ref<counter> from;
  courier::timespan timeout = courier::infinite;
};
struct ask_inside {
  courier::actor_ref<counter> target;
};
struct fetch_log {
  std::mutex mutex;
  std::vector<int> values;
  std::vector<courier::error> errors;
  std::vector<bool> ran_in_actor;  // was the continuation run with this actor current?
  std::size_t settled() {
    std::lock_guard lock(mutex);
    return values.size() + errors.size();
  }
};

class requester : public courier::actor<requester, fetch, ask_inside> {
 public:
  explicit requester(fetch_log* log) : log_(log) {}
  void on(const fetch& f) {
    f.from.request(get{}, f.timeout)
        .then(
            [this](int v) {
              std::lock_guard lock(log_->mutex);
              log_->values.push_back(v);
              log_->ran_in_actor.push_back(courier::detail::current_actor == this);
            },
            [this](const courier::error& e) {
              std::lock_guard lock(log_->mutex);
              log_->errors.push_back(e);
              log_->ran_in_actor.push_back(courier::detail::current_actor == this);
            });
  }
  int on(const ask_inside& a) {
    auto r = a.target.ask(get{}, 1s);
    return r.has_value() ? -1 : r.err().code.value();
  }

 private:
  fetch_log* log_;
};

/// Blocks its worker in a handler until the test opens the gate.
struct block {};
class blocker : public courier::actor<blocker, block, get> {
 public:
  explicit blocker(std::atomic<bool>* gate, std::atomic<bool>* entered) : gate_(gate), entered_(entered) {}
  void on(const block&) {
    entered_->store(true);
    while (!gate_->load()) std::this_thread::sleep_for(1ms);
  }
  int on(const get&) { return 7; }

 private:
  std::atomic<bool>* gate_;
  std::atomic<bool>* entered_;
};

/// Opens a gate when it goes out of scope, so a failing REQUIRE cannot leave a worker stuck.
struct gate_opener {
  std::atomic<bool>& gate;
  ~gate_opener() { gate.store(true); }
};

}  // namespace

// ----------------------------------------------------------------------------------------------
// Static properties

static_assert(counter::accepts<add>);
static_assert(counter::accepts<reset>);
static_assert(!counter::accepts<watch>);
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

TEST_CASE("request from a handler: the reply runs the continuation later, inside the requester",
          "[actor][deterministic]") {
  courier_test::watchdog wd("request from handler");
  fetch_log log;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  auto r = sys.spawn<requester>(&log);
  c.send(add{2, 3});
  r.send(fetch{c});

  REQUIRE(sys.run_one());  // counter: add
  REQUIRE(sys.run_one());  // requester: fetch, sends the request
  CHECK(log.settled() == 0);
  REQUIRE(sys.run_one());  // counter: get, replies into the requester's mailbox
  CHECK(log.settled() == 0);
  REQUIRE(sys.run_one());  // requester: the reply runs the continuation
  CHECK_FALSE(sys.run_one());
  REQUIRE(log.values == std::vector<int>{5});
  CHECK(log.errors.empty());
  CHECK(log.ran_in_actor == std::vector<bool>{true});
}

TEST_CASE("request from a handler to a stopped actor: the error continuation runs in the requester",
          "[actor][deterministic]") {
  courier_test::watchdog wd("request from handler to stopped");
  fetch_log log;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  auto r = sys.spawn<requester>(&log);
  c.send(quit{});
  sys.run_until_idle();
  REQUIRE(sys.live_actors() == 1);
  r.send(fetch{c, 10s});
  REQUIRE(sys.run_one());  // fetch: the request is refused, its error queued to the requester
  CHECK(log.settled() == 0);
  REQUIRE(sys.run_one());  // the error runs the continuation
  REQUIRE(log.errors.size() == 1);
  CHECK(log.errors[0] == errc::actor_stopped);
  CHECK(log.ran_in_actor == std::vector<bool>{true});
  CHECK(log.values.empty());
  CHECK(sys.dead_letters() == 0);  // a refused request is not a dead letter: its requester is told
}

// ----------------------------------------------------------------------------------------------
// Time-outs

TEST_CASE("request time-out from a plain thread: on_error gets request_timeout, a late reply is dropped",
          "[actor][timeout]") {
  courier_test::watchdog wd("request timeout plain thread");
  courier::system sys{courier::config::deterministic()};  // virtual clock: nothing fires by itself
  auto c = sys.spawn<counter>();
  int values = 0;
  int errors = 0;
  courier::error seen;
  c.request(get{}, 50ms).then([&](int) { ++values; },
                              [&](const courier::error& e) {
                                seen = e;
                                ++errors;
                              });
  CHECK(sys.advance_time(49ms) == 0);
  CHECK(errors == 0);
  CHECK(sys.advance_time(1ms) == 1);  // exactly at the deadline, on this thread
  REQUIRE(errors == 1);
  CHECK(seen == errc::request_timeout);
  // The request is still queued; handling it now must not run either continuation again.
  CHECK(sys.run_until_idle() >= 1);
  CHECK(values == 0);
  CHECK(errors == 1);
}

TEST_CASE("request time-out inside an actor: the error continuation runs in the requester",
          "[actor][timeout]") {
  courier_test::watchdog wd("request timeout in actor");
  fetch_log log;
  courier::system mine{courier::config::deterministic()};
  courier::system never_driven{courier::config::deterministic()};
  auto target = never_driven.spawn<counter>();
  auto r = mine.spawn<requester>(&log);
  r.send(fetch{target, 50ms});
  CHECK(mine.run_until_idle() == 1);
  // The deadline runs on the requester's clock, not the target's.
  CHECK(never_driven.advance_time(1h) == 0);
  CHECK(mine.advance_time(49ms) == 0);
  CHECK(mine.advance_time(1ms) == 1);
  CHECK(log.settled() == 0);  // the time-out arrives as a message: the requester must run
  CHECK(mine.run_until_idle() == 1);
  REQUIRE(log.errors.size() == 1);
  CHECK(log.errors[0] == errc::request_timeout);
  CHECK(log.ran_in_actor == std::vector<bool>{true});
  // Now the target replies; the requester drops the late reply.
  never_driven.run_until_idle();
  mine.run_until_idle();
  CHECK(log.values.empty());
  CHECK(log.settled() == 1);
}

TEST_CASE("ask time-out against a stuck threaded actor", "[actor][timeout][concurrent]") {
  courier_test::watchdog wd("ask timeout");
  std::atomic<bool> gate{false}, entered{false};
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  gate_opener opener{gate};
  auto b = sys.spawn<blocker>(&gate, &entered);
  b.send(block{});
  REQUIRE(courier_test::eventually([&] { return entered.load(); }));
  const auto start = std::chrono::steady_clock::now();
  auto r = b.ask(get{}, 100ms);
  CHECK(std::chrono::steady_clock::now() - start >= 100ms);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.err() == errc::request_timeout);
  gate.store(true);
  // Unblocked, the actor answers again (and drops the reply nobody waits for).
  auto again = b.ask(get{}, 5s);
  REQUIRE(again.has_value());
  CHECK(*again == 7);
}

// ----------------------------------------------------------------------------------------------
// Stopping

TEST_CASE("requests to a stopped actor fail with actor_stopped at once", "[actor][stop]") {
  courier_test::watchdog wd("request to stopped");
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  c.send(quit{});
  sys.run_until_idle();
  REQUIRE(sys.live_actors() == 0);

  std::optional<courier::error> failed;
  bool replied = false;
  c.request(get{}, 10s).then([&](int) { replied = true; }, [&](const courier::error& e) { failed = e; });
  REQUIRE(failed.has_value());  // synchronously, without driving the system
  CHECK(*failed == errc::actor_stopped);
  CHECK_FALSE(replied);

  failed.reset();
  c.request(get{}).then([&](int) { replied = true; }, [&](const courier::error& e) { failed = e; });
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::actor_stopped);

  const auto start = std::chrono::steady_clock::now();
  auto r = c.ask(get{}, 10s);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.err() == errc::actor_stopped);
  CHECK(sys.dead_letters() == 0);  // refused requests are not dead letters: their requesters are told
}

TEST_CASE("stop() inside a handler: queued requests fail with actor_stopped, on_stop runs", "[actor][stop]") {
  courier_test::watchdog wd("self stop");
  probe_state state;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>(&state);
  c.send(add{4, 5});
  c.send(quit{});
  std::optional<courier::error> failed;
  bool replied = false;
  c.request(get{}).then([&](int) { replied = true; }, [&](const courier::error& e) { failed = e; });
  c.send(add{100, 100});

  REQUIRE(sys.run_one());  // add
  CHECK(sys.live_actors() == 1);
  REQUIRE(sys.run_one());  // quit: stops, discarding what is queued
  CHECK(sys.live_actors() == 0);
  REQUIRE(failed.has_value());
  CHECK(*failed == errc::actor_stopped);
  CHECK_FALSE(replied);
  CHECK(state.on_stop_called);
  CHECK(state.total_at_stop == 9);
  CHECK(state.events == std::vector<std::string>{"add", "quit"});
  CHECK_FALSE(sys.run_one());
  CHECK_FALSE(c.send(add{1, 1}));
}

TEST_CASE("a handler that throws stops its actor; requests fail, the system goes on", "[actor][stop]") {
  courier_test::watchdog wd("handler exception deterministic");
  probe_state state;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>(&state);
  auto other = sys.spawn<counter>();
  c.send(add{1, 1});
  std::optional<courier::error> boom_error, queued_error;
  bool replied = false;
  c.request(boom{"the flux capacitor broke"}).then([&](int) { replied = true; },
                                                   [&](const courier::error& e) { boom_error = e; });
  c.request(get{}).then([&](int) { replied = true; }, [&](const courier::error& e) { queued_error = e; });
  sys.run_until_idle();

  REQUIRE(boom_error.has_value());
  CHECK(*boom_error == errc::handler_failed);
  CHECK(boom_error->text.find("the flux capacitor broke") != std::string::npos);
  REQUIRE(queued_error.has_value());
  CHECK(*queued_error == errc::actor_stopped);
  CHECK(queued_error->text.find("the flux capacitor broke") != std::string::npos);
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
  CHECK(after.err() == errc::actor_stopped);
  for (int i = 0; i < 100; ++i) other.send(add{i, 0});
  auto total = other.ask(get{}, 5s);
  REQUIRE(total.has_value());
  CHECK(*total == 4950);
  CHECK(courier_test::eventually([&] { return sys.live_actors() == 1; }));
}

// ----------------------------------------------------------------------------------------------
// Monitors

TEST_CASE("monitors: down with no error after a normal stop", "[actor][monitor]") {
  courier_test::watchdog wd("monitor normal");
  down_log log;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  auto w1 = sys.spawn<watcher>(&log);
  auto w2 = sys.spawn<watcher>(&log);
  w1.send(watch{c});
  w2.send(watch{c});
  sys.run_until_idle();
  CHECK(log.size() == 0);
  c.send(quit{});
  sys.run_until_idle();
  REQUIRE(log.size() == 2);
  for (const auto& d : log.downs) {
    CHECK(d.id == c.id());
    CHECK_FALSE(d.reason);
  }
}

TEST_CASE("monitors: down carries handler_failed and the exception text", "[actor][monitor]") {
  courier_test::watchdog wd("monitor exception");
  down_log log;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>();
  auto w = sys.spawn<watcher>(&log);
  w.send(watch{c});
  sys.run_until_idle();
  c.send(boom{"out of cheese"});
  sys.run_until_idle();
  REQUIRE(log.size() == 1);
  CHECK(log.downs[0].id == c.id());
  CHECK(log.downs[0].reason == errc::handler_failed);
  CHECK(log.downs[0].reason.text.find("out of cheese") != std::string::npos);
}

TEST_CASE("monitors: actor_ref::stop_after_queued gives stopped_by_request after the queued messages",
          "[actor][monitor]") {
  courier_test::watchdog wd("monitor stop request");
  down_log log;
  probe_state state;
  courier::system sys{courier::config::deterministic()};
  auto c = sys.spawn<counter>(&state);
  auto w = sys.spawn<watcher>(&log);
  w.send(watch{c});
  sys.run_until_idle();
  c.send(add{1, 2});
  c.send(add{3, 4});
  c.stop_after_queued();
  std::optional<courier::error> late;
  c.request(get{}).then([](int) {}, [&](const courier::error& e) { late = e; });
  sys.run_until_idle();
  CHECK(state.total_at_stop == 10);  // both adds ran before the stop request
  REQUIRE(log.size() == 1);
  CHECK(log.downs[0].reason == errc::stopped_by_request);
  REQUIRE(late.has_value());
  CHECK(*late == errc::actor_stopped);
}

TEST_CASE("monitors: watching an actor that already stopped delivers down at once", "[actor][monitor]") {
  courier_test::watchdog wd("monitor already stopped");
  down_log log;
  courier::system sys{courier::config::deterministic()};
  auto normal = sys.spawn<counter>();
  auto failed = sys.spawn<counter>();
  normal.send(quit{});
  failed.send(boom{"gone"});
  sys.run_until_idle();
  REQUIRE(sys.live_actors() == 0);

  auto w = sys.spawn<watcher>(&log);
  w.send(watch{normal});
  w.send(watch{failed});
  sys.run_until_idle();
  REQUIRE(log.size() == 2);
  CHECK(log.downs[0].id == normal.id());
  CHECK_FALSE(log.downs[0].reason);
  CHECK(log.downs[1].id == failed.id());
  CHECK(log.downs[1].reason == errc::handler_failed);
  CHECK(log.downs[1].reason.text.find("gone") != std::string::npos);
}

TEST_CASE("monitors across threads: every watcher hears exactly one down", "[actor][monitor][concurrent]") {
  courier_test::watchdog wd("monitor threaded");
  down_log log;
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  std::vector<courier::actor_ref<counter>> targets;
  std::vector<courier::actor_ref<watcher>> watchers;
  for (int i = 0; i < 8; ++i) targets.push_back(sys.spawn<counter>());
  for (int i = 0; i < 4; ++i) watchers.push_back(sys.spawn<watcher>(&log));
  for (auto& w : watchers)
    for (auto& t : targets) w.send(watch{t});
  // Stop the targets while the watches are still arriving: either path must deliver down once.
  for (auto& t : targets) t.send(quit{});
  REQUIRE(courier_test::eventually([&] { return log.size() >= 32; }));
  std::this_thread::sleep_for(20ms);
  CHECK(log.size() == 32);
}

// ----------------------------------------------------------------------------------------------
// Blocking calls from handlers, ordering

TEST_CASE("ask() from inside a handler is refused with would_deadlock", "[actor]") {
  courier_test::watchdog wd("ask inside handler");
  fetch_log log;
  SECTION("deterministic") {
    courier::system sys{courier::config::deterministic()};
    auto c = sys.spawn<counter>();
    auto r = sys.spawn<requester>(&log);
    auto code = r.ask(ask_inside{c}, 1s);
    REQUIRE(code.has_value());
    CHECK(*code == static_cast<int>(errc::would_deadlock));
  }
  SECTION("threaded") {
    courier::config cfg;
    cfg.workers = 2;
    courier::system sys{cfg};
    auto c = sys.spawn<counter>();
    auto r = sys.spawn<requester>(&log);
    auto code = r.ask(ask_inside{c}, 5s);
    REQUIRE(code.has_value());
    CHECK(*code == static_cast<int>(errc::would_deadlock));
  }
}

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

TEST_CASE("messages from one sender arrive in the order sent (threaded, several senders)",
          "[actor][concurrent]") {
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

TEST_CASE("messages an actor sends itself arrive in order, after what others already sent",
          "[actor]") {
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
