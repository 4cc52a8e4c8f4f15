// Zero heap allocations per remote call in steady state, on both sides of a real socket: a server
// system and a client system in this process, each with its node, talking over a Unix socket and
// over TCP loopback. The counting global allocator (tests/support) sees every operator new in the
// process (both systems, their workers, both reactor threads); pool chunks and large slots, which
// the pool takes from its own hook, are counted from the pool's statistics (as in
// tests/core/allocation.test.cpp). The messages are ints, and one string_ref (zero-copy receive: the
// served actor views the connection's receive block); a std::string in a decoded message allocates
// by design.
//
// Set COURIER_ALLOC_TRACE=1 to print a backtrace for each allocation in a measured phase.
#include "courier/net/local_context.hpp"
#include "courier/net/node.hpp"
#include "courier/net/services.hpp"

#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "counting_allocator.hpp"
#include "courier/actor.hpp"
#include "courier/system.hpp"
#include "net_test_util.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;

namespace {

struct add {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0, b = 0;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};
struct bump {  // one-way
  static constexpr courier::token token{"BUMP"};
  std::int32_t by = 0;
  auto fields() { return std::tie(by); }
  auto fields() const { return std::tie(by); }
};
struct total {
  static constexpr courier::token token{"TOTL"};
  auto fields() { return std::tie(); }
  auto fields() const { return std::tie(); }
};

struct label {  // a string_ref field: decoded as a view into the server's receive block, not a copy
  static constexpr courier::token token{"LABL"};
  courier::wire::string_ref text;
  auto fields() { return std::tie(text); }
  auto fields() const { return std::tie(text); }
};

using api = courier::interface<std::int32_t(add), void(bump), std::int64_t(total), std::int32_t(label)>;

class service : public courier::actor<service, add, bump, total, label> {
 public:
  explicit service(std::atomic<std::uint64_t>* bumps) : bumps_(bumps) {}
  std::int32_t on(const add& m) { return m.a + m.b; }
  void on(const bump& m) {
    total_ += m.by;
    bumps_->fetch_add(1, std::memory_order_release);
  }
  std::int64_t on(const total&) { return total_; }
  std::int32_t on(const label& m) {
    return m.text.owner() && m.text.owner()->holds(m.text.data()) ? static_cast<std::int32_t>(m.text.size()) : -1;
  }

 private:
  std::atomic<std::uint64_t>* bumps_;
  std::int64_t total_ = 0;
};

/// Heap events anywhere in the process: operator new calls plus the pool's chunks and large slots.
std::uint64_t heap_events() {
  auto s = courier::pool::stats();
  return counting_allocator::allocation_count() + s.chunks_allocated + s.large_allocations;
}

void print_backtrace(std::size_t bytes) noexcept {
  void* frames[48];
  const int n = ::backtrace(frames, 48);
  char line[64];
  const int len = std::snprintf(line, sizeof line, "--- operator new(%zu)\n", bytes);
  if (len > 0) (void)!::write(2, line, static_cast<std::size_t>(len));
  ::backtrace_symbols_fd(frames, n, 2);
}

/// Counts heap events over a measured phase (and, with COURIER_ALLOC_TRACE set, prints where each
/// one comes from).
class measured {
 public:
  measured() : before_(heap_events()), new_before_(counting_allocator::allocation_count()) {
    if (std::getenv("COURIER_ALLOC_TRACE") != nullptr) {
      void* warm[2];
      (void)::backtrace(warm, 2);  // loads the unwinder before the trap is set
      counting_allocator::set_trap(&print_backtrace);
    }
  }
  ~measured() { counting_allocator::set_trap(nullptr); }
  std::uint64_t events() {
    counting_allocator::set_trap(nullptr);
    new_after_ = counting_allocator::allocation_count();
    pool_after_ = courier::pool::stats();
    return new_after_ + pool_after_.chunks_allocated + pool_after_.large_allocations - before_;
  }
  // Each split by source, as they stood when events() was read.
  std::uint64_t operator_new_calls() const { return new_after_ - new_before_; }
  std::uint64_t pool_chunks() const { return pool_after_.chunks_allocated - pool_before_.chunks_allocated; }
  std::uint64_t large_slots() const { return pool_after_.large_allocations - pool_before_.large_allocations; }

 private:
  std::uint64_t before_;
  std::uint64_t new_before_;
  courier::pool::statistics pool_before_ = courier::pool::stats();
  std::uint64_t new_after_ = 0;
  courier::pool::statistics pool_after_{};
};

/// Makes `rounds` calls through request().then, `width` of them in flight at a time, each chain
/// continuing in its reply handler (the path of an actor that calls a remote service).
struct start_calls {
  std::uint64_t rounds;
  std::uint32_t width = 1;
};

class caller : public courier::actor<caller, start_calls> {
 public:
  caller(courier::actor_ref<api> peer, std::atomic<std::uint64_t>* done, std::atomic<std::uint64_t>* failures)
      : peer_(std::move(peer)), done_(done), failures_(failures) {}
  void on(const start_calls& s) {
    remaining_ = s.rounds;
    chains_ = s.width;
    for (std::uint32_t i = 0; i < s.width; ++i) next();
  }
  void on_stop() { peer_.reset(); }

 private:
  void next() {
    if (remaining_ == 0) {
      if (--chains_ == 0) done_->fetch_add(1, std::memory_order_release);
      return;
    }
    --remaining_;
    const auto n = static_cast<std::int32_t>(remaining_ & 0xffff);
    peer_.request(add{n, 1}, courier::timespan(30s))
        .then(
            [this, n](std::int32_t v) {
              if (v != n + 1) failures_->fetch_add(1);
              next();
            },
            [this](const courier::error&) {
              failures_->fetch_add(1);
              next();
            });
  }
  courier::actor_ref<api> peer_;
  std::atomic<std::uint64_t>* done_;
  std::atomic<std::uint64_t>* failures_;
  std::uint64_t remaining_ = 0;
  std::uint32_t chains_ = 0;
};

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t scale = 5;  // sanitized builds run a fifth of the calls, for time
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr std::uint64_t scale = 5;
#else
constexpr std::uint64_t scale = 1;
#endif
#else
constexpr std::uint64_t scale = 1;
#endif

/// After a warm-up: long enough for the engine clock's first ticks (each system's timer thread
/// takes its first pool chunk then) and a first keepalive ping, so the measured phase starts in
/// steady state however fast the warm-up ran.
void settle() { std::this_thread::sleep_for(250ms); }

void wait_for(const std::atomic<std::uint64_t>& counter, std::uint64_t value) {
  while (counter.load(std::memory_order_acquire) < value) std::this_thread::sleep_for(50us);
}

courier::net::endpoint uds_endpoint() {
  courier::net::endpoint e;
  e.kind = courier::net::transport_kind::uds;
  e.file = courier_test::temp_socket_path("alloc");
  return e;
}

courier::net::endpoint tcp_endpoint() {
  courier::net::endpoint e;
  e.kind = courier::net::transport_kind::tcp;
  e.host = "127.0.0.1";
  e.port = 0;
  return e;
}

/// A served `service` and a connected client, in two systems of this process.
struct pair {
  std::atomic<std::uint64_t> bumps{0};
  courier::system server_sys;
  courier::net::node server_net{server_sys};
  courier::actor_ref<api> target = server_sys.spawn<service>(&bumps);
  courier::system client_sys;
  courier::net::node client_net{client_sys};
  courier::actor_ref<api> remote;

  explicit pair(courier::net::endpoint where) {
    // A short keepalive: the engine's clock ticks (every 50 ms) during the warm-up too, and a side
    // that only sends hears nothing for long enough to ping, so pings are part of the steady state.
    courier::net::connection_config cfg;
    cfg.ping_interval = 200ms;
    auto s = server_net.serve(target, where, cfg);
    REQUIRE(s);
    if (where.kind == courier::net::transport_kind::tcp) where.port = s->port;
    auto r = client_net.connect<api>(where, cfg);
    REQUIRE(r);
    remote = std::move(*r);
  }
  ~pair() {
    remote.reset();
    client_net.stop();
    server_net.stop();
  }
};

const char* name_of(const courier::net::endpoint& e) {
  return e.kind == courier::net::transport_kind::uds ? "uds" : "tcp";
}

}  // namespace

TEST_CASE("remote request().then from an actor allocates nothing per call in steady state", "[net][allocation]") {
  courier_test::watchdog wd{"net allocation: request", 60s};
  for (auto where : {uds_endpoint(), tcp_endpoint()}) {
    for (std::uint32_t width : {1u, 64u}) {  // one call in flight; 64 pipelined
      INFO("transport: " << name_of(where) << ", calls in flight: " << width);
      pair p(where);
      std::atomic<std::uint64_t> done{0}, failures{0};
      auto c = p.client_sys.spawn<caller>(p.remote, &done, &failures);
      // Warm-up: pool slots, buffers, timer storage, the call table, the engine clock's first ticks.
      c.send(start_calls{3'000 / scale, width});
      wait_for(done, 1);
      settle();
      measured m;
      for (std::uint64_t round = 2; round <= 5; ++round) {  // 10,000 calls
        c.send(start_calls{2'500 / scale, width});
        wait_for(done, round);
      }
      const auto events = m.events();  // before INFO, which allocates its text
      INFO("operator new calls: " << m.operator_new_calls() << ", pool chunks: " << m.pool_chunks()
                                  << ", large slots: " << m.large_slots());
      CHECK(events == 0);
      CHECK(failures.load() == 0);
      c.stop();
    }
  }
}

TEST_CASE("remote ask from a plain thread allocates nothing per call in steady state", "[net][allocation]") {
  courier_test::watchdog wd{"net allocation: ask", 60s};
  for (auto where : {uds_endpoint(), tcp_endpoint()}) {
    INFO("transport: " << name_of(where));
    pair p(where);
    for (std::int32_t i = 0; i < 1'000; ++i) REQUIRE(p.remote.ask(add{i, 1}, 10s));
    settle();
    measured m;
    std::uint64_t wrong = 0;
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(5'000 / scale); ++i) {
      auto v = p.remote.ask(add{i, 1}, 10s);
      if (!v || *v != i + 1) ++wrong;
    }
    const auto events = m.events();  // before INFO, which allocates its text
    INFO("operator new calls: " << m.operator_new_calls() << ", pool chunks: " << m.pool_chunks()
                                << ", large slots: " << m.large_slots());
    CHECK(events == 0);
    CHECK(wrong == 0);
  }
}

namespace {

// ADD_ in a service table: as a dynamic service (two int32 read in place, their sum written into
// the reply) or as a typed one (service_table::on: the message struct read, its sum returned).
enum class adder_kind { dynamic, typed };
const char* name_of(adder_kind k) { return k == adder_kind::typed ? "typed service (on)" : "dynamic service (add)"; }

std::shared_ptr<courier::net::service_table> adder_services(adder_kind kind = adder_kind::dynamic) {
  auto services = std::make_shared<courier::net::service_table>();
  if (kind == adder_kind::typed) {
    services->on([](const add& m) { return m.a + m.b; });
    return services;
  }
  services->add(courier::token("ADD_"), [](courier::net::incoming& call) {
    const auto a = call.read<std::int32_t>();
    const auto b = call.read<std::int32_t>();
    if (a && b) call.reply().add(*a + *b);
  });
  return services;
}

// The int32 a reply to ADD_ holds; -1 if it holds none.
std::int32_t sum_of(const courier::wire::items_ref& reply) {
  auto r = reply.items();
  auto v = r.read<std::int32_t>();
  return v ? *v : -1;
}

// From a plain thread: ADD_ by call_wait, then by call().then, each checked.
struct adder_calls {
  courier::net::context_ref ctx;
  std::atomic<std::uint64_t> answered{0}, wrong{0};

  void both(std::int32_t i) {
    {
      auto v = ctx.call_wait(courier::token("ADD_"), courier::net::args(i, std::int32_t{1}), 10s);
      if (!v || sum_of(*v) != i + 1) ++wrong;
    }  // the reply's block is let go before the next call
    const std::uint64_t before = answered.load();
    ctx.call(courier::token("ADD_"), courier::net::args(i, std::int32_t{2}), 10s)
        .then(
            [this, i](const courier::wire::items_ref& reply) {
              if (sum_of(reply) != i + 2) ++wrong;
              ++answered;
            },
            [this](const courier::error&) {
              ++wrong;
              ++answered;
            });
    while (answered.load() == before) std::this_thread::yield();
  }
};

}  // namespace

TEST_CASE(
    "a service table's call allocates nothing in steady state, dynamic or typed service, from a typed ref or by token",
    "[net][allocation][services]") {
  courier_test::watchdog wd{"net allocation: dynamic", 120s};  // 14,000 round trips a transport
  const auto kind = GENERATE(adder_kind::dynamic, adder_kind::typed);
  for (auto where : {uds_endpoint(), tcp_endpoint()}) {
    INFO("transport: " << name_of(where) << ", " << name_of(kind));
    courier::system server_sys;
    courier::net::node server_net{server_sys};
    auto services = adder_services(kind);
    courier::net::connection_config cfg;
    cfg.ping_interval = 200ms;
    auto s = server_net.serve(services, where, cfg);
    REQUIRE(s);
    if (where.kind == courier::net::transport_kind::tcp) where.port = s->port;
    courier::system client_sys;
    courier::net::node client_net{client_sys};
    auto r = client_net.connect<api>(where, cfg);
    REQUIRE(r);
    for (std::int32_t i = 0; i < 1'000; ++i) REQUIRE(r->ask(add{i, 1}, 10s));
    settle();
    measured m;
    std::uint64_t wrong = 0;
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(5'000 / scale); ++i) {
      auto v = r->ask(add{i, 1}, 10s);
      if (!v || *v != i + 1) ++wrong;
    }
    const auto events = m.events();  // before INFO, which allocates its text
    INFO("operator new calls: " << m.operator_new_calls() << ", pool chunks: " << m.pool_chunks()
                                << ", large slots: " << m.large_slots());
    CHECK(events == 0);
    CHECK(wrong == 0);
    r->reset();
    {
      // The same service called by token through a context_ref: call_wait and call().then.
      auto ctx = client_net.connect(where, cfg);
      REQUIRE(ctx);
      adder_calls calls{*ctx};
      for (std::int32_t i = 0; i < 1'000; ++i) calls.both(i);
      settle();
      measured by_token;
      for (std::int32_t i = 0; i < static_cast<std::int32_t>(3'000 / scale); ++i) calls.both(i);
      const auto token_events = by_token.events();
      INFO("by token: operator new calls: " << by_token.operator_new_calls() << ", pool chunks: "
                                            << by_token.pool_chunks() << ", large slots: " << by_token.large_slots());
      CHECK(token_events == 0);
      CHECK(calls.wrong.load() == 0);
    }
    client_net.stop();
    server_net.stop();
  }
}

TEST_CASE("a call by token whose arguments do not fit inline allocates nothing: they take a pool slot",
          "[net][allocation][services]") {
  courier_test::watchdog wd{"net allocation: spilled arguments", 60s};
  auto services = std::make_shared<courier::net::service_table>();
  services->add(courier::token("LEN_"), [](courier::net::incoming& call) {
    if (const auto b = call.read<std::span<const std::byte>>()) call.reply().add(static_cast<std::int32_t>(b->size()));
  });
  for (auto where : {uds_endpoint(), tcp_endpoint()}) {
    INFO("transport: " << name_of(where));
    courier::system server_sys;
    courier::net::node server_net{server_sys};
    auto s = server_net.serve(services, where);
    REQUIRE(s);
    if (where.kind == courier::net::transport_kind::tcp) where.port = s->port;
    courier::system client_sys;
    courier::net::node client_net{client_sys};
    auto ctx = client_net.connect(where);
    REQUIRE(ctx);
    // Inline, just past it, and a kilobyte: the binary item's header adds a few bytes.
    const std::vector<std::size_t> sizes{20, courier::net::arguments::inline_capacity, 200, 1000};
    std::vector<std::byte> data(1000, std::byte{7});
    std::uint64_t wrong = 0;
    auto call = [&](std::size_t n) {
      auto v =
          ctx->call_wait(courier::token("LEN_"), courier::net::args(std::span<const std::byte>(data.data(), n)), 10s);
      if (!v || sum_of(*v) != static_cast<std::int32_t>(n)) ++wrong;
    };
    for (int i = 0; i < 500; ++i) call(sizes[static_cast<std::size_t>(i) % sizes.size()]);
    settle();
    measured m;
    for (int i = 0; i < static_cast<int>(2'000 / scale); ++i) call(sizes[static_cast<std::size_t>(i) % sizes.size()]);
    const auto events = m.events();
    INFO("operator new calls: " << m.operator_new_calls() << ", pool chunks: " << m.pool_chunks()
                                << ", large slots: " << m.large_slots());
    CHECK(events == 0);
    CHECK(wrong == 0);
    client_net.stop();
    server_net.stop();
  }
}

TEST_CASE("a local context call (serve_locally) allocates nothing in steady state: wait and callback",
          "[net][allocation][contexts][local]") {
  courier_test::watchdog wd{"net allocation: local context", 60s};
  const auto kind = GENERATE(adder_kind::dynamic, adder_kind::typed);
  INFO(name_of(kind));
  courier::system sys;
  auto services = adder_services(kind);
  auto ctx = courier::net::serve_locally(sys, services);
  adder_calls calls{ctx};
  auto both = [&](std::int32_t i) { calls.both(i); };
  for (std::int32_t i = 0; i < 1'000; ++i) both(i);
  settle();
  measured m;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(5'000 / scale); ++i) both(i);
  const auto events = m.events();  // before INFO, which allocates its text
  INFO("operator new calls: " << m.operator_new_calls() << ", pool chunks: " << m.pool_chunks()
                              << ", large slots: " << m.large_slots());
  CHECK(events == 0);
  CHECK(calls.wrong.load() == 0);
}

TEST_CASE("remote request().then from a plain thread allocates nothing per call in steady state", "[net][allocation]") {
  // The plain thread's request finds the connection idle and runs its turn (encodes and writes the
  // call) itself; the continuation runs on the system's host lane.
  courier_test::watchdog wd{"net allocation: plain thread request", 60s};
  for (auto where : {uds_endpoint(), tcp_endpoint()}) {
    INFO("transport: " << name_of(where));
    pair p(where);
    std::atomic<std::uint64_t> answered{0}, wrong{0};
    auto one = [&](std::int32_t i) {
      const std::uint64_t before = answered.load();
      p.remote.request(add{i, 1}, 10s)
          .then(
              [&wrong, &answered, i](std::int32_t v) {
                if (v != i + 1) ++wrong;
                ++answered;
              },
              [&wrong, &answered](const courier::error&) {
                ++wrong;
                ++answered;
              });
      while (answered.load() == before) std::this_thread::yield();
    };
    for (std::int32_t i = 0; i < 1'000; ++i) one(i);
    settle();
    measured m;
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(5'000 / scale); ++i) one(i);
    const auto events = m.events();  // before INFO, which allocates its text
    INFO("operator new calls: " << m.operator_new_calls() << ", pool chunks: " << m.pool_chunks()
                                << ", large slots: " << m.large_slots());
    CHECK(events == 0);
    CHECK(wrong.load() == 0);
  }
}

TEST_CASE("remote one-way sends allocate nothing per message in steady state", "[net][allocation]") {
  courier_test::watchdog wd{"net allocation: send", 60s};
  for (auto where : {uds_endpoint(), tcp_endpoint()}) {
    INFO("transport: " << name_of(where));
    pair p(where);
    std::uint64_t sent = 0;
    // Bursts of 256 sends, each waited for on the server, so the messages in flight (and the pool's
    // working set) stay bounded as in any steady state; warm up with bursts twice as large.
    auto bursts = [&](int count, int burst) {
      for (int b = 0; b < count; ++b) {
        for (int i = 0; i < burst; ++i) {
          REQUIRE(p.remote.send(bump{1}));
          ++sent;
        }
        wait_for(p.bumps, sent);
      }
    };
    bursts(30, 512);
    settle();
    measured m;
    bursts(static_cast<int>(100 / scale), 256);  // 25,600 sends
    const auto events = m.events();              // before INFO, which allocates its text
    INFO("operator new calls: " << m.operator_new_calls() << ", pool chunks: " << m.pool_chunks()
                                << ", large slots: " << m.large_slots());
    CHECK(events == 0);
    auto t = p.remote.ask(total{}, 10s);
    REQUIRE(t);
    CHECK(static_cast<std::uint64_t>(*t) == sent);
  }
}

TEST_CASE("remote calls with a string_ref field allocate nothing: the text views the receive block",
          "[net][allocation]") {
  courier_test::watchdog wd{"net allocation: string_ref", 60s};
  for (auto where : {uds_endpoint(), tcp_endpoint()}) {
    INFO("transport: " << name_of(where));
    pair p(where);
    const std::string text(48, 't');  // beyond any small-string buffer
    for (std::int32_t i = 0; i < 1'000; ++i) REQUIRE(p.remote.ask(label{courier::wire::string_ref(text)}, 10s));
    settle();
    measured m;
    std::uint64_t wrong = 0;
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(5'000 / scale); ++i) {
      auto v = p.remote.ask(label{courier::wire::string_ref(text)}, 10s);  // ask: `text` outlives the call
      if (!v || *v != 48) ++wrong;
    }
    const auto events = m.events();  // before INFO, which allocates its text
    INFO("operator new calls: " << m.operator_new_calls() << ", pool chunks: " << m.pool_chunks()
                                << ", large slots: " << m.large_slots());
    CHECK(events == 0);
    CHECK(wrong == 0);
  }
}
