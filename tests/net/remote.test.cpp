// Remote refs: the same scenarios against a local actor and against the same actor served over a
// Unix socket and over TCP (two systems in one process, real sockets), with the same results.
// Also: monitors on a remote ref, an unknown token, frames at the size limit, many callers on one
// connection, late replies, a lost server.
#include "courier/net/node.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "courier/actor.hpp"
#include "courier/system.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using courier::errc;

namespace {

struct add {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0, b = 0;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};
struct fail_with {  // the handler fails the request with this text
  static constexpr courier::token token{"FAIL"};
  std::string why;
  auto fields() { return std::tie(why); }
  auto fields() const { return std::tie(why); }
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
struct blob {  // echoes its bytes
  static constexpr courier::token token{"BLOB"};
  std::string bytes;
  auto fields() { return std::tie(bytes); }
  auto fields() const { return std::tie(bytes); }
};
struct extra {  // in the client's interface only: the server has no such service
  static constexpr courier::token token{"XTRA"};
  auto fields() { return std::tie(); }
  auto fields() const { return std::tie(); }
};

using api = courier::interface<std::int32_t(add), courier::unit(fail_with), std::int32_t(later), void(bump),
                               std::int64_t(total), std::string(blob)>;
using wider_api = courier::interface<std::int32_t(add), courier::unit(extra)>;

struct later_done {
  std::int32_t value;
  courier::response_promise<std::int32_t> answer;
};

class service : public courier::actor<service, add, fail_with, later, bump, total, blob, extra, later_done> {
 public:
  std::int32_t on(const add& m) { return m.a + m.b; }
  // Fails the request without stopping the actor (a throwing handler would stop it).
  courier::response_promise<courier::unit> on(const fail_with& m) {
    auto answer = make_response_promise<courier::unit>();
    answer.fail(courier::error(errc::handler_failed, m.why));
    return answer;
  }
  courier::response_promise<std::int32_t> on(const later& m) {
    auto answer = make_response_promise<std::int32_t>();
    self().delayed_send(later_done{m.value, answer}, std::chrono::milliseconds(m.delay_ms));
    return answer;
  }
  void on(const later_done& m) {
    auto a = m.answer;
    a.deliver(m.value);
  }
  void on(const bump& m) { total_ += m.by; }
  std::int64_t on(const total&) { return std::exchange(total_, 0); }  // each scenario starts from 0
  std::string on(const blob& m) { return m.bytes; }
  courier::unit on(const extra&) { return {}; }

 private:
  std::int64_t total_ = 0;
};

// A server system and node in this process, serving `service` as `api` on `where`.
struct server {
  courier::system sys;
  courier::net::node net{sys};
  courier::actor_ref<api> target = sys.spawn<service>();
  courier::net::serving at;

  explicit server(courier::net::endpoint where, courier::net::connection_config cfg = {}) {
    auto s = net.serve(target, where, cfg);
    REQUIRE(s);
    at = *s;
  }
};

courier::net::endpoint uds_endpoint(const char* tag) {
  courier::net::endpoint e;
  e.kind = courier::net::transport_kind::uds;
  e.file = "/tmp/courier-test-" + std::to_string(::getpid()) + "-" + tag + ".sock";
  return e;
}

courier::net::endpoint tcp_endpoint() {
  courier::net::endpoint e;
  e.kind = courier::net::transport_kind::tcp;
  e.host = "127.0.0.1";
  e.port = 0;  // the listener picks; the test reads it back
  return e;
}

// The scenarios, written once against actor_ref<api>: a local ref and a remote ref must agree.
struct outcome {
  std::int32_t sum = 0;
  std::error_code fail_code;
  std::string fail_text;
  std::int32_t deferred = 0;
  std::error_code timeout_code;
  std::int64_t total_after_sends = 0;
  std::int32_t callback_sum = 0;
  std::string blob_back;
  std::int64_t total_after_delayed = 0;
};

outcome run_scenarios(const courier::actor_ref<api>& ref) {
  outcome o;
  auto s = ref.ask(add{40, 2}, 5s);
  o.sum = s ? *s : -1;
  auto f = ref.ask(fail_with{"no luck"}, 5s);
  if (!f) {
    o.fail_code = f.err().code;
    o.fail_text = f.err().text;
  }
  auto d = ref.ask(later{20, 7}, 5s);
  o.deferred = d ? *d : -1;
  auto t = ref.ask(later{400, 1}, 50ms);  // (an orderly close waits for its reply: keep it short)
  if (!t) o.timeout_code = t.err().code;
  for (int i = 1; i <= 100; ++i) ref.send(bump{i});
  auto tot = ref.ask(total{}, 5s);
  o.total_after_sends = tot ? *tot : -1;
  std::promise<std::int32_t> p;
  ref.request(add{1, 2}, 5s)
      .then([&p](std::int32_t v) { p.set_value(v); }, [&p](const courier::error&) { p.set_value(-1); });
  auto fut = p.get_future();
  o.callback_sum = fut.wait_for(5s) == std::future_status::ready ? fut.get() : -2;
  std::string big(100'000, 'z');
  auto b = ref.ask(blob{big}, 5s);
  o.blob_back = b ? *b : std::string("failed");
  // delayed_send: delivered after the delay, through the same ref type.
  ref.delayed_send(bump{1000}, 20ms);
  std::this_thread::sleep_for(200ms);
  auto after_delay = ref.ask(total{}, 5s);
  o.total_after_delayed = after_delay ? *after_delay : -1;
  return o;
}

void check_same(const outcome& local, const outcome& remote) {
  CHECK(local.sum == 42);
  CHECK(remote.sum == local.sum);
  CHECK(local.fail_code == errc::handler_failed);
  CHECK(remote.fail_code == local.fail_code);
  CHECK(remote.fail_text == local.fail_text);
  CHECK(local.deferred == 7);
  CHECK(remote.deferred == local.deferred);
  CHECK(local.timeout_code == errc::request_timeout);
  CHECK(remote.timeout_code == local.timeout_code);
  CHECK(local.total_after_sends == 5050);
  CHECK(remote.total_after_sends == local.total_after_sends);
  CHECK(local.callback_sum == 3);
  CHECK(remote.callback_sum == local.callback_sum);
  CHECK(local.blob_back.size() == 100'000);
  CHECK(remote.blob_back == local.blob_back);
  CHECK(local.total_after_delayed == 1000);
  CHECK(remote.total_after_delayed == local.total_after_delayed);
}

}  // namespace

TEST_CASE("a remote ref over uds gives the same results as a local ref", "[net][remote][uds]") {
  courier_test::watchdog wd("remote uds", 60s);
  server srv(uds_endpoint("same"));
  const outcome local = run_scenarios(srv.target);
  courier::system client_sys;
  courier::net::node client{client_sys};
  auto ref = client.connect<api>(uds_endpoint("same"));
  REQUIRE(ref);
  check_same(local, run_scenarios(*ref));
}

TEST_CASE("a remote ref over tcp gives the same results as a local ref", "[net][remote][tcp]") {
  courier_test::watchdog wd("remote tcp", 60s);
  server srv(tcp_endpoint());
  const outcome local = run_scenarios(srv.target);
  courier::system client_sys;
  courier::net::node client{client_sys};
  auto where = tcp_endpoint();
  where.port = srv.at.port;
  auto ref = client.connect<api>(where);
  REQUIRE(ref);
  check_same(local, run_scenarios(*ref));
}

TEST_CASE("an unknown token is answered with no_such_service", "[net][remote]") {
  courier_test::watchdog wd("unknown token", 30s);
  server srv(uds_endpoint("unknown"));
  courier::system client_sys;
  courier::net::node client{client_sys};
  auto ref = client.connect<wider_api>(uds_endpoint("unknown"));
  REQUIRE(ref);
  auto r = ref->ask(extra{}, 5s);
  REQUIRE_FALSE(r);
  CHECK(r.err() == errc::no_such_service);
  auto ok = ref->ask(add{1, 1}, 5s);  // the connection goes on
  REQUIRE(ok);
  CHECK(*ok == 2);
}

namespace {
class watcher : public courier::actor<watcher, courier::down> {
 public:
  watcher(courier::actor_ref<api> target, std::promise<courier::error>* seen)
      : target_(std::move(target)), seen_(seen) {}
  void on_start() { monitor(target_); }
  void on(const courier::down& d) {
    seen_->set_value(d.reason);
    target_.reset();
  }

 private:
  courier::actor_ref<api> target_;
  std::promise<courier::error>* seen_;
};
}  // namespace

TEST_CASE("a monitor on a remote ref fires down when the connection is lost; calls in flight fail",
          "[net][remote][monitor]") {
  courier_test::watchdog wd("remote monitor", 30s);
  auto srv = std::make_unique<server>(uds_endpoint("monitor"));
  courier::system client_sys;
  courier::net::node client{client_sys};
  auto ref = client.connect<api>(uds_endpoint("monitor"));
  REQUIRE(ref);
  std::promise<courier::error> seen;
  client_sys.spawn<watcher>(*ref, &seen);
  std::promise<courier::error> in_flight;
  ref->request(later{10'000, 1}, 20s)
      .then([&in_flight](std::int32_t) { in_flight.set_value({}); },
            [&in_flight](const courier::error& e) { in_flight.set_value(e); });
  std::this_thread::sleep_for(50ms);  // the call reaches the server
  const auto t0 = std::chrono::steady_clock::now();
  srv->net.stop(200ms);  // the server goes away, after a short grace for the call in flight
  srv.reset();
  auto call_err = in_flight.get_future();
  REQUIRE(call_err.wait_for(10s) == std::future_status::ready);
  CHECK(call_err.get() == errc::connection_lost);
  auto down = seen.get_future();
  REQUIRE(down.wait_for(10s) == std::future_status::ready);
  CHECK(down.get() == errc::connection_lost);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  // Later calls fail at once instead of waiting.
  auto after = ref->ask(add{1, 2}, 5s);
  CHECK_FALSE(after);
}

TEST_CASE("many threads calling over one connection each get their own replies", "[net][remote][concurrent]") {
  courier_test::watchdog wd("many callers", 60s);
  server srv(uds_endpoint("many"));
  courier::system client_sys;
  courier::net::node client{client_sys};
  auto ref = client.connect<api>(uds_endpoint("many"));
  REQUIRE(ref);
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        auto r = ref->ask(add{t * 1000, i}, 10s);
        if (!r || *r != t * 1000 + i) ++wrong;
      }
    });
  }
  for (auto& c : callers) c.join();
  CHECK(wrong.load() == 0);
}

TEST_CASE("a frame at the size limit passes; one past it is refused at the sender", "[net][remote][limits]") {
  courier_test::watchdog wd("size limit", 30s);
  courier::net::connection_config cfg;
  cfg.limits.max_frame_size = 65536;
  server srv(uds_endpoint("limit"), cfg);
  courier::system client_sys;
  courier::net::node client{client_sys};
  auto ref = client.connect<api>(uds_endpoint("limit"), cfg);
  REQUIRE(ref);
  // A call frame is 32 (header) + 5 (string item) + n bytes; its reply is the same size.
  const std::size_t fits = 65536 - 32 - 5;
  auto ok = ref->ask(blob{std::string(fits, 'a')}, 10s);
  REQUIRE(ok);
  CHECK(ok->size() == fits);
  auto too_big = ref->ask(blob{std::string(fits + 1, 'a')}, 10s);
  REQUIRE_FALSE(too_big);
  CHECK(too_big.err() == errc::invalid_argument);
  auto after = ref->ask(add{2, 2}, 10s);  // the connection is unharmed
  REQUIRE(after);
  CHECK(*after == 4);
}

namespace {
struct dead_letter_log {
  std::atomic<int> invalid{0}, other{0};
  static void hook(const courier::dead_letter_info& info, void* self) {
    auto* log = static_cast<dead_letter_log*>(self);
    (info.reason == courier::dead_letter_reason::invalid_argument ? log->invalid : log->other).fetch_add(1);
  }
};
}  // namespace

TEST_CASE(
    "a one-way send past the peer's frame limit is a dead letter (invalid_argument), counted; the connection goes on",
    "[net][remote][limits]") {
  courier_test::watchdog wd("send past the limit", 30s);
  courier::net::connection_config cfg;
  cfg.limits.max_frame_size = 65536;
  server srv(uds_endpoint("send-limit"), cfg);
  dead_letter_log log;
  courier::config sys_cfg;
  sys_cfg.on_dead_letter = &dead_letter_log::hook;
  sys_cfg.dead_letter_user_data = &log;
  courier::system client_sys{sys_cfg};
  courier::net::node client{client_sys};
  auto ref = client.connect<api>(uds_endpoint("send-limit"), cfg);
  REQUIRE(ref);
  const std::size_t fits = 65536 - 32 - 5;
  CHECK(ref->send(blob{std::string(fits, 'a')}));      // one-way: its reply is not asked for
  CHECK(ref->send(blob{std::string(fits + 1, 'a')}));  // taken into the mailbox; cannot be encoded
  auto after = ref->ask(add{2, 2}, 10s);               // behind both sends: they have been handled by now
  REQUIRE(after);
  CHECK(*after == 4);
  REQUIRE(client.counters(*ref));
  CHECK(client.counters(*ref)->encode_failures == 1);
  CHECK(log.invalid.load() == 1);
  CHECK(log.other.load() == 0);
  CHECK(client_sys.dead_letters() == 1);
  CHECK(client.counters(*ref)->refused_sends == 0);
  // Only a live connection of this node has counters: not a local actor, not another node's
  // connection, not a connection that has ended.
  CHECK_FALSE(client.counters(srv.target));
  CHECK_FALSE(srv.net.counters(*ref));
  ref->stop();
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (client.counters(*ref) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  CHECK_FALSE(client.counters(*ref));
}

TEST_CASE("connecting to nothing is a clear error", "[net][remote]") {
  courier_test::watchdog wd("connect refused", 30s);
  courier::system client_sys;
  courier::net::node client{client_sys};
  auto ref = client.connect<api>(uds_endpoint("nobody"));
  REQUIRE_FALSE(ref);
  CHECK_FALSE(ref.err().text.empty());
}
