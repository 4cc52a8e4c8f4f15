// An embedded system's host loop drives the sockets: a node on a system made with
// config::embedded() starts no thread; the reactor joins wake_fd, and the host's loop, written
// against the loop contract only (poll(2) on wake_fd() with next_deadline()'s time-out, then
// sys.poll()), serves the connections. Client and server sides, uds and tcp, the peer a threaded
// system in this process.
#include "courier/net/node.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "courier/actor.hpp"
#include "courier/receive.hpp"
#include "courier/system.hpp"
#include "net_test_util.hpp"
#include "watchdog.hpp"

#if defined(COURIER_TEST_WITH_ASIO)
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include "courier/asio.hpp"
#endif

using namespace std::chrono_literals;
using courier::errc;

namespace {

struct add {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0, b = 0;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};
struct later {  // replies after delay_ms through a promise
  static constexpr courier::token token{"LATE"};
  std::int32_t delay_ms = 0, value = 0;
  auto fields() { return std::tie(delay_ms, value); }
  auto fields() const { return std::tie(delay_ms, value); }
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

using api = courier::interface<std::int32_t(add), std::int32_t(later), void(bump), std::int64_t(total)>;

struct later_done {
  std::int32_t value;
  courier::response_promise<std::int32_t> answer;
};

// The served actor; it notes a thread its handlers ran on that was not `home` (for the embedded
// server: every handler must run on the host's thread).
class service : public courier::actor<service, add, later, bump, total, later_done> {
 public:
  explicit service(std::thread::id home = {}, std::atomic<int>* strays = nullptr) : home_(home), strays_(strays) {}
  std::int32_t on(const add& m) {
    note();
    return m.a + m.b;
  }
  courier::response_promise<std::int32_t> on(const later& m) {
    note();
    auto answer = make_response_promise<std::int32_t>();
    self().delayed_send(later_done{m.value, answer}, std::chrono::milliseconds(m.delay_ms));
    return answer;
  }
  void on(const later_done& m) {
    auto a = m.answer;
    a.deliver(m.value);
  }
  void on(const bump& m) {
    note();
    total_ += m.by;
  }
  std::int64_t on(const total&) {
    note();
    return std::exchange(total_, 0);
  }

 private:
  void note() {
    if (strays_ != nullptr && std::this_thread::get_id() != home_) strays_->fetch_add(1);
  }
  std::thread::id home_;
  std::atomic<int>* strays_;
  std::int64_t total_ = 0;
};

// A threaded server system and node in this process.
struct threaded_server {
  courier::system sys;
  courier::net::node net{sys};
  courier::actor_ref<api> target = sys.spawn<service>();
  courier::net::serving at;

  explicit threaded_server(const courier::net::endpoint& where) {
    auto s = net.serve(target, where);
    REQUIRE(s);
    at = *s;
  }
};

courier::net::endpoint uds_endpoint(const char* tag) {
  courier::net::endpoint e;
  e.kind = courier::net::transport_kind::uds;
  e.file = courier_test::temp_socket_path(tag);
  return e;
}

courier::net::endpoint tcp_endpoint(std::uint16_t port = 0) {
  courier::net::endpoint e;
  e.kind = courier::net::transport_kind::tcp;
  e.host = "127.0.0.1";
  e.port = port;
  return e;
}

// Where a client reaches what `at` says the server listens on.
courier::net::endpoint reach(const courier::net::endpoint& asked, const courier::net::serving& at) {
  courier::net::endpoint e = asked;
  if (e.kind == courier::net::transport_kind::tcp) e.port = at.port;
  return e;
}

// One round of a host's loop, written against the loop contract only: wait on wake_fd no longer
// than next_deadline() says (and `cap`, so a test's condition is looked at now and then), then
// run what is ready. The only descriptor watched is wake_fd: socket readiness must reach it.
void host_round(courier::system& sys, std::chrono::milliseconds cap = 100ms) {
  const auto deadline = sys.next_deadline();
  auto wait = cap;
  if (deadline != std::chrono::steady_clock::time_point::max()) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    wait = std::clamp(left, 0ms, cap);
  }
  pollfd fd{sys.wake_fd(), POLLIN, 0};
  ::poll(&fd, 1, static_cast<int>(wait.count()));
  sys.poll(256);
}

// Runs the host's loop until `done()` or `limit`; whether `done()` came true.
template <class Done>
bool drive_until(courier::system& sys, Done done, std::chrono::milliseconds limit = 5s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    host_round(sys);
  }
  return true;
}

// Watches a remote ref from inside the embedded system and notes the `down` it gets (and where).
class watcher : public courier::actor<watcher, courier::down> {
 public:
  watcher(courier::actor_ref<api> target, std::optional<courier::error>* seen, std::thread::id* where)
      : target_(std::move(target)), seen_(seen), where_(where) {}
  void on_start() { monitor(target_); }
  void on(const courier::down& d) {
    *seen_ = d.reason;
    *where_ = std::this_thread::get_id();
    target_.reset();
  }

 private:
  courier::actor_ref<api> target_;
  std::optional<courier::error>* seen_;
  std::thread::id* where_;
};

// On `go`, calls the remote ref and sends the answer (or -1) to an inbox.
struct go {
  std::int32_t a;
};
struct answer {
  std::int32_t value;
};
class relay : public courier::actor<relay, go> {
 public:
  relay(courier::actor_ref<api> remote, courier::actor_ref<courier::inbox_actor<answer>> to)
      : remote_(std::move(remote)), to_(std::move(to)) {}
  void on(const go& m) {
    auto to = to_;
    remote_.request(add{m.a, 1}, 5s)
        .then([to](std::int32_t v) { to.send(answer{v}); }, [to](const courier::error&) { to.send(answer{-1}); });
  }

 private:
  courier::actor_ref<api> remote_;
  courier::actor_ref<courier::inbox_actor<answer>> to_;
};

// The client's scenarios on the host's thread, against a served `service`.
void run_client_scenarios(const courier::net::endpoint& asked) {
  threaded_server srv(asked);
  const auto where = reach(asked, srv.at);
  const std::thread::id host = std::this_thread::get_id();
  courier::system sys{courier::config::embedded()};
  const auto threads_before = courier_test::thread_ids();
  auto net = std::make_unique<courier::net::node>(sys);
  auto connected = net->connect<api>(where);
  REQUIRE(connected);
  const courier::actor_ref<api> ref = *connected;
  CHECK(net->polled_by_system());  // the host's loop polls the reactor: no thread of the node's own
  int off_host = 0;                // continuations that ran anywhere but the host's thread
  auto on_host = [&] {
    if (std::this_thread::get_id() != host) ++off_host;
  };

  // request().then: the continuation runs in the host's sys.poll(), once the reply's bytes made
  // wake_fd readable. Nothing else is watched, so the loop hears of the socket through wake_fd.
  std::optional<std::int32_t> sum;
  ref.request(add{40, 2}, 5s)
      .then([&](std::int32_t v) { on_host(), sum = v; }, [&](const courier::error&) { on_host(), sum = -1; });
  REQUIRE(drive_until(sys, [&] { return sum.has_value(); }));
  CHECK(*sum == 42);

  // wake_fd alone, no deadline in the way: after the call is written, the reply's readiness makes
  // it readable (engine timers fire through next_deadline() and never make it readable).
  std::optional<std::int32_t> second;
  ref.request(add{1, 1}, 5s)
      .then([&](std::int32_t v) { on_host(), second = v; }, [&](const courier::error&) { on_host(), second = -1; });
  for (int i = 0; i < 3 && !second; ++i) {
    sys.poll();  // runs the connection's turn: the call is written
    if (!second) CHECK(courier_test::wait_for(sys.wake_fd(), POLLIN, 2s));
  }
  REQUIRE(drive_until(sys, [&] { return second.has_value(); }));
  CHECK(*second == 2);

  // ask on the host's thread drives the loop, sockets included, while it waits.
  auto asked_sum = ref.ask(add{2, 3}, 5s);
  REQUIRE(asked_sum);
  CHECK(*asked_sum == 5);

  // One-way sends, in order before a call that reads their total.
  for (int i = 1; i <= 100; ++i) CHECK(ref.send(bump{i}));
  auto tot = ref.ask(total{}, 5s);
  REQUIRE(tot);
  CHECK(*tot == 5050);

  // Many calls in flight at once, every continuation on the host's thread.
  int answered = 0, right = 0;
  for (int i = 0; i < 64; ++i)
    ref.request(add{i, 1000}, 5s)
        .then([&, i](std::int32_t v) { on_host(), ++answered, right += v == i + 1000; },
              [&](const courier::error&) { on_host(), ++answered; });
  REQUIRE(drive_until(sys, [&] { return answered == 64; }));
  CHECK(right == 64);

  // A call's time-out fires in the host's loop (next_deadline), on the host's thread, while the
  // server still holds the call; the late reply is dropped.
  std::optional<courier::error> timed_out;
  const auto t0 = std::chrono::steady_clock::now();
  ref.request(later{500, 1}, 50ms)  // (the close below waits for its reply: keep it short)
      .then([&](std::int32_t) { on_host(), timed_out = courier::error{}; },
            [&](const courier::error& e) { on_host(), timed_out = e; });
  REQUIRE(drive_until(sys, [&] { return timed_out.has_value(); }));
  CHECK(*timed_out == errc::request_timeout);
  CHECK(std::chrono::steady_clock::now() - t0 < 450ms);
  auto deferred = ref.ask(later{20, 7}, 5s);  // a deferred reply still comes back
  REQUIRE(deferred);
  CHECK(*deferred == 7);

  // Idle: the loop sleeps between the engine's timer ticks; a wake_fd left readable (by the
  // reactor's descriptor inside it) would make it spin through thousands of rounds.
  int rounds = 0;
  for (const auto quiet = std::chrono::steady_clock::now() + 300ms; std::chrono::steady_clock::now() < quiet; ++rounds)
    host_round(sys);
  CHECK(rounds < 100);

  CHECK(off_host == 0);
  CHECK(courier_test::threads_added(threads_before) == 0);

  // ~node on the host's thread drives the closing connection itself (no 2 s grace spent waiting
  // for a loop that this very thread would run).
  const auto t1 = std::chrono::steady_clock::now();
  net.reset();
  CHECK(std::chrono::steady_clock::now() - t1 < 1s);
  CHECK(courier_test::threads_added(threads_before) == 0);
}

}  // namespace

TEST_CASE("embedded client over uds: the host's loop drives the socket, no thread is started", "[net][embedded][uds]") {
  courier_test::watchdog wd("embedded client uds", 60s);
  run_client_scenarios(uds_endpoint("embedded-client"));
}

TEST_CASE("embedded client over tcp: the host's loop drives the socket, no thread is started", "[net][embedded][tcp]") {
  courier_test::watchdog wd("embedded client tcp", 60s);
  run_client_scenarios(tcp_endpoint());
}

TEST_CASE("embedded client: a host that watches wake_fd edge-triggered hears every reply", "[net][embedded][edge]") {
  courier_test::watchdog wd("embedded edge-triggered", 30s);
  const auto asked = uds_endpoint("embedded-edge");
  threaded_server srv(asked);
  courier::system sys{courier::config::embedded()};
  const int fd = sys.wake_fd();
  courier::net::node net{sys};
  CHECK(sys.wake_fd() == fd);  // the same descriptor before and after the node joined it
  auto ref = net.connect<api>(asked);
  REQUIRE(ref);
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  REQUIRE(ep >= 0);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;  // an edge per new readiness: the host never sees the level
  REQUIRE(::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);
  int answered = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int32_t i = 0; i < 50; ++i) {  // one call at a time: each reply must bring its own edge
    std::optional<std::int32_t> got;
    ref->request(add{i, 1}, 5s).then([&](std::int32_t v) { got = v; }, [&](const courier::error&) { got = -1; });
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!got && std::chrono::steady_clock::now() < until) {
      while (sys.poll().more) {
      }  // edge-triggered: run until nothing is left before waiting again
      if (got) break;
      epoll_event out{};
      ::epoll_wait(ep, &out, 1, 1000);  // no deadline used: only an edge ends the wait early
    }
    REQUIRE(got);
    answered += *got == i + 1 ? 1 : 0;
  }
  CHECK(answered == 50);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);  // a missed edge costs a whole second
  ::close(ep);
}

TEST_CASE("embedded client: a monitor on a remote ref fires down when the server's node stops",
          "[net][embedded][monitor]") {
  courier_test::watchdog wd("embedded monitor", 30s);
  const auto asked = uds_endpoint("embedded-monitor");
  auto srv = std::make_unique<threaded_server>(asked);
  const std::thread::id host = std::this_thread::get_id();
  courier::system sys{courier::config::embedded()};
  const auto threads_before = courier_test::thread_ids();
  courier::net::node net{sys};
  auto ref = net.connect<api>(asked);
  REQUIRE(ref);
  std::optional<courier::error> seen;
  std::thread::id seen_on;
  sys.spawn<watcher>(*ref, &seen, &seen_on);
  auto first = ref->ask(add{1, 2}, 5s);  // connected and served
  REQUIRE(first);
  std::optional<courier::error> in_flight;
  std::thread::id failed_on;
  ref->request(later{10'000, 1}, 20s)
      .then([&](std::int32_t) { in_flight = courier::error{}; },
            [&](const courier::error& e) { in_flight = e, failed_on = std::this_thread::get_id(); });
  // The call reaches the server: it is written in the loop's next rounds.
  drive_until(
      sys, [] { return false; }, 100ms);
  const auto t0 = std::chrono::steady_clock::now();
  srv->net.stop(200ms);  // the server's node closes its connections; a short grace for the call in flight
  REQUIRE(drive_until(
      sys, [&] { return seen.has_value() && in_flight.has_value(); }, 10s));
  CHECK(*seen == errc::connection_lost);
  CHECK(*in_flight == errc::connection_lost);
  CHECK(seen_on == host);
  CHECK(failed_on == host);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  auto after = ref->ask(add{1, 2}, 5s);  // later calls fail at once
  CHECK_FALSE(after);
  CHECK(courier_test::threads_added(threads_before) == 0);
}

TEST_CASE("embedded client: inbox::receive on the host's thread drives the socket while it waits",
          "[net][embedded][inbox]") {
  courier_test::watchdog wd("embedded inbox", 30s);
  const auto asked = uds_endpoint("embedded-inbox");
  threaded_server srv(asked);
  courier::system sys{courier::config::embedded()};
  const auto threads_before = courier_test::thread_ids();
  courier::net::node net{sys};
  auto ref = net.connect<api>(asked);
  REQUIRE(ref);
  courier::inbox<answer> in{sys};
  auto r = sys.spawn<relay>(*ref, in.ref());
  for (std::int32_t i = 0; i < 50; ++i) {  // no host loop: receive runs the system, sockets included
    REQUIRE(r.send(go{i}));
    auto got = in.receive<answer>(5s);
    REQUIRE(got);
    CHECK(got->value == i + 1);
  }
  CHECK(courier_test::threads_added(threads_before) == 0);
}

TEST_CASE("embedded client: a server that never answers the handshake times out in the host's loop",
          "[net][embedded][timeout]") {
  courier_test::watchdog wd("embedded handshake time-out", 30s);
  // A listener that nobody serves: the kernel completes the connection, no handshake comes back.
  const auto asked = uds_endpoint("embedded-silent");
  auto silent = courier::net::listen(asked);
  REQUIRE(silent);
  courier::system sys{courier::config::embedded()};
  const auto threads_before = courier_test::thread_ids();
  courier::net::node net{sys};
  courier::net::connection_config cfg;
  cfg.handshake_timeout = 200ms;
  auto ref = net.connect<api>(asked, cfg);
  REQUIRE(ref);  // an embedded system does not wait for the handshake: the first call tells
  std::optional<courier::error> outcome;
  const auto t0 = std::chrono::steady_clock::now();
  ref->request(add{1, 1}, 10s)
      .then([&](std::int32_t) { outcome = courier::error{}; }, [&](const courier::error& e) { outcome = e; });
  REQUIRE(drive_until(
      sys, [&] { return outcome.has_value(); }, 5s));
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(static_cast<bool>(*outcome));  // failed
  CHECK(took >= 150ms);
  CHECK(took < 3s);
  CHECK(courier_test::threads_added(threads_before) == 0);
}

TEST_CASE("embedded server: a threaded client calls an actor served from the host's loop", "[net][embedded][server]") {
  courier_test::watchdog wd("embedded server", 60s);
  for (const auto& asked : {uds_endpoint("embedded-server"), tcp_endpoint()}) {
    const std::thread::id host = std::this_thread::get_id();
    std::atomic<int> strays{0};
    courier::system sys{courier::config::embedded()};
    auto target = sys.spawn<service>(host, &strays);
    const auto threads_before = courier_test::thread_ids();
    courier::net::node net{sys};
    auto at = net.serve<api>(target, asked);
    REQUIRE(at);
    CHECK(net.polled_by_system());
    const std::size_t threads_started = courier_test::threads_added(threads_before);

    // The client: a threaded system in this process, calling from a plain thread of its own.
    courier::system client_sys;
    courier::net::node client{client_sys};
    std::atomic<bool> done{false};
    std::atomic<int> wrong{0};
    std::thread caller([&] {
      auto ref = client.connect<api>(reach(asked, *at));  // waits for the handshake: the host's loop answers
      if (!ref) {
        wrong = 1000;
      } else {
        for (int i = 0; i < 200; ++i) {
          auto r = ref->ask(add{i, 1}, 5s);
          if (!r || *r != i + 1) ++wrong;
        }
        for (int i = 1; i <= 100; ++i) ref->send(bump{i});
        auto t = ref->ask(total{}, 5s);
        if (!t || *t != 5050) ++wrong;
        auto d = ref->ask(later{20, 9}, 5s);  // a delayed reply: the host's loop fires the timer
        if (!d || *d != 9) ++wrong;
      }
      done = true;
    });
    const bool finished = drive_until(
        sys, [&] { return done.load(); }, 30s);
    caller.join();
    REQUIRE(finished);
    CHECK(wrong.load() == 0);
    CHECK(strays.load() == 0);  // every handler ran on the host's thread
    CHECK(threads_started == 0);
    net.stop();
  }
}

TEST_CASE("a node keeps a reactor thread where the system cannot poll it", "[net][embedded]") {
  courier_test::watchdog wd("reactor thread fallback", 30s);
  {
    // Deterministic: the test's run calls poll the sockets (connection_core.test.cpp).
    courier::system sys{courier::config::deterministic()};
    const auto threads_before = courier_test::thread_ids();
    courier::net::node net{sys};
    CHECK(net.polled_by_system());
    CHECK(courier_test::threads_added(threads_before) == 0);
  }
  {
    courier::config cfg = courier::config::embedded();
    cfg.on_wake = [](void*) {};  // no wake_fd to join
    courier::system sys{cfg};
    courier::net::node net{sys};
    CHECK_FALSE(net.polled_by_system());
  }
  {
    courier::system sys{courier::config::embedded()};
    courier::net::node net{sys};
    CHECK(net.polled_by_system());
  }
}

#if defined(COURIER_TEST_WITH_ASIO)
TEST_CASE("asio embedded_loop on wake_fd drives a node's socket; no thread is started", "[net][embedded][asio]") {
  courier_test::watchdog wd("embedded asio", 30s);
  const auto asked = uds_endpoint("embedded-asio");
  threaded_server srv(asked);
  ::asio::io_context io;
  courier::system sys{courier::config::embedded()};
  const auto threads_before = courier_test::thread_ids();
  // The loop takes wake_fd once, before the node exists: the node's sockets must reach it anyway.
  courier::asio::embedded_loop loop(io, sys);
  auto net = std::make_unique<courier::net::node>(sys);
  auto ref = net->connect<api>(asked);
  REQUIRE(ref);
  std::optional<std::int32_t> sum;
  std::optional<courier::result<std::int32_t>> awaited;
  std::thread::id io_thread, then_thread;
  ::asio::post(io, [&] {
    io_thread = std::this_thread::get_id();
    ref->request(add{20, 22}, 5s)
        .then([&](std::int32_t v) { sum = v, then_thread = std::this_thread::get_id(); },
              [&](const courier::error&) { sum = -1; });
    courier::asio::async_request(*ref, add{1, 2}, 5s, [&](courier::result<std::int32_t> r) { awaited = std::move(r); });
  });
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!(sum && awaited) && std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
  REQUIRE(sum);
  CHECK(*sum == 42);
  CHECK(then_thread == io_thread);
  REQUIRE(awaited);
  REQUIRE(*awaited);
  CHECK(**awaited == 3);
  CHECK(courier_test::threads_added(threads_before) == 0);
  net.reset();  // on the thread that ran the loop: it drives the closing connection itself
  std::optional<courier::shutdown_report> report;
  ::asio::post(io, [&] { loop.async_shutdown([&](courier::shutdown_report r) { report = std::move(r); }); });
  if (io.stopped()) io.restart();
  io.run_for(5s);
  REQUIRE(report);
  CHECK(report->clean);
}
#endif

// Not run by default (`net_embedded "[measure]"`): round trips per second over uds from an
// embedded host's thread (ask; request().then with 64 in flight, driven by the host loop) and,
// for comparison, from a plain thread of a threaded client.
TEST_CASE("measure: round trips from an embedded host and from a threaded client", "[.][measure]") {
  courier_test::watchdog wd("measure", 120s);
  const auto asked = uds_endpoint("embedded-measure");
  threaded_server srv(asked);
  constexpr int asks = 20'000;
  constexpr int pipelined = 100'000;
  auto rate = [](int n, std::chrono::steady_clock::duration d) { return n / std::chrono::duration<double>(d).count(); };
  {
    courier::system sys{courier::config::embedded()};
    courier::net::node net{sys};
    auto ref = net.connect<api>(asked);
    REQUIRE(ref);
    for (int i = 0; i < 1000; ++i) REQUIRE(ref->ask(add{i, 1}, 5s));
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < asks; ++i) REQUIRE(ref->ask(add{i, 1}, 5s));
    const double ask_rate = rate(asks, std::chrono::steady_clock::now() - t0);
    int sent = 0, done = 0;
    std::function<void()> one = [&] {
      ++sent;
      ref->request(add{sent, 1}, 5s)
          .then([&](std::int32_t) { ++done, sent < pipelined ? one() : void(); },
                [&](const courier::error&) { ++done, sent < pipelined ? one() : void(); });
    };
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 64; ++i) one();
    REQUIRE(drive_until(
        sys, [&] { return done == pipelined; }, 60s));
    const double then_rate = rate(pipelined, std::chrono::steady_clock::now() - t0);
    std::printf("embedded host, uds: ask %.0f round trips/s; request().then, 64 in flight: %.0f calls/s\n", ask_rate,
                then_rate);
  }
  {
    courier::system sys;
    courier::net::node net{sys};
    auto ref = net.connect<api>(asked);
    REQUIRE(ref);
    for (int i = 0; i < 1000; ++i) REQUIRE(ref->ask(add{i, 1}, 5s));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < asks; ++i) REQUIRE(ref->ask(add{i, 1}, 5s));
    std::printf("threaded client, plain thread, uds: ask %.0f round trips/s\n",
                rate(asks, std::chrono::steady_clock::now() - t0));
  }
}
