// Deferred replies: response_promise, delegate, broken promises, unawaited requests.
#include "courier/response_promise.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "courier/courier.hpp"
#include "expect.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;

namespace {

struct lookup {
  int key;
};
struct get {
  int key;
};
struct get_twice {
  int key;
};
struct get_broken {};
struct get_unmade {};
struct get_then_throw {};
struct get_delegated {
  int key;
};
struct get_held {};
struct release_held {
  int value;
};
struct fail_held {};
struct note {};

/// Answers lookups at once: the "database".
class database : public courier::actor<database, lookup> {
 public:
  int on(const lookup& l) { return l.key * 10; }
};

/// What a front saw of its own promises, kept by the test that spawned it (which runs the
/// front's handlers on its own thread).
struct front_seen {
  bool first_delivered = false;
  bool second_delivered = true;
  bool one_way_promise_empty = false;
};

/// Answers `get` only after asking the database: a proxy written with deferred replies.
class front : public courier::actor<front, get, get_twice, get_broken, get_unmade, get_then_throw, get_delegated,
                                    get_held, release_held, fail_held, note> {
 public:
  explicit front(courier::actor_ref<database> db, front_seen* seen = nullptr)
      : db_(std::move(db)), seen_(seen != nullptr ? seen : &own_) {}

  courier::response_promise<int> on(const get& g) {
    auto answer = make_response_promise<int>();
    db_.request(lookup{g.key})
        .then([answer](int v) mutable { answer.deliver(v + 1); },
              [answer](const courier::error& e) mutable { answer.fail(e); });
    return answer;
  }
  courier::response_promise<int> on(const get_twice& g) {
    auto answer = make_response_promise<int>();
    auto copy = answer;
    seen_->first_delivered = answer.deliver(g.key);
    seen_->second_delivered = copy.deliver(g.key + 1000);
    return answer;
  }
  courier::response_promise<int> on(const get_broken&) {
    auto answer = make_response_promise<int>();
    return {};  // `answer` is dropped unanswered here
  }
  courier::response_promise<int> on(const get_unmade&) { return {}; }
  courier::response_promise<int> on(const get_then_throw&) {
    auto answer = make_response_promise<int>();
    throw std::runtime_error("after the promise");
  }
  courier::delegated<int> on(const get_delegated& g) { return delegate(db_, lookup{g.key}); }
  courier::response_promise<std::string> on(const get_held&) {
    held_ = make_response_promise<std::string>();
    return held_;
  }
  void on(const release_held& r) { held_.deliver(std::to_string(r.value)); }
  void on(const fail_held&) { held_.fail(courier::error(errc::handler_failed, "told to fail")); }
  courier::response_promise<int> on(const note&) {
    seen_->one_way_promise_empty = !make_response_promise<int>().pending();
    return {};
  }
  void on_stop() { db_.reset(); }

 private:
  courier::actor_ref<database> db_;
  front_seen own_;
  front_seen* seen_;
  courier::response_promise<std::string> held_;
};

template <class R>
struct outcome {
  std::optional<R> value;
  std::optional<courier::error> error;
};

/// Sends a request from the test thread and records how it settled.
template <class T, class M, class R = courier::reply_type_t<T, M>>
std::shared_ptr<outcome<R>> request(const courier::actor_ref<T>& to, M msg,
                                    courier::timespan timeout = courier::infinite) {
  auto out = std::make_shared<outcome<R>>();
  to.request(std::move(msg), timeout)
      .then([out](R v) { out->value = std::move(v); }, [out](const courier::error& e) { out->error = e; });
  return out;
}

void run_all(courier::system& sys) {
  while (sys.run_one()) {
  }
}

}  // namespace

TEST_CASE("a handler answers later through a promise, after asking another actor", "[deferred]") {
  courier::system sys{courier::config::deterministic()};
  auto db = sys.spawn<database>();
  auto f = sys.spawn<front>(db);
  auto out = request(f, get{4});
  REQUIRE(sys.run_one());  // front handles get, asks the database, returns its promise
  CHECK_FALSE(out->value);
  REQUIRE(sys.run_one());  // the database replies to front
  CHECK_FALSE(out->value);
  REQUIRE(sys.run_one());  // front's continuation delivers: the reply settles the test's request
  CHECK_FALSE(out->value);
  REQUIRE(sys.run_one());  // the test's continuation, on the host lane
  REQUIRE(out->value);
  CHECK(*out->value == 41);
  CHECK_FALSE(out->error);
}

TEST_CASE("ask sees a deferred reply", "[deferred]") {
  courier::system sys{courier::config::deterministic()};
  auto f = sys.spawn<front>(sys.spawn<database>());
  auto r = f.ask(get{7}, 1s);
  REQUIRE(r.has_value());
  CHECK(*r == 71);
}

TEST_CASE("copies of a promise share one answer: the first deliver wins", "[deferred]") {
  courier::system sys{courier::config::deterministic()};
  auto f = sys.spawn<front>(sys.spawn<database>());
  auto out = request(f, get_twice{5});
  run_all(sys);
  REQUIRE(out->value);
  CHECK(*out->value == 5);
}

TEST_CASE("a promise dropped unanswered fails the request with broken_promise", "[deferred]") {
  courier::system sys{courier::config::deterministic()};
  auto f = sys.spawn<front>(sys.spawn<database>());
  auto dropped = request(f, get_broken{});
  auto unmade = request(f, get_unmade{});
  run_all(sys);
  REQUIRE(dropped->error);
  CHECK(*dropped->error == errc::broken_promise);
  REQUIRE(unmade->error);
  CHECK(*unmade->error == errc::broken_promise);
  CHECK_FALSE(dropped->value);
  CHECK_FALSE(unmade->value);
}

TEST_CASE("a handler that throws after making its promise fails the request once", "[deferred]") {
  courier::system sys{courier::config::deterministic()};
  auto f = sys.spawn<front>(sys.spawn<database>());
  auto out = request(f, get_then_throw{});
  run_all(sys);
  REQUIRE(out->error);
  CHECK(*out->error == errc::broken_promise);
  CHECK(out->error->text.find("exception") != std::string::npos);
  CHECK(sys.live_actors() == 1);  // front stopped (its handler threw); the database runs on
}

TEST_CASE("a promise kept in the actor is answered by a later message, or failed", "[deferred]") {
  courier::system sys{courier::config::deterministic()};
  auto f = sys.spawn<front>(sys.spawn<database>());
  auto held = request(f, get_held{});
  run_all(sys);
  CHECK_FALSE(held->value);
  CHECK_FALSE(held->error);
  REQUIRE(f.send(release_held{12}));
  run_all(sys);
  REQUIRE(held->value);
  CHECK(*held->value == "12");

  auto failed = request(f, get_held{});
  run_all(sys);
  REQUIRE(f.send(fail_held{}));
  run_all(sys);
  REQUIRE(failed->error);
  CHECK(*failed->error == errc::handler_failed);
  CHECK(failed->error->text == "told to fail");
}

TEST_CASE("a promise answered after the request timed out changes nothing", "[deferred]") {
  courier::system sys{courier::config::deterministic()};
  auto f = sys.spawn<front>(sys.spawn<database>());
  auto held = request(f, get_held{}, 10ms);
  run_all(sys);
  sys.advance_time(10ms);
  run_all(sys);
  REQUIRE(held->error);
  CHECK(*held->error == errc::request_timeout);
  REQUIRE(f.send(release_held{1}));  // the late answer is discarded
  run_all(sys);
  CHECK_FALSE(held->value);
}

TEST_CASE("a promise made for a one-way message is empty", "[deferred]") {
  front_seen seen;
  courier::system sys{courier::config::deterministic()};
  auto db = sys.spawn<database>();
  auto f = sys.spawn<front>(db, &seen);
  REQUIRE(f.send(note{}));
  run_all(sys);
  CHECK(seen.one_way_promise_empty);
}

TEST_CASE("delegate: the other actor's reply goes straight to the original requester", "[deferred]") {
  courier::system sys{courier::config::deterministic()};
  auto db = sys.spawn<database>();
  auto f = sys.spawn<front>(db);
  auto out = request(f, get_delegated{3});
  courier_test::expect<get_delegated>(sys).to(f);  // front delegates: a lookup goes to the database
  courier_test::expect<lookup>(sys).to(db);        // the database replies to the test's request
  courier_test::expect_host_continuation(sys);     // which the host lane runs
  REQUIRE(out->value);
  CHECK(*out->value == 30);
  courier_test::expect_nothing(sys);  // front is not involved: the reply never reaches it

  db.stop();
  run_all(sys);
  auto to_stopped = request(f, get_delegated{3});
  run_all(sys);
  REQUIRE(to_stopped->error);
  CHECK(*to_stopped->error == errc::stopped_by_request);  // the database's exit reason
  CHECK(sys.dead_letters() == 0);  // a failed request is reported to its requester, not a dead letter
}

TEST_CASE("a promise is answered from another thread", "[deferred][concurrent]") {
  courier_test::watchdog dog("a promise is answered from another thread", 20s);
  courier::system sys;
  auto f = sys.spawn<front>(sys.spawn<database>());
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> got{-1};
    f.request(get_held{})
        .then([&](const std::string& v) { got.store(std::stoi(v)); }, [&](const courier::error&) { got.store(-2); });
    std::thread other([&] { REQUIRE(f.send(release_held{round})); });
    other.join();
    while (got.load() == -1) std::this_thread::yield();
    REQUIRE(got.load() == round);
  }
}

TEST_CASE("a request dropped without .then is sent one-way and counted", "[deferred]") {
  front_seen seen;
  courier::system sys{courier::config::deterministic()};
  auto db = sys.spawn<database>();
  auto f = sys.spawn<front>(db, &seen);
  {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-result"
    f.request(get_twice{9});  // deliberately never awaited
#pragma GCC diagnostic pop
  }
  CHECK(sys.unawaited_requests() == 1);
  REQUIRE(sys.run_one());
  CHECK(seen.first_delivered == false);  // one-way: the handler's promise was empty
  CHECK_FALSE(sys.run_one());
}

TEST_CASE("delegate to a full bounded mailbox fails the original request with mailbox_full", "[deferred]") {
  courier::system sys{courier::config::deterministic()};
  auto db = sys.spawn<database>(courier::spawn_options{.mailbox_capacity = 1});
  auto f = sys.spawn<front>(db);
  auto out = request(f, get_delegated{2});  // front is scheduled first
  REQUIRE(db.send(lookup{1}));              // fills the database's mailbox
  REQUIRE(sys.run_one());                   // front delegates to the full database
  CHECK_FALSE(out->error);                  // the failure waits for the host lane, behind the database
  run_all(sys);
  REQUIRE(out->error);
  CHECK(*out->error == errc::mailbox_full);
  CHECK(sys.dead_letters() == 0);
}

// ----------------------------------------------------------------------------------------------
// Abandoned promises: the served actor learns that its caller is gone

namespace {

struct wait_for_answer {};
struct kept_count {};
struct is_abandoned {};
struct answer_kept {};

/// Keeps every wait_for_answer's promise unanswered and reports, from its own thread, whether
/// the last one is abandoned.
class keeper : public courier::actor<keeper, wait_for_answer, kept_count, is_abandoned, answer_kept> {
 public:
  courier::response_promise<int> on(const wait_for_answer&) {
    kept_.push_back(make_response_promise<int>());
    return kept_.back();
  }
  int on(const kept_count&) { return static_cast<int>(kept_.size()); }
  bool on(const is_abandoned&) { return !kept_.empty() && kept_.back().abandoned(); }
  void on(const answer_kept&) {
    for (auto& p : kept_) p.deliver(1);
    kept_.clear();
  }

 private:
  std::vector<courier::response_promise<int>> kept_;
};

struct ask_keeper {
  courier::actor_ref<keeper> target;
};

/// Requests an answer from a keeper and waits for it (no time-out) as its continuation.
class waiting_requester : public courier::actor<waiting_requester, ask_keeper> {
 public:
  void on(const ask_keeper& m) {
    m.target.request(wait_for_answer{}).then([](int) {}, [](const courier::error&) {});
  }
};

bool keeper_says_abandoned(const courier::actor_ref<keeper>& k) {
  auto r = k.ask(is_abandoned{}, 5s);
  REQUIRE(r.has_value());
  return *r;
}

void wait_until_kept(const courier::actor_ref<keeper>& k, int count) {
  REQUIRE(courier_test::eventually([&] {
    auto r = k.ask(kept_count{}, 5s);
    return r.has_value() && *r >= count;
  }));
}

}  // namespace

TEST_CASE("abandoned: false while the requesting actor waits, true once it has stopped",
          "[deferred][abandoned][concurrent]") {
  courier_test::watchdog wd("abandoned requester stops");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto k = sys.spawn<keeper>();
  for (int round = 0; round < 20; ++round) {
    auto a = sys.spawn<waiting_requester>();
    a.send(ask_keeper{k});
    wait_until_kept(k, round + 1);
    CHECK_FALSE(keeper_says_abandoned(k));  // the requester lives and waits
    a.stop();
    CHECK(courier_test::eventually([&] { return keeper_says_abandoned(k); }, 5s));
  }
  CHECK(k.send(answer_kept{}));  // answering abandoned promises harms nobody
  auto r = k.ask(kept_count{}, 5s);
  REQUIRE(r.has_value());
  CHECK(*r == 0);
}

TEST_CASE("abandoned: true once an ask caller gave up, false while it waits", "[deferred][abandoned][concurrent]") {
  courier_test::watchdog wd("abandoned ask times out");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto k = sys.spawn<keeper>();
  std::atomic<bool> asked{false};
  std::optional<courier::error> outcome;
  std::thread caller([&] {
    asked = true;
    auto r = k.ask(wait_for_answer{}, 300ms);
    if (!r.has_value()) outcome = r.err();
  });
  while (!asked.load()) std::this_thread::yield();
  wait_until_kept(k, 1);
  CHECK_FALSE(keeper_says_abandoned(k));  // well inside the 300 ms: the caller still waits
  caller.join();
  REQUIRE(outcome.has_value());
  CHECK(*outcome == errc::request_timeout);
  CHECK(keeper_says_abandoned(k));
}

TEST_CASE("abandoned: true after a 50 ms ask time-out, and after a request().then time-out",
          "[deferred][abandoned][concurrent]") {
  courier_test::watchdog wd("abandoned after time-outs");
  courier::config cfg;
  cfg.workers = 2;
  courier::system sys{cfg};
  auto k = sys.spawn<keeper>();
  auto r = k.ask(wait_for_answer{}, 50ms);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.err() == errc::request_timeout);
  CHECK(keeper_says_abandoned(k));

  std::atomic<bool> failed{false};
  courier::error why;  // written by the continuation (on a worker) before `failed`
  k.request(wait_for_answer{}, 50ms)
      .then([](int) {},
            [&](const courier::error& e) {
              why = e;
              failed = true;
            });
  wait_until_kept(k, 2);
  REQUIRE(courier_test::eventually([&] { return failed.load(); }));
  CHECK(why == errc::request_timeout);
  CHECK(keeper_says_abandoned(k));
}

TEST_CASE("abandoned: a plain thread's request without time-out is never abandoned while it waits",
          "[deferred][abandoned]") {
  courier_test::watchdog wd("abandoned plain thread waits");
  courier::system sys{courier::config::deterministic()};
  auto k = sys.spawn<keeper>();
  std::optional<int> value;
  k.request(wait_for_answer{}).then([&](int v) { value = v; }, [](const courier::error&) {});
  sys.run_until_idle();
  CHECK_FALSE(keeper_says_abandoned(k));
  k.send(answer_kept{});
  sys.run_until_idle();
  REQUIRE(value.has_value());
  CHECK(*value == 1);
  CHECK_FALSE(courier::response_promise<int>{}.pending());
  CHECK(courier::response_promise<int>{}.abandoned());  // empty: nobody to answer
}
