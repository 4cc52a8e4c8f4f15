// The named registry: typed look-ups, taken names, names of stopped actors, thread safety.

#include "courier/registry.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "courier/courier.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;

namespace {

struct get {};
struct quit {};

class store : public courier::actor<store, get, quit> {
 public:
  explicit store(int value = 0, std::atomic<int>* destroyed = nullptr) : value_(value), destroyed_(destroyed) {}
  ~store() {
    if (destroyed_ != nullptr) destroyed_->fetch_add(1);
  }
  int on(const get&) { return value_; }
  void on(const quit&) { stop(); }

 private:
  int value_;
  std::atomic<int>* destroyed_;
};

class other : public courier::actor<other, get> {
 public:
  int on(const get&) { return -1; }
};

/// Registers itself in on_start; looks a peer up by name from a handler.
struct lookup {
  std::string name;
};
class named : public courier::actor<named, get, lookup> {
 public:
  explicit named(std::string name) : name_(std::move(name)) {}
  void on_start() { registered_ = system().registry().put(name_, self()).has_value(); }
  int on(const get&) { return registered_ ? 1 : 0; }
  int on(const lookup& l) {
    auto peer = system().registry().get<store>(l.name);
    if (!peer.has_value()) return -peer.err().code.value();
    return peer->send(get{}) ? 1 : 0;
  }

 private:
  std::string name_;
  bool registered_ = false;
};

}  // namespace

TEST_CASE("registry: put then get the same type", "[registry][deterministic]") {
  courier::system sys{courier::config::deterministic()};
  auto s = sys.spawn<store>(7);
  REQUIRE(sys.registry().put("db", s).has_value());
  auto found = sys.registry().get<store>("db");
  REQUIRE(found.has_value());
  CHECK(*found == s);
  CHECK(found->ask(get{}, 1s).value() == 7);
  CHECK(sys.registry().size() == 1);
}

TEST_CASE("registry: a missing name and a wrong type are errors, not casts", "[registry][deterministic]") {
  courier::system sys{courier::config::deterministic()};
  auto s = sys.spawn<store>();
  REQUIRE(sys.registry().put("db", s).has_value());
  auto missing = sys.registry().get<store>("nope");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.err() == errc::name_not_found);
  auto wrong = sys.registry().get<other>("db");
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.err() == errc::interface_mismatch);
  CHECK(wrong.err().code.value() == 268);
  CHECK(sys.registry().get<store>("db").has_value());  // the mismatch left the entry alone
}

TEST_CASE("registry: refs are put and found by interface", "[registry][deterministic]") {
  using store_api = courier::interface<int(get)>;
  using other_api = courier::interface<void(quit)>;
  courier::system sys{courier::config::deterministic()};
  // The interface lists get at position 0, which is store's index 0 too; quit is store's index 1.
  courier::actor_ref<other_api> quitter = sys.spawn<store>(3);
  courier::actor_ref<store_api> s = sys.spawn<store>(5);
  REQUIRE(sys.registry().put("db", s).has_value());
  REQUIRE(sys.registry().put("quitter", quitter).has_value());
  auto found = sys.registry().get<store_api>("db");
  REQUIRE(found.has_value());
  CHECK(*found == s);
  CHECK(found->ask(get{}, 1s).value() == 5);
  CHECK(sys.registry().get<store>("db").err() == errc::interface_mismatch);  // put as the interface
  CHECK(sys.registry().get<other_api>("db").err() == errc::interface_mismatch);
  auto q = sys.registry().get<other_api>("quitter");
  REQUIRE(q.has_value());
  REQUIRE(q->send(quit{}));  // through the table kept in the registry: store's index of quit
  while (sys.run_one()) {
  }
  CHECK(sys.live_actors() == 1);
}

TEST_CASE("registry: a name held by a live actor is taken; erase frees it", "[registry][deterministic]") {
  courier::system sys{courier::config::deterministic()};
  auto a = sys.spawn<store>(1);
  auto b = sys.spawn<store>(2);
  REQUIRE(sys.registry().put("db", a).has_value());
  auto again = sys.registry().put("db", b);
  REQUIRE_FALSE(again.has_value());
  CHECK(again.err() == errc::name_taken);
  CHECK(again.err().code.value() == 269);
  CHECK(*sys.registry().get<store>("db") == a);
  CHECK(sys.registry().erase("db"));
  CHECK_FALSE(sys.registry().erase("db"));
  REQUIRE(sys.registry().put("db", b).has_value());
  CHECK(*sys.registry().get<store>("db") == b);
  CHECK(sys.registry().put("empty", courier::actor_ref<store>{}).err() == errc::empty_reference);
}

TEST_CASE("registry: a stopped actor's name is released", "[registry][deterministic]") {
  courier::system sys{courier::config::deterministic()};
  std::atomic<int> destroyed{0};
  {
    auto a = sys.spawn<store>(1, &destroyed);
    REQUIRE(sys.registry().put("db", a).has_value());
    REQUIRE(sys.registry().put("db2", a).has_value());
    a.send(quit{});
    sys.run_until_idle();
  }
  CHECK(destroyed.load() == 0);  // the entries still hold the stopped actor's memory
  auto gone = sys.registry().get<store>("db");
  REQUIRE_FALSE(gone.has_value());
  CHECK(gone.err() == errc::name_not_found);
  CHECK(sys.registry().size() == 1);  // the look-up dropped the entry
  auto b = sys.spawn<store>(2);
  REQUIRE(sys.registry().put("db2", b).has_value());  // replaces the stopped actor's entry
  CHECK(destroyed.load() == 1);                       // and frees it
  CHECK(sys.registry().get<store>("db2")->ask(get{}, 1s).value() == 2);
}

TEST_CASE("registry: shutdown empties the registry and frees the actors it held", "[registry][deterministic]") {
  std::atomic<int> destroyed{0};
  courier::system sys{courier::config::deterministic()};
  REQUIRE(sys.registry().put("db", sys.spawn<store>(1, &destroyed)).has_value());
  CHECK(destroyed.load() == 0);
  CHECK(sys.shutdown().clean);
  CHECK(sys.registry().size() == 0);
  CHECK(destroyed.load() == 1);
}

TEST_CASE("registry: actors register in on_start and look each other up from handlers", "[registry][deterministic]") {
  courier::system sys{courier::config::deterministic()};
  auto s = sys.spawn<store>(5);
  REQUIRE(sys.registry().put("store", s).has_value());
  auto n = sys.spawn<named>("named");
  CHECK(n.ask(get{}, 1s).value() == 1);  // on_start ran first and registered it
  CHECK(*sys.registry().get<named>("named") == n);
  CHECK(n.ask(lookup{"store"}, 1s).value() == 1);
  CHECK(n.ask(lookup{"missing"}, 1s).value() == -static_cast<int>(errc::name_not_found));
  CHECK(n.ask(lookup{"named"}, 1s).value() == -static_cast<int>(errc::interface_mismatch));
}

TEST_CASE("registry: concurrent put, get and erase from many threads", "[registry][concurrent]") {
  // Every assertion here holds for any interleaving (the threads may well run one after another on
  // a loaded machine): exactly one of the racing puts of one name wins, and the entries left equal
  // the successful puts minus the successful erases.
  courier_test::watchdog wd("registry concurrent");
  courier::system sys{courier::config{}};
  std::vector<courier::actor_ref<store>> actors;
  for (int i = 0; i < 8; ++i) actors.push_back(sys.spawn<store>(i));
  constexpr int threads_n = 4;
  std::atomic<int> contended_won{-1};
  std::atomic<int> contended_taken{0};
  std::atomic<int> puts{0};
  std::atomic<int> erases{0};
  std::atomic<int> wrong_value{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_n; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads_n) std::this_thread::yield();
      auto mine = actors[static_cast<std::size_t>(t)];
      if (auto r = sys.registry().put("contended", mine); r.has_value()) {
        int none = -1;
        if (!contended_won.compare_exchange_strong(none, t)) contended_won.store(-2);  // two winners
      } else if (r.err() == errc::name_taken) {
        contended_taken.fetch_add(1);
      }
      for (int i = 0; i < 2000; ++i) {
        const int k = i % 16;
        const std::string name = std::string("n").append(std::to_string(k));
        switch ((i + t) % 3) {
          case 0: {
            // Name k is only ever put with actor k % 8, so whoever finds it knows the value.
            if (sys.registry().put(name, actors[static_cast<std::size_t>(k % 8)]).has_value()) puts.fetch_add(1);
            break;
          }
          case 1:
            if (auto r = sys.registry().get<store>(name); r.has_value()) {
              if (*r != actors[static_cast<std::size_t>(k % 8)]) wrong_value.fetch_add(1);
            }
            break;
          default:
            if (sys.registry().erase(name)) erases.fetch_add(1);
            break;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(contended_won.load() >= 0);
  CHECK(contended_taken.load() == threads_n - 1);
  auto winner = sys.registry().get<store>("contended");
  REQUIRE(winner.has_value());
  CHECK(*winner == actors[static_cast<std::size_t>(contended_won.load())]);
  CHECK(winner->ask(get{}, 5s).value() == contended_won.load());
  CHECK(wrong_value.load() == 0);
  CHECK(puts.load() > 0);
  CHECK(sys.registry().size() == static_cast<std::size_t>(puts.load() - erases.load()) + 1);
  for (int k = 0; k < 16; ++k) {
    const std::string name = std::string("n").append(std::to_string(k));
    auto r = sys.registry().get<store>(name);
    if (r.has_value()) CHECK(r->ask(get{}, 5s).value() == k % 8);
  }
}
