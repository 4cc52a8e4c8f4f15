// Interfaces: refs typed by what an actor accepts and replies, declared without the actor.
#include "courier/interface.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "courier/courier.hpp"

using namespace std::chrono_literals;
using courier::errc;

namespace {

struct add {
  int amount;
};
struct get {};
struct set_name {
  std::string name;
};
struct internal_only {};

// What a client sees: declared in the order the client likes, not the actor's.
using counter_api = courier::interface<int(get), void(add)>;
using naming_api = courier::interface<std::string(set_name)>;
using wrong_reply_api = courier::interface<std::string(get)>;
using unknown_message_api = courier::interface<void(internal_only), int(get)>;

class counter : public courier::actor<counter, internal_only, add, set_name, get> {
 public:
  void on(const internal_only&) {}
  void on(const add& a) { total_ += a.amount; }
  std::string on(const set_name& r) { return std::exchange(name_, r.name); }
  int on(const get&) { return total_; }

 private:
  int total_ = 0;
  std::string name_ = "first";
};

class other : public courier::actor<other, get> {
 public:
  int on(const get&) { return 1; }
};

/// A client that knows only the interface.
struct use {
  courier::actor_ref<counter_api> target;
};
class client : public courier::actor<client, use> {
 public:
  courier::delegated<int> on(const use& u) {
    (void)u.target.send(add{5});
    return delegate(u.target, get{});
  }
};

void run_all(courier::system& sys) {
  while (sys.run_one()) {
  }
}

}  // namespace

static_assert(courier::implements<counter, counter_api>);
static_assert(courier::implements<counter, naming_api>);
static_assert(!courier::implements<counter, wrong_reply_api>);
static_assert(!courier::implements<other, counter_api>);
static_assert(std::is_same_v<courier::reply_type_t<counter_api, get>, int>);
static_assert(std::is_same_v<courier::reply_type_t<counter_api, add>, courier::unit>);
static_assert(counter_api::accepts<add> && !counter_api::accepts<set_name>);
static_assert(std::is_convertible_v<courier::actor_ref<counter>, courier::actor_ref<counter_api>>);
// An interface ref costs one pointer more than an actor ref, an actor ref nothing more than before.
static_assert(sizeof(courier::actor_ref<counter>) == sizeof(void*));
static_assert(sizeof(courier::actor_ref<counter_api>) == 2 * sizeof(void*));

TEST_CASE("an interface ref sends, requests and asks through the actor's own indices", "[interface]") {
  courier::system sys{courier::config::deterministic()};
  courier::actor_ref<counter_api> c = sys.spawn<counter>();
  REQUIRE(c);
  REQUIRE(c.send(add{2}));
  REQUIRE(c.send(add{3}));
  int seen = -1;
  c.request(get{}).then([&](int v) { seen = v; }, [](const courier::error&) {});
  run_all(sys);
  CHECK(seen == 5);
  auto r = c.ask(get{}, 1s);
  REQUIRE(r.has_value());
  CHECK(*r == 5);

  courier::actor_ref<naming_api> n = courier::actor_ref<counter>::adopt(nullptr);
  CHECK_FALSE(n);
  CHECK(n.ask(set_name{"x"}, 1s).err() == errc::empty_reference);
}

TEST_CASE("two interface refs to one actor compare equal to each other's copies", "[interface]") {
  courier::system sys{courier::config::deterministic()};
  auto concrete = sys.spawn<counter>();
  courier::actor_ref<counter_api> a = concrete;
  courier::actor_ref<counter_api> b = a;
  CHECK(a == b);
  CHECK(a.id() == concrete.id());
  courier::actor_ref<naming_api> n = concrete;
  REQUIRE(n.ask(set_name{"second"}, 1s).has_value());
  CHECK(*n.ask(set_name{"third"}, 1s) == "second");
}

TEST_CASE("an actor that knows only the interface can delegate through it", "[interface]") {
  courier::system sys{courier::config::deterministic()};
  courier::actor_ref<counter_api> c = sys.spawn<counter>();
  auto cl = sys.spawn<client>();
  auto r = cl.ask(use{c}, 1s);
  REQUIRE(r.has_value());
  CHECK(*r == 5);
}
