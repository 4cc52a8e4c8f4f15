// The umbrella header on its own is enough for the README's example, which this test runs.
#include "courier/courier.hpp"

#include <atomic>
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "watchdog.hpp"

namespace {

struct add {
  int amount;
};
struct get {};

class counter : public courier::actor<counter, add, get> {
 public:
  void on(const add& m) { total_ += m.amount; }
  int on(const get&) { return total_; }

 private:
  int total_ = 0;
};

}  // namespace

TEST_CASE("the README example works as written", "[courier][concurrent]") {
  courier_test::watchdog wd{"README example", std::chrono::seconds(20)};
  courier::system sys;
  auto c = sys.spawn<counter>();
  CHECK(c.send(add{2}));
  auto total = c.ask(get{}, std::chrono::seconds(1));
  REQUIRE(total);
  CHECK(*total == 2);

  std::atomic<int> seen{-1};
  c.request(get{}, std::chrono::milliseconds(500))
      .then([&](int v) { seen = v; }, [&](const courier::error&) { seen = -2; });
  CHECK(courier_test::eventually([&] { return seen.load() != -1; }, std::chrono::seconds(10)));
  CHECK(seen.load() == 2);
}
