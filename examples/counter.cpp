// A typed actor with request/reply: `counter` accepts `add` (one-way) and `get` (replies int).
#include <courier/courier.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

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

int main() {
  using namespace std::chrono_literals;
  courier::system sys;
  auto c = sys.spawn<counter>();
  for (int i = 1; i <= 100; ++i) c.send(add{i});

  // Blocking request from this (non-worker) thread.
  auto total = c.ask(get{}, 1s);
  if (!total) {
    std::fprintf(stderr, "ask failed: %s\n", total.err().describe().c_str());
    return 1;
  }
  std::printf("counter total after 100 adds: %d\n", *total);

  // Asynchronous request; from outside an actor the continuation runs on the host lane: on a
  // worker, but never inside the replying actor (an embedded system runs it inside poll()).
  std::atomic<int> async_total{-1};
  c.request(get{}, 1s).then([&](int v) { async_total = v; },
                            [&](const courier::error& e) { std::fprintf(stderr, "%s\n", e.describe().c_str()); });
  while (async_total.load() < 0) std::this_thread::sleep_for(1ms);
  std::printf("async request saw: %d\n", async_total.load());
  return *total == 5050 && async_total.load() == 5050 ? 0 : 1;
}
