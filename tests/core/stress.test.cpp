// Many producers on all workers (and outside them) send to many actors: every message is counted,
// nothing is lost, nothing duplicated, and each sender's messages arrive in the order sent.
#include "courier/courier.hpp"

#include <atomic>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "watchdog.hpp"

namespace {

constexpr std::size_t receivers = 16;
constexpr std::size_t actor_producers = 16;
constexpr std::size_t thread_producers = 3;
constexpr std::size_t producers = actor_producers + thread_producers;
constexpr std::uint32_t per_producer_per_receiver = 2'000;

struct item {
  std::uint32_t producer;
  std::uint32_t seq;
};
struct report {};

struct tally {
  std::uint64_t received = 0;
  std::uint64_t out_of_order = 0;  // also catches duplicates: a repeated seq is not increasing
  std::uint64_t bad_producer = 0;
};

class receiver : public courier::actor<receiver, item, report> {
 public:
  explicit receiver(std::atomic<std::uint64_t>* total) : total_(total), next_(producers, 0) {}
  void on(const item& m) {
    if (m.producer >= producers) {
      ++tally_.bad_producer;
      return;
    }
    if (m.seq != next_[m.producer]) ++tally_.out_of_order;
    next_[m.producer] = m.seq + 1;
    ++tally_.received;
    total_->fetch_add(1, std::memory_order_relaxed);
  }
  tally on(const report&) { return tally_; }

 private:
  std::atomic<std::uint64_t>* total_;
  std::vector<std::uint32_t> next_;
  tally tally_;
};

struct go {};

class producer : public courier::actor<producer, go> {
 public:
  producer(std::uint32_t id, std::vector<courier::actor_ref<receiver>> targets)
      : id_(id), targets_(std::move(targets)) {}
  void on(const go&) {
    // Interleave receivers and yield between rounds so producers on all workers overlap.
    for (std::uint32_t seq = 0; seq < per_producer_per_receiver; ++seq)
      for (auto& t : targets_) t.send(item{id_, seq});
    stop();
  }

 private:
  std::uint32_t id_;
  std::vector<courier::actor_ref<receiver>> targets_;
};

}  // namespace

TEST_CASE("many producers to many actors: nothing lost, duplicated or reordered per sender", "[stress]") {
  courier_test::watchdog wd{"stress", std::chrono::seconds(90)};
  courier::system sys;
  std::atomic<std::uint64_t> total{0};
  std::vector<courier::actor_ref<receiver>> rs;
  for (std::size_t i = 0; i < receivers; ++i) rs.push_back(sys.spawn<receiver>(&total));

  std::vector<courier::actor_ref<producer>> ps;
  for (std::uint32_t i = 0; i < actor_producers; ++i) ps.push_back(sys.spawn<producer>(i, rs));
  for (auto& p : ps) p.send(go{});

  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < thread_producers; ++t) {
    threads.emplace_back([&rs, id = static_cast<std::uint32_t>(actor_producers + t)] {
      for (std::uint32_t seq = 0; seq < per_producer_per_receiver; ++seq)
        for (auto& r : rs) (void)r.send(item{id, seq});
    });
  }
  for (auto& t : threads) t.join();

  const std::uint64_t expected = std::uint64_t{producers} * receivers * per_producer_per_receiver;
  while (total.load(std::memory_order_relaxed) < expected) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  std::uint64_t received = 0;
  for (auto& r : rs) {
    auto t = r.ask(report{}, std::chrono::seconds(30));
    REQUIRE(t);
    CHECK(t->out_of_order == 0);
    CHECK(t->bad_producer == 0);
    CHECK(t->received == std::uint64_t{producers} * per_producer_per_receiver);
    received += t->received;
  }
  CHECK(received == expected);
  CHECK(total.load() == expected);  // no duplicates arrived after the count was reached
  CHECK(sys.dead_letters() == 0);
  auto report_ = sys.shutdown(std::chrono::seconds(30));
  CHECK(report_.clean);
}
