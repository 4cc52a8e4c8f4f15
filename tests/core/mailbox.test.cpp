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
  h.box.push(msgs[4].get());            // stack: 4, 5
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

TEST_CASE("mailbox: an urgent message overtakes everything queued, even mid-batch", "[mailbox][urgent]") {
  box_holder h;
  test_msg a(0, 1), b(0, 2), c(0, 3), l(0, 4), u1(1, 100), u2(1, 101), d(0, 5);
  REQUIRE(h.box.push(&a) == push_result::woke_reader);
  REQUIRE(h.box.push(&b) == push_result::queued);
  CHECK(h.box.pop() == &a);  // the batch now holds b
  REQUIRE(h.box.push(&c) == push_result::queued);
  h.box.push_local(&l);
  // The consumer is running (head not idle): urgent pushes do not ask for a schedule.
  CHECK(h.box.push_urgent(&u1) == push_result::queued);
  CHECK(h.box.push_urgent(&u2) == push_result::queued);
  CHECK(h.box.pop() == &u1);  // before b (already taken), c (on the stack) and l (local)
  CHECK(h.box.push(&d) == push_result::queued);
  CHECK(h.box.pop() == &u2);  // urgent messages keep their order among themselves
  CHECK(h.box.pop() == &b);
  CHECK(h.box.pop() == &c);
  CHECK(h.box.pop() == &d);
  CHECK(h.box.pop() == &l);
  CHECK(h.box.pop() == nullptr);
}

TEST_CASE("mailbox: an urgent push wakes an idle consumer exactly once and blocks try_block", "[mailbox][urgent]") {
  box_holder h;
  test_msg u1(1, 1), u2(1, 2), n(0, 3);
  CHECK(h.box.push_urgent(&u1) == push_result::woke_reader);  // mailboxes start idle
  CHECK(h.box.push_urgent(&u2) == push_result::queued);
  CHECK(h.box.push(&n) == push_result::queued);  // already woken by the urgent push
  CHECK_FALSE(h.box.try_block());
  CHECK(h.box.pop() == &u1);
  CHECK_FALSE(h.box.try_block());  // u2 is waiting in the urgent batch
  CHECK(h.box.pop() == &u2);
  CHECK(h.box.pop() == &n);
  CHECK(h.box.pop() == nullptr);
  CHECK(h.box.try_block());
  test_msg u3(1, 4);
  CHECK(h.box.push_urgent(&u3) == push_result::woke_reader);
  CHECK(h.box.pop() == &u3);
}

TEST_CASE("mailbox: close hands back urgent messages first, then refuses both lanes", "[mailbox][urgent]") {
  box_holder h;
  test_msg a(0, 1), b(0, 2), u(1, 0), late(0, 9), late_urgent(1, 9);
  h.box.push(&a);
  h.box.push(&b);
  h.box.push_urgent(&u);
  CHECK(collect(h.box.close()) == std::vector<int>{0, 1, 2});
  CHECK(h.box.push(&late) == push_result::closed);
  CHECK(h.box.try_push(&late) == push_result::closed);
  CHECK(h.box.push_urgent(&late_urgent) == push_result::closed);
}

TEST_CASE("mailbox: a bounded mailbox refuses try_push at capacity, never push or push_urgent", "[mailbox][bounded]") {
  box_holder h;
  h.box.set_capacity(2);
  CHECK(h.box.capacity() == 2);
  test_msg a(0, 1), b(0, 2), c(0, 3), forced(0, 4), u(1, 5), l(0, 6), l2(0, 7);
  CHECK(h.box.try_push(&a) == push_result::woke_reader);
  CHECK(h.box.try_push(&b) == push_result::queued);
  CHECK(h.box.queued() == 2);
  CHECK(h.box.try_push(&c) == push_result::full);  // c stays the caller's
  CHECK(h.box.queued() == 2);
  CHECK(h.box.push(&forced) == push_result::queued);    // a graceful stop is never refused
  CHECK(h.box.push_urgent(&u) == push_result::queued);  // nor is the urgent lane
  CHECK(h.box.queued() == 3);                           // urgent messages are not counted

  CHECK(h.box.pop() == &u);
  CHECK(h.box.pop() == &a);
  // The consumer gives its pops back once per batch: still "full" while it works on this one.
  CHECK(h.box.push_local(&l) == push_result::full);
  CHECK(h.box.pop() == &b);
  CHECK(h.box.pop() == &forced);
  CHECK(h.box.pop() == nullptr);  // taking the next (empty) batch gives the pops back
  CHECK(h.box.queued() == 0);
  CHECK(h.box.push_local(&l) == push_result::queued);
  CHECK(h.box.try_push(&c) == push_result::queued);
  CHECK(h.box.queued() == 2);
  CHECK(h.box.try_push(&l2) == push_result::full);
  CHECK(h.box.pop() == &c);
  CHECK(h.box.pop() == &l);
  CHECK(h.box.pop() == nullptr);
  CHECK(h.box.try_block());
  CHECK(h.box.queued() == 0);
}

TEST_CASE("mailbox: a refusing bounded mailbox refuses try_push and push_local below capacity, not push or push_urgent",
          "[mailbox][bounded]") {
  box_holder h;
  h.box.set_capacity(4);
  test_msg a(0, 1), b(0, 2), c(0, 3), forced(0, 4), u(1, 5), l(0, 6);
  CHECK(h.box.try_push(&a) == push_result::woke_reader);
  CHECK_FALSE(h.box.refusing());
  h.box.set_refusing(true);
  CHECK(h.box.refusing());
  CHECK(h.box.queued() == 1);                      // the state is not counted as messages
  CHECK(h.box.try_push(&b) == push_result::full);  // one of four: refused all the same
  CHECK(h.box.push_local(&l) == push_result::full);
  CHECK(h.box.queued() == 1);
  CHECK(h.box.push(&forced) == push_result::queued);  // a graceful stop is never refused
  CHECK(h.box.push_urgent(&u) == push_result::queued);
  CHECK(h.box.queued() == 2);
  h.box.set_refusing(true);  // idempotent
  CHECK(h.box.pop() == &u);
  CHECK(h.box.pop() == &a);
  CHECK(h.box.pop() == &forced);
  CHECK(h.box.pop() == nullptr);  // gives the pops back; still refusing
  CHECK(h.box.queued() == 0);
  CHECK(h.box.refusing());
  CHECK(h.box.try_push(&b) == push_result::full);
  h.box.set_refusing(false);
  CHECK_FALSE(h.box.refusing());
  CHECK(h.box.try_push(&b) == push_result::queued);
  CHECK(h.box.push_local(&l) == push_result::queued);
  CHECK(h.box.queued() == 2);
  CHECK(h.box.pop() == &b);
  CHECK(h.box.pop() == &l);
  h.box.set_refusing(true);
  CHECK(h.box.pop() == nullptr);
  CHECK(h.box.try_block());
  CHECK(h.box.close() == nullptr);  // closing clears it: later pushes are refused as closed
  CHECK_FALSE(h.box.refusing());
  CHECK(h.box.try_push(&c) == push_result::closed);
}

TEST_CASE("mailbox: an unbounded mailbox cannot refuse: set_refusing does nothing", "[mailbox][bounded]") {
  box_holder h;
  h.box.set_refusing(true);
  CHECK_FALSE(h.box.refusing());
  test_msg a(0, 1);
  CHECK(h.box.try_push(&a) == push_result::woke_reader);
  CHECK(h.box.queued() == 0);
  CHECK(h.box.pop() == &a);
}

TEST_CASE("mailbox: unbounded mailboxes never refuse and keep no count", "[mailbox][bounded]") {
  box_holder h;
  CHECK(h.box.capacity() == 0);
  std::vector<test_msg> msgs(1000);
  for (auto& m : msgs) CHECK(h.box.try_push(&m) != push_result::full);
  CHECK(h.box.queued() == 0);
  int n = 0;
  while (h.box.pop() != nullptr) ++n;
  CHECK(n == 1000);
}

TEST_CASE("mailbox: urgent and normal producers racing an idling consumer: no lost wake-up, no loss",
          "[mailbox][urgent][concurrent]") {
  courier_test::watchdog wd("mailbox urgent race", std::chrono::seconds(30));
  constexpr int producers = 4;  // even ones push normal messages, odd ones urgent
  constexpr int per_producer = 5000;
  box_holder h;
  h.box.set_capacity(1u << 30);  // counted, never full: exercises the counter under contention
  std::vector<std::vector<test_msg>> storage(producers);
  for (int p = 0; p < producers; ++p)
    for (int s = 0; s < per_producer; ++s) storage[p].emplace_back(p, s);

  std::counting_semaphore<1 << 20> wakes(0);
  std::atomic<int> woke_count{0};
  std::atomic<bool> start{false};
  std::vector<int> next_seq(producers, 0);
  int received = 0, order_errors = 0, idle_periods = 0;
  bool stalled = false;

  std::thread consumer([&] {
    while (received < producers * per_producer) {
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
        push_result r = p % 2 == 0 ? h.box.try_push(&storage[p][s]) : h.box.push_urgent(&storage[p][s]);
        if (r == push_result::woke_reader) {
          woke_count.fetch_add(1, std::memory_order_relaxed);
          wakes.release();
        }
        if (s % 32 == 0) std::this_thread::yield();
      }
    });
  start.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  consumer.join();

  CHECK_FALSE(stalled);
  CHECK(received == producers * per_producer);
  CHECK(order_errors == 0);  // per producer, each lane keeps its order
  CHECK(woke_count.load() == idle_periods);
  CHECK_FALSE(wakes.try_acquire());
  CHECK(h.box.queued() == 0);
}
