#include "courier/detail/mailbox.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <semaphore>
#include <thread>
#include <vector>

#include "watchdog.hpp"

using courier::detail::mailbox;
using courier::detail::message_header;
using courier::detail::push_result;

namespace {

struct alignas(16) test_msg : message_header {
  int producer = 0;
  int seq = 0;
  explicit test_msg(int p = 0, int s = 0) : message_header{nullptr, nullptr, 0}, producer(p), seq(s) {}
};

int seq_of(message_header* m) { return static_cast<test_msg*>(m)->seq; }

std::vector<int> collect(message_header* list) {
  std::vector<int> out;
  for (; list != nullptr; list = list->next) out.push_back(seq_of(list));
  return out;
}

// The mailbox expects to start a 64-byte aligned owner; keep that here too.
struct alignas(64) box_holder {
  mailbox<> box;
};

}  // namespace

TEST_CASE("mailbox: the first push wakes the reader, later ones queue; pop is FIFO", "[mailbox]") {
  box_holder h;
  test_msg m[5] = {test_msg(0, 0), test_msg(0, 1), test_msg(0, 2), test_msg(0, 3), test_msg(0, 4)};
  CHECK(h.box.pop() == nullptr);
  CHECK(h.box.push(&m[0]) == push_result::woke_reader);
  CHECK(h.box.push(&m[1]) == push_result::queued);
  CHECK(h.box.push(&m[2]) == push_result::queued);
  CHECK(h.box.pop() == &m[0]);
  // Pushed while a batch is being served: comes after the batch.
  CHECK(h.box.push(&m[3]) == push_result::queued);
  CHECK(h.box.pop() == &m[1]);
  CHECK(h.box.push(&m[4]) == push_result::queued);
  CHECK(h.box.pop() == &m[2]);
  CHECK(h.box.pop() == &m[3]);
  CHECK(h.box.pop() == &m[4]);
  CHECK(h.box.pop() == nullptr);
  CHECK_FALSE(h.box.closed());
}

TEST_CASE("mailbox: try_block goes idle only when nothing is waiting", "[mailbox]") {
  box_holder h;
  test_msg a(0, 1), b(0, 2), c(0, 3);
  REQUIRE(h.box.push(&a) == push_result::woke_reader);

  // A message on the shared word: cannot block.
  CHECK_FALSE(h.box.try_block());
  CHECK(h.box.push(&b) == push_result::queued);
  CHECK(h.box.pop() == &a);
  // A message left in the taken batch: cannot block.
  CHECK_FALSE(h.box.try_block());
  CHECK(h.box.pop() == &b);
  CHECK(h.box.pop() == nullptr);
  // Empty: blocks, and the next push must wake the reader again.
  CHECK(h.box.try_block());
  CHECK(h.box.push(&c) == push_result::woke_reader);
  CHECK(h.box.pop() == &c);
  CHECK(h.box.pop() == nullptr);

  // A local message waiting: cannot block.
  test_msg l(0, 9);
  h.box.push_local(&l);
  CHECK_FALSE(h.box.try_block());
  CHECK(h.box.pop() == &l);
  CHECK(h.box.try_block());
}

TEST_CASE("mailbox: push_local is served after what was taken from producers", "[mailbox]") {
  box_holder h;
  test_msg s1(0, 1), s2(0, 2), l1(0, 10), l2(0, 11), s3(0, 3);
  REQUIRE(h.box.push(&s1) == push_result::woke_reader);
  REQUIRE(h.box.push(&s2) == push_result::queued);
  CHECK(h.box.pop() == &s1);  // batch now holds s2
  h.box.push_local(&l1);
  h.box.push_local(&l2);
  CHECK(h.box.push(&s3) == push_result::queued);
  // The batch first, then the shared stack taken together with the local list (shared first).
  CHECK(h.box.pop() == &s2);
  CHECK(h.box.pop() == &s3);
  CHECK(h.box.pop() == &l1);
  CHECK(h.box.pop() == &l2);
  CHECK(h.box.pop() == nullptr);

  // Local messages alone, no shared traffic.
  test_msg l3(0, 12), l4(0, 13);
  h.box.push_local(&l3);
  h.box.push_local(&l4);
  CHECK(h.box.pop() == &l3);
  CHECK(h.box.pop() == &l4);
  CHECK(h.box.pop() == nullptr);
}

TEST_CASE("mailbox: close hands back batch, stack and local messages in order, then refuses", "[mailbox]") {
  box_holder h;
  std::vector<std::unique_ptr<test_msg>> msgs;
  for (int i = 0; i < 9; ++i) msgs.push_back(std::make_unique<test_msg>(0, i));
  REQUIRE(h.box.push(msgs[0].get()) == push_result::woke_reader);
  h.box.push(msgs[1].get());
  h.box.push(msgs[2].get());
  h.box.push(msgs[3].get());
  CHECK(h.box.pop() == msgs[0].get());  // batch: 1, 2, 3
  h.box.push(msgs[4].get());             // stack: 4, 5
  h.box.push(msgs[5].get());
  h.box.push_local(msgs[6].get());  // local: 6, 7
  h.box.push_local(msgs[7].get());

  message_header* rest = h.box.close();
  CHECK(collect(rest) == std::vector<int>{1, 2, 3, 4, 5, 6, 7});
  CHECK(h.box.closed());
  CHECK(h.box.push(msgs[8].get()) == push_result::closed);
  CHECK(h.box.push(msgs[8].get()) == push_result::closed);
  CHECK_FALSE(h.box.try_block());
}

TEST_CASE("mailbox: closing an idle or empty mailbox returns nothing", "[mailbox]") {
  box_holder idle;
  CHECK(idle.box.close() == nullptr);
  CHECK(idle.box.closed());

  box_holder drained;
  test_msg a(0, 1);
  drained.box.push(&a);
  CHECK(drained.box.pop() == &a);
  CHECK(drained.box.pop() == nullptr);
  CHECK(drained.box.close() == nullptr);
  CHECK(drained.box.closed());
}

TEST_CASE("mailbox: many producers, one consumer: nothing lost, per-producer FIFO, one wake per idle period",
          "[mailbox][concurrent]") {
  courier_test::watchdog wd("mailbox many producers", std::chrono::seconds(30));
  constexpr int producers = 4;
  constexpr int per_producer = 5000;
  box_holder h;
  std::vector<std::vector<test_msg>> storage(producers);
  for (int p = 0; p < producers; ++p)
    for (int s = 0; s < per_producer; ++s) storage[p].emplace_back(p, s);

  std::counting_semaphore<1 << 20> wakes(0);
  std::atomic<int> woke_count{0};
  std::atomic<bool> start{false};

  std::vector<int> next_seq(producers, 0);
  int received = 0;
  int order_errors = 0;
  int idle_periods = 0;
  bool stalled = false;

  std::thread consumer([&] {
    while (received < producers * per_producer) {
      // Idle: wait for a producer that saw woke_reader.
      if (!wakes.try_acquire_for(std::chrono::seconds(10))) {
        stalled = true;
        return;
      }
      ++idle_periods;
      for (;;) {
        message_header* m = h.box.pop();
        if (m == nullptr) {
          if (h.box.try_block()) break;
          continue;
        }
        auto* t = static_cast<test_msg*>(m);
        if (t->seq != next_seq[t->producer]) ++order_errors;
        next_seq[t->producer] = t->seq + 1;
        ++received;
      }
    }
  });

  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p)
    threads.emplace_back([&, p] {
      while (!start.load(std::memory_order_acquire)) std::this_thread::yield();
      for (int s = 0; s < per_producer; ++s) {
        push_result r = h.box.push(&storage[p][s]);
        if (r == push_result::woke_reader) {
          woke_count.fetch_add(1, std::memory_order_relaxed);
          wakes.release();
        }
        if (s % 64 == 0) std::this_thread::yield();  // let the consumer go idle now and then
      }
    });
  start.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  consumer.join();

  CHECK_FALSE(stalled);
  CHECK(received == producers * per_producer);
  CHECK(order_errors == 0);
  // Every wake matched an idle period the consumer actually had, and none is left over.
  CHECK(woke_count.load() == idle_periods);
  CHECK_FALSE(wakes.try_acquire());
  // The consumer went idle at the end: the next push must wake it.
  test_msg last(0, 0);
  CHECK(h.box.push(&last) == push_result::woke_reader);
}

TEST_CASE("mailbox: close racing with producers: every message is either refused or handed back",
          "[mailbox][concurrent]") {
  courier_test::watchdog wd("mailbox close race", std::chrono::seconds(30));
  constexpr int producers = 3;
  constexpr int per_producer = 3000;
  box_holder h;
  std::vector<std::vector<test_msg>> storage(producers);
  for (int p = 0; p < producers; ++p)
    for (int s = 0; s < per_producer; ++s) storage[p].emplace_back(p, s);
  std::atomic<int> accepted{0}, refused{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p)
    threads.emplace_back([&, p] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (int s = 0; s < per_producer; ++s) {
        if (h.box.push(&storage[p][s]) == push_result::closed)
          refused.fetch_add(1, std::memory_order_relaxed);
        else
          accepted.fetch_add(1, std::memory_order_relaxed);
      }
    });
  go.store(true, std::memory_order_release);
  int consumed = 0;
  for (int i = 0; i < 200; ++i)
    while (h.box.pop() != nullptr) ++consumed;
  message_header* rest = h.box.close();
  int handed_back = 0;
  std::vector<int> last(producers, -1);
  bool ordered = true;
  for (; rest != nullptr; rest = rest->next) {
    auto* t = static_cast<test_msg*>(rest);
    if (t->seq <= last[t->producer]) ordered = false;
    last[t->producer] = t->seq;
    ++handed_back;
  }
  for (auto& t : threads) t.join();
  CHECK(ordered);
  CHECK(consumed + handed_back == accepted.load());
  CHECK(accepted.load() + refused.load() == producers * per_producer);
}
