#include "courier_workloads.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include <courier/courier.hpp>
#include <courier/net/local_context.hpp>

#include "bench_util.hpp"

namespace courier_bench::courier_side {
namespace {

using clock_type = std::chrono::steady_clock;

/// Where the last handler records the end of a run and wakes the measuring thread.
struct finish_line {
  std::atomic<std::uint32_t> done{0};
  clock_type::time_point end;

  void finish() {
    end = clock_type::now();
    done.store(1, std::memory_order_release);
    done.notify_all();
  }
  bool wait(std::chrono::seconds limit = std::chrono::seconds(120)) {
    auto deadline = clock_type::now() + limit;
    while (done.load(std::memory_order_acquire) == 0) {
      if (clock_type::now() > deadline) {
        std::fprintf(stderr, "courier-bench: WARNING: workload timed out; reporting 0\n");
        return false;
      }
      // Sleeping (not spinning) keeps the measuring thread off the workers' cores.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }
  double seconds_since(clock_type::time_point start) const {
    return std::chrono::duration<double>(end - start).count();
  }
};

// Pool chunks come from mimalloc, past the counting operator new: both are added up here.
std::uint64_t heap_events() {
  auto s = courier::pool::stats();
  return courier_bench::allocation_count() + s.chunks_allocated + s.large_allocations;
}

/// Heap bytes in use: operator new's live bytes plus every pool chunk (chunks are kept for reuse,
/// so this is also their peak).
std::uint64_t footprint(std::uint64_t operator_new_bytes) {
  return operator_new_bytes + courier::pool::stats().chunks_allocated * courier::pool::chunk_size;
}

double rate(std::size_t ops, double seconds) { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }

// W1 -------------------------------------------------------------------------------------------

class self_sender : public courier::actor<self_sender, std::uint64_t> {
 public:
  explicit self_sender(finish_line* fl) : fl_(fl) {}
  void on(std::uint64_t remaining) {
    if (remaining == 0)
      fl_->finish();
    else
      self().send(remaining - 1);
  }

 private:
  finish_line* fl_;
};

// W2 -------------------------------------------------------------------------------------------

struct ball {
  std::uint64_t remaining;
};
class pinger;
struct introduce {
  courier::actor_ref<pinger> peer;
};

class ponger : public courier::actor<ponger, introduce, ball> {
 public:
  void on(const introduce& m) { peer_ = m.peer; }
  void on(const ball& b);
  void on_stop() { peer_.reset(); }

 private:
  courier::actor_ref<pinger> peer_;
};

class pinger : public courier::actor<pinger, ball> {
 public:
  pinger(finish_line* fl, courier::actor_ref<ponger> peer) : fl_(fl), peer_(std::move(peer)) {}
  void on(const ball& b) {
    if (b.remaining == 0)
      fl_->finish();
    else
      peer_.send(ball{b.remaining - 1});
  }
  void on_stop() { peer_.reset(); }

 private:
  finish_line* fl_;
  courier::actor_ref<ponger> peer_;
};

void ponger::on(const ball& b) { peer_.send(b); }

// W3 -------------------------------------------------------------------------------------------

class counter_sink : public courier::actor<counter_sink, std::uint32_t> {
 public:
  counter_sink(finish_line* fl, std::uint64_t expected) : fl_(fl), expected_(expected) {}
  void on(std::uint32_t) {
    if (++seen_ == expected_) fl_->finish();
  }

 private:
  finish_line* fl_;
  std::uint64_t expected_;
  std::uint64_t seen_ = 0;
};

struct start_sending {
  std::uint64_t count;
};

class fan_sender : public courier::actor<fan_sender, start_sending> {
 public:
  explicit fan_sender(courier::actor_ref<counter_sink> sink) : sink_(std::move(sink)) {}
  void on(const start_sending& s) {
    for (std::uint64_t i = 0; i < s.count; ++i) sink_.send(static_cast<std::uint32_t>(i));
    stop();
  }

 private:
  courier::actor_ref<counter_sink> sink_;
};

// W4 -------------------------------------------------------------------------------------------

struct spawn_state {
  std::atomic<std::uint64_t> remaining;
  finish_line fl;
};

class one_shot : public courier::actor<one_shot, int> {
 public:
  explicit one_shot(spawn_state* st) : st_(st) {}
  void on(int) {
    if (st_->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) st_->fl.finish();
    stop();
  }

 private:
  spawn_state* st_;
};

// W5 -------------------------------------------------------------------------------------------

// W7 -------------------------------------------------------------------------------------------

struct echo_request {
  std::uint64_t n;
};
class echo : public courier::actor<echo, echo_request> {
 public:
  std::uint64_t on(const echo_request& r) { return r.n + 1; }
};

latency percentiles(std::vector<double>& samples_us) {
  latency l;
  if (samples_us.empty()) return l;
  std::sort(samples_us.begin(), samples_us.end());
  l.p50_us = samples_us[samples_us.size() / 2];
  l.p99_us = samples_us[std::min(samples_us.size() - 1, samples_us.size() * 99 / 100)];
  return l;
}

class ring_node;
struct link_to {
  courier::actor_ref<ring_node> next;
};
struct token {
  std::uint64_t hops_left;
};

class ring_node : public courier::actor<ring_node, link_to, token> {
 public:
  explicit ring_node(finish_line* fl) : fl_(fl) {}
  void on(const link_to& l) { next_ = l.next; }
  void on(const token& t) {
    if (t.hops_left == 0)
      fl_->finish();
    else
      next_.send(token{t.hops_left - 1});
  }
  void on_stop() { next_.reset(); }  // the ring is a reference cycle

 private:
  finish_line* fl_;
  courier::actor_ref<ring_node> next_;
};

// W8 and W9: one request at a time, the next sent from the reply's continuation -------------------

struct chain_start {
  std::uint64_t count;
};

/// Calls `Call` `count` times in a chain: `Call::next(remaining, on_reply, on_error)` makes one
/// call whose continuation calls on_reply (or on_error), which makes the next.
template <class Call>
class chain_client : public courier::actor<chain_client<Call>, chain_start> {
 public:
  chain_client(finish_line* fl, Call call) : fl_(fl), call_(std::move(call)) {}
  void on(const chain_start& s) {
    remaining_ = s.count;
    next();
  }
  void on_stop() { call_ = Call{}; }  // lets the callee go with the client
  std::uint64_t failures = 0;

 private:
  void next() {
    if (remaining_ == 0) {
      fl_->finish();
      return;
    }
    --remaining_;
    call_.next(
        remaining_,
        [this](bool answered) {
          if (!answered) ++failures;
          next();
        },
        [this] { ++failures; });
  }
  finish_line* fl_;
  Call call_;
  std::uint64_t remaining_ = 0;
};

/// A chain of `n` calls by a fresh client, after a shorter one that warms the pool's size classes
/// (requests, replies, pending records): calls per second and heap events per call.
template <class Call>
result run_chain(courier::system& sys, std::size_t n, const Call& call) {
  {
    finish_line warm;
    auto client = sys.spawn<chain_client<Call>>(&warm, call);
    client.send(chain_start{std::min<std::uint64_t>(n / 10 + 1, 10'000)});
    if (!warm.wait()) return {};
  }
  finish_line fl;
  auto client = sys.spawn<chain_client<Call>>(&fl, call);
  auto events = heap_events();
  auto t0 = clock_type::now();
  client.send(chain_start{n});
  if (!fl.wait()) return {};
  result r;
  r.ops_per_s = rate(n, fl.seconds_since(t0));
  r.allocations_per_op = static_cast<double>(heap_events() - events) / static_cast<double>(n);
  return r;
}

// W8: an actor's request to a typed actor.
struct w8_value {
  std::uint64_t n;
};

class w8_server : public courier::actor<w8_server, w8_value> {
 public:
  std::uint64_t on(const w8_value& v) { return v.n + 1; }
};

struct w8_call {
  courier::actor_ref<w8_server> server;
  courier::timespan timeout = courier::infinite;
  template <class Reply, class Fail>
  void next(std::uint64_t i, Reply on_reply, Fail on_error) {
    server.request(w8_value{i}, timeout)
        .then([on_reply](std::uint64_t) { on_reply(true); }, [on_error](const courier::error&) { on_error(); });
  }
};

// W9: the same chain calling by token, ADD_ through a context_ref, its reply's items read in place.
struct w9_call {
  courier::net::context_ref ctx;
  template <class Reply, class Fail>
  void next(std::uint64_t i, Reply on_reply, Fail on_error) {
    ctx.call(courier::token("ADD_"), courier::net::args(i, std::uint64_t{1}))
        .then(
            [on_reply](const courier::wire::items_ref& reply) {
              auto items = reply.items();
              on_reply(static_cast<bool>(items.read<std::uint64_t>()));
            },
            [on_error](const courier::error&) { on_error(); });
  }
};

}  // namespace

result w8_request(std::size_t n, bool with_timeout) {
  courier::system sys;
  const auto timeout = with_timeout ? courier::timespan(std::chrono::seconds(1)) : courier::infinite;
  return run_chain(sys, n, w8_call{sys.spawn<w8_server>(), timeout});
}

result w9_local_context(std::size_t n) {
  courier::system sys;
  auto services = std::make_shared<courier::net::service_table>();
  services->add(courier::token("ADD_"), [](courier::net::incoming& call) {
    auto a = call.read<std::uint64_t>();
    auto b = call.read<std::uint64_t>();
    if (a && b) call.reply().add(*a + *b);
  });
  return run_chain(sys, n, w9_call{courier::net::serve_locally(sys, services)});
}

result w1_self_send(std::size_t n) {
  courier::system sys;
  finish_line fl;
  auto a = sys.spawn<self_sender>(&fl);
  auto events = heap_events();
  auto t0 = clock_type::now();
  a.send(std::uint64_t{n});
  if (!fl.wait()) return {};
  result r;
  r.ops_per_s = rate(n, fl.seconds_since(t0));
  r.allocations_per_op = static_cast<double>(heap_events() - events) / static_cast<double>(n);
  return r;
}

result w2_ping_pong(std::size_t n) {
  courier::system sys;
  finish_line fl;
  auto pong = sys.spawn<ponger>();
  auto ping = sys.spawn<pinger>(&fl, pong);
  pong.send(introduce{ping});
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto events = heap_events();
  auto t0 = clock_type::now();
  pong.send(ball{n});  // pinger counts one per round trip
  if (!fl.wait()) return {};
  result r;
  r.ops_per_s = rate(n, fl.seconds_since(t0));
  r.allocations_per_op = static_cast<double>(heap_events() - events) / static_cast<double>(n);
  return r;
}

result w3_fan_in(std::size_t per_sender, std::size_t senders) {
  courier::system sys;
  finish_line fl;
  const std::uint64_t total = per_sender * senders;
  auto sink = sys.spawn<counter_sink>(&fl, total);
  std::vector<courier::actor_ref<fan_sender>> ss;
  for (std::size_t i = 0; i < senders; ++i) ss.push_back(sys.spawn<fan_sender>(sink));
  auto events = heap_events();
  auto t0 = clock_type::now();
  for (auto& s : ss) s.send(start_sending{per_sender});
  if (!fl.wait()) return {};
  result r;
  r.ops_per_s = rate(total, fl.seconds_since(t0));
  r.allocations_per_op = static_cast<double>(heap_events() - events) / static_cast<double>(total);
  return r;
}

result w4_spawn(std::size_t n) {
  courier::system sys;
  spawn_state st;
  st.remaining.store(n);
  std::vector<courier::actor_ref<one_shot>> actors;
  actors.reserve(n);  // allocated before the baseline is taken
  auto base = footprint(courier_bench::live_bytes());
  courier_bench::reset_peak();
  auto events = heap_events();
  auto t0 = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) actors.push_back(sys.spawn<one_shot>(&st));
  auto idle = footprint(courier_bench::live_bytes());
  for (auto& a : actors) {
    a.send(1);
    a.reset();  // drop our reference so the actor is freed once it stops
  }
  if (!st.fl.wait()) return {};
  auto peak = footprint(courier_bench::peak_live_bytes());
  result r;
  r.ops_per_s = rate(n, st.fl.seconds_since(t0));
  r.bytes_per_actor = peak > base ? static_cast<double>(peak - base) / static_cast<double>(n) : 0.0;
  r.bytes_per_idle_actor = idle > base ? static_cast<double>(idle - base) / static_cast<double>(n) : 0.0;
  r.allocations_per_op = static_cast<double>(heap_events() - events) / static_cast<double>(n);
  r.actor_slot_bytes = courier::pool::detail::class_sizes[courier::pool::detail::class_of(sizeof(one_shot), 64)];
  return r;
}

result w5_ring(std::size_t count, std::size_t hops) {
  courier::system sys;
  finish_line fl;
  std::vector<courier::actor_ref<ring_node>> ring;
  ring.reserve(count);
  for (std::size_t i = 0; i < count; ++i) ring.push_back(sys.spawn<ring_node>(&fl));
  for (std::size_t i = 0; i < count; ++i) ring[i].send(link_to{ring[(i + 1) % count]});
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto events = heap_events();
  auto t0 = clock_type::now();
  ring[0].send(token{hops});
  if (!fl.wait()) return {};
  result r;
  r.ops_per_s = rate(hops, fl.seconds_since(t0));
  r.allocations_per_op = static_cast<double>(heap_events() - events) / static_cast<double>(hops);
  return r;
}

latency w7_ask_latency(std::size_t n) {
  courier::system sys;
  auto a = sys.spawn<echo>();
  std::vector<double> samples;
  samples.reserve(n);
  // A few asks first: thread heaps, the injection queue's producer for this thread.
  for (std::uint64_t i = 0; i < 100; ++i) (void)a.ask(echo_request{i}, std::chrono::seconds(10));
  for (std::uint64_t i = 0; i < n; ++i) {
    auto t0 = clock_type::now();
    auto r = a.ask(echo_request{i}, std::chrono::seconds(10));
    auto t1 = clock_type::now();
    if (!r || *r != i + 1) {
      std::fprintf(stderr, "courier-bench: W7 ask failed\n");
      return {};
    }
    samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return percentiles(samples);
}

latency futex_ping_pong_latency(std::size_t n) {
  // 0: idle, 1: ping (the other thread's turn), 2: pong (the timing thread's turn), 3: quit.
  alignas(64) std::atomic<std::uint32_t> word{0};
  std::thread other([&] {
    for (;;) {
      std::uint32_t v = word.load(std::memory_order_acquire);
      if (v == 3) return;
      if (v != 1) {
        courier::detail::futex_wait(&word, v);
        continue;
      }
      word.store(2, std::memory_order_release);
      courier::detail::futex_wake_one(&word);
    }
  });
  std::vector<double> samples;
  samples.reserve(n);
  for (std::size_t i = 0; i < n + 100; ++i) {
    auto t0 = clock_type::now();
    word.store(1, std::memory_order_release);
    courier::detail::futex_wake_one(&word);
    while (word.load(std::memory_order_acquire) != 2) courier::detail::futex_wait(&word, 1);
    auto t1 = clock_type::now();
    if (i >= 100) samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  word.store(3, std::memory_order_release);
  courier::detail::futex_wake_one(&word);
  other.join();
  return percentiles(samples);
}

double mailbox_push_pop_ns(std::size_t n) {
  courier::detail::mailbox box;
  struct item {
    std::uint64_t value;
  };
  std::uint64_t sum = 0;
  // Warm the pool so the loop measures steady state.
  courier::pool::destroy(courier::detail::make_message<item>(0, nullptr, item{0}));
  auto t0 = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) {
    (void)box.push(courier::detail::make_message<item>(0, nullptr, item{i}));
    auto* m = static_cast<courier::detail::message_slot<item>*>(box.pop());
    sum += m->value.value;
    courier::pool::destroy(m);
  }
  auto t1 = clock_type::now();
  if (sum == 42) std::puts("");  // keeps the loop from being optimised away
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}

}  // namespace courier_bench::courier_side
