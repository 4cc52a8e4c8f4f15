// The fast path of a call: a plain thread's request runs the idle client connection's turn itself
// (it writes the call), and its `ask` drives the connection while it waits (it reads the reply);
// a connection watches for writability only while output waits. Each case checks that what the
// fast path skips (a worker's turn, the reactor's EPOLLIN, EPOLLOUT) is not needed for anything
// else: other senders through the same ref, time-outs, a peer that dies, monitors, a peer that
// stops reading.
#include "courier/net/node.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "courier/wire/decoder.hpp"
#include "net_test_util.hpp"
#include "peers.hpp"
#include "watchdog.hpp"

using namespace courier_test::peers;

namespace {

// One-way notes from several senders, each numbered: the service counts them and the notes that
// arrived out of their sender's order.
struct note {
  static constexpr courier::token token{"NOTE"};
  std::int32_t sender = 0, seq = 0;
  auto fields() { return std::tie(sender, seq); }
  auto fields() const { return std::tie(sender, seq); }
};
struct tally {
  static constexpr courier::token token{"TALY"};
  std::int32_t unused = 0;
  auto fields() { return std::tie(unused); }
  auto fields() const { return std::tie(unused); }
};
struct counts {
  std::int32_t notes = 0, out_of_order = 0;
  auto fields() { return std::tie(notes, out_of_order); }
  auto fields() const { return std::tie(notes, out_of_order); }
};
using notes_api = courier::interface<std::int32_t(add), courier::unit(note), counts(tally)>;

class notes_service : public courier::actor<notes_service, add, note, tally> {
 public:
  std::int32_t on(const add& m) { return m.a + m.b; }
  courier::unit on(const note& m) {
    auto& last = last_[static_cast<std::size_t>(m.sender)];
    if (m.seq != last + 1) ++out_of_order_;
    last = m.seq;
    ++notes_;
    return {};
  }
  counts on(const tally&) { return {notes_, out_of_order_}; }

 private:
  std::int32_t last_[16] = {};
  std::int32_t notes_ = 0, out_of_order_ = 0;
};

struct blob {
  static constexpr courier::token token{"BLOB"};
  std::string data;
  auto fields() { return std::tie(data); }
  auto fields() const { return std::tie(data); }
};
using sink_api = courier::interface<courier::unit(blob)>;

class down_watcher : public courier::actor<down_watcher, courier::down> {
 public:
  down_watcher(courier::actor_ref<api> target, std::promise<courier::error>* seen)
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

// A node serving `target` at `at`; returns the endpoint to connect to (tcp: the port it got).
template <class I>
endpoint serve_at(courier::net::node& net, const courier::actor_ref<I>& target, const endpoint& at) {
  auto served = net.serve(target, at);
  REQUIRE(served);
  endpoint where = at;
  if (where.kind == courier::net::transport_kind::tcp) where.port = served->port;
  return where;
}

// A server of its own: a system, its node, and a `Service` serving `I` at `at` (`where`: the
// endpoint to connect to).
template <class I, class Service>
struct served_by {
  courier::system sys;
  courier::net::node net{sys};
  courier::actor_ref<I> target = sys.spawn<Service>();
  endpoint where;
  explicit served_by(const endpoint& at) : where(serve_at(net, target, at)) {}
};

// The sanitizers run these several times slower; the sizes shrink with them, the checks do not.
#if defined(COURIER_TEST_TSAN) || defined(__SANITIZE_ADDRESS__)
constexpr int rounds = 200;
#else
constexpr int rounds = 2000;
#endif

}  // namespace

TEST_CASE("a plain thread's asks drive the connection while 8 other threads send and ask through the same ref",
          "[net][fast_path]") {
  courier_test::watchdog wd("fast path: 9 threads on one ref", 120s);
  each_transport("fp-many", [](const endpoint& at) {
    served_by<notes_api, notes_service> server(at);
    const endpoint& where = server.where;

    courier::system sys;
    courier::net::node net{sys};
    auto connected = net.connect<notes_api>(where);
    REQUIRE(connected);
    const courier::actor_ref<notes_api> ref = *connected;

    std::atomic<int> wrong{0};
    std::vector<std::thread> senders;
    for (int s = 1; s <= 8; ++s) {
      senders.emplace_back([&, s] {
        for (int i = 1; i <= rounds; ++i) {
          // One-way notes in order, a request now and then (from a plain thread: it runs the
          // connection's turn when it finds it idle, or another thread's ask drives it).
          while (ref.try_send(note{s, i}) == courier::send_result::full) std::this_thread::yield();
          if (i % 16 == 0) {
            auto r = ref.ask(add{s, i}, 10s);
            if (!r || *r != s + i) ++wrong;
          }
        }
      });
    }
    for (int i = 0; i < rounds; ++i) {
      auto r = ref.ask(add{i, 1}, 10s);
      if (!r || *r != i + 1) ++wrong;
    }
    for (auto& t : senders) t.join();
    CHECK(wrong.load() == 0);
    auto c = ref.ask(tally{}, 10s);  // behind every note on the one connection
    REQUIRE(c);
    CHECK(c->notes == 8 * rounds);
    CHECK(c->out_of_order == 0);
    ref.stop();
    net.stop();
    server.net.stop();
  });
}

namespace {

// Holds its system's one worker in a handler until released.
struct hold_worker {
  std::atomic<bool>* entered;
  std::shared_future<void> release;
};
class worker_holder : public courier::actor<worker_holder, hold_worker> {
 public:
  void on(const hold_worker& m) {
    m.entered->store(true);
    m.release.wait();
  }
};

}  // namespace

TEST_CASE("a plain thread's connect, calls and orderly close need no worker: it runs the connection itself",
          "[net][fast_path]") {
  courier_test::watchdog wd("fast path: connect with the only worker busy", 60s);
  each_transport("fp-connect", [](const endpoint& at) {
    served_by<notes_api, notes_service> server(at);
    const endpoint& where = server.where;

    courier::config one_worker;
    one_worker.workers = 1;
    courier::system sys(one_worker);
    courier::net::node net{sys};
    std::atomic<bool> entered{false};
    std::promise<void> release;
    sys.spawn<worker_holder>().send(hold_worker{&entered, release.get_future().share()});
    while (!entered.load()) std::this_thread::yield();

    // The handshake is written and read by this thread, as are the call and the close after it:
    // with the worker held, a connection left to the workers would not even start.
    courier::net::connection_config cfg;
    cfg.handshake_timeout = 3s;
    for (int i = 0; i < 3; ++i) {
      auto ref = net.connect<notes_api>(where, cfg);
      REQUIRE(ref);
      auto sum = ref->ask(add{i, 40}, 3s);
      REQUIRE(sum);
      CHECK(*sum == i + 40);
      auto parent = net.context_of(*ref);
      REQUIRE(parent);
      CHECK(parent.close_wait(3s));
    }
    release.set_value();
    net.stop();
    server.net.stop();
  });
}

TEST_CASE("a call that finds the connection held by another thread's ask is run and answered by that thread",
          "[net][fast_path]") {
  courier_test::watchdog wd("fast path: held connection", 60s);
  each_transport("fp-held", [](const endpoint& at) {
    server srv(at, {});
    good_client client(srv.where);
    std::atomic<bool> slow_done{false};
    std::atomic<std::int32_t> slow_value{-1};  // Catch's assertions stay on the test's thread
    std::thread waiter([&] {
      auto r = client.ref.ask(slow{400, 7}, 10s);  // its thread drives the connection for 400 ms
      slow_value = r ? *r : -2;
      slow_done = true;
    });
    std::this_thread::sleep_for(50ms);
    for (int i = 0; i < 20; ++i) {
      // Pushed while the connection is held: the push signals the waiting thread, which writes
      // this call and reads its reply for us.
      auto r = client.ref.ask(add{i, 2}, 5s);
      REQUIRE(r);
      CHECK(*r == i + 2);
    }
    CHECK_FALSE(slow_done.load());  // all twenty were answered while the slow call still waited
    waiter.join();
    CHECK(slow_value.load() == 7);
    CHECK(client.works());
  });
}

TEST_CASE("an ask that times out while its thread drives the connection leaves it working", "[net][fast_path]") {
  courier_test::watchdog wd("fast path: time-out while driving", 60s);
  each_transport("fp-timeout", [](const endpoint& at) {
    server srv(at, {});
    good_client client(srv.where);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = client.ref.ask(slow{600, 1}, 100ms);
    const auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE_FALSE(r);
    CHECK(r.err() == errc::request_timeout);
    CHECK(took >= 100ms);
    CHECK(took < 550ms);                 // it gave up at its deadline, not when the reply came
    CHECK(client.works());               // at once: the connection was handed back
    std::this_thread::sleep_for(700ms);  // the late reply arrives and is dropped
    CHECK(client.works());
    auto again = client.ref.ask(slow{20, 5}, 5s);
    REQUIRE(again);
    CHECK(*again == 5);
  });
}

TEST_CASE("a peer that dies while a thread drives the connection: connection_lost, and the monitor fires",
          "[net][fast_path]") {
  courier_test::watchdog wd("fast path: peer dies", 60s);
  each_transport("fp-dies", [](const endpoint& at) {
    const std::string hello = raw_peer::handshake_bytes();
    raw_server peer(at, [&hello](courier::net::socket& s) {
      courier_test::write_all(s, hello);
      // The client's handshake and its call (at least a header's worth after the handshake), then
      // the server is gone without a word.
      (void)courier_test::read_exactly(s, hello.size() + wire::header_size, 5s);
      std::this_thread::sleep_for(100ms);
      s.close();
    });
    courier::system sys;
    courier::net::node net{sys};
    auto ref = net.connect<api>(peer.where);
    REQUIRE(ref);
    courier::system watch_sys;
    std::promise<courier::error> down;
    watch_sys.spawn<down_watcher>(*ref, &down);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = ref->ask(add{1, 2}, 30s);
    REQUIRE_FALSE(r);
    CHECK(r.err() == errc::connection_lost);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    auto seen = down.get_future();
    REQUIRE(seen.wait_for(5s) == std::future_status::ready);
    CHECK(seen.get() == errc::connection_lost);
  });
}

TEST_CASE("after a thread's asks, what the peer sends on its own is read with no further call", "[net][fast_path]") {
  courier_test::watchdog wd("fast path: the socket goes back to the reactor", 90s);
  each_transport("fp-redrive", [](const endpoint& at) {
    server srv(at, {});
    good_client client(srv.where);
    for (int i = 0; i < 100; ++i) REQUIRE(client.works(i, 1));  // driven: the socket leaves the reactor
    courier::system watch_sys;
    std::promise<courier::error> down;
    watch_sys.spawn<down_watcher>(client.ref, &down);
    // The server closes in order: its close completes only once the client reads it and answers,
    // which no call of the client's prompts now. Were the socket still out of the reactor, the stop
    // would wait out its whole grace.
    const auto t0 = std::chrono::steady_clock::now();
    srv.net.stop(courier_test::scaled(15s));
    CHECK(std::chrono::steady_clock::now() - t0 < courier_test::scaled(5s));
    auto seen = down.get_future();
    REQUIRE(seen.wait_for(courier_test::scaled(5s)) == std::future_status::ready);
  });
}

TEST_CASE("output to a peer that stops reading is written once it reads again", "[net][fast_path]") {
  courier_test::watchdog wd("fast path: write interest on demand", 60s);
  each_transport("fp-stall", [](const endpoint& at) {
    constexpr int messages = 400;
    constexpr std::size_t text = 8000;  // 400 x 8 KB: far more than the socket buffers hold
    const std::string hello = raw_peer::handshake_bytes();
    std::atomic<int> frames{0};
    raw_server peer(at, [&](courier::net::socket& s) {
      (void)courier::net::set_buffer_size(s, 32 * 1024);
      courier_test::write_all(s, hello);
      std::this_thread::sleep_for(600ms);  // reads nothing while the client's output backs up
      std::string in;
      std::size_t at_byte = 0;
      const auto until = std::chrono::steady_clock::now() + 20s;
      while (frames.load() < messages + 1 && std::chrono::steady_clock::now() < until) {
        if (!courier_test::wait_for(s.fd(), POLLIN, 1s)) continue;
        char buf[65536];
        const auto got = courier::net::read_some(s, std::as_writable_bytes(std::span(buf)));
        if (got.status == courier::net::io_result::eof || got.status == courier::net::io_result::failed) break;
        if (got.status != courier::net::io_result::ok) continue;
        in.append(buf, got.bytes);
        for (;;) {  // whole frames: the handshake, then the sends
          if (in.size() - at_byte < wire::header_size) break;
          auto h = wire::parse_header(std::span<const std::byte, wire::header_size>(
                                          reinterpret_cast<const std::byte*>(in.data() + at_byte), wire::header_size),
                                      wire::limits{});
          if (!h) return;
          if (in.size() - at_byte < wire::header_size + h->body_length) break;
          at_byte += wire::header_size + h->body_length;
          ++frames;
        }
      }
    });
    courier::system sys;
    courier::net::node net{sys};
    courier::net::connection_config cfg;
    cfg.socket_buffer_size = 32 * 1024;
    auto ref = net.connect<sink_api>(peer.where, cfg);
    REQUIRE(ref);
    const std::string payload(text, 'x');
    for (int i = 0; i < messages; ++i) {
      while (ref->try_send(blob{payload}) == courier::send_result::full) std::this_thread::sleep_for(1ms);
    }
    // The peer's handshake and every send arrive: the client watched for writability while its
    // output waited, and wrote the rest as the peer read.
    CHECK(settles([&] { return frames.load() == messages + 1; }, 20s));
  });
}

namespace {

struct boom {
  static constexpr courier::token token{"BOOM"};
  std::int32_t unused = 0;
  auto fields() { return std::tie(unused); }
  auto fields() const { return std::tie(unused); }
};
struct later {  // answered by a promise, from a message the service sends itself
  static constexpr courier::token token{"LATR"};
  std::int32_t value = 0;
  auto fields() { return std::tie(value); }
  auto fields() const { return std::tie(value); }
};
using local_api = courier::interface<std::int32_t(add), std::int32_t(boom), std::int32_t(later)>;

struct answer_later {
  std::int32_t value;
  courier::response_promise<std::int32_t> promise;
};

class local_service : public courier::actor<local_service, add, boom, later, answer_later> {
 public:
  std::int32_t on(const add& m) { return m.a + m.b; }
  std::int32_t on(const boom&) { throw std::runtime_error("boom"); }
  courier::response_promise<std::int32_t> on(const later& m) {
    auto p = make_response_promise<std::int32_t>();
    self().send(answer_later{m.value, p});
    return p;
  }
  void on(const answer_later& m) {
    auto p = m.promise;
    p.deliver(m.value * 2);
  }
};

}  // namespace

TEST_CASE(
    "the served actor's handler on the local call path: deferred replies, a throw stops the actor, not the connection",
    "[net][fast_path]") {
  courier_test::watchdog wd("fast path: local call path", 60s);
  each_transport("fp-local", [](const endpoint& at) {
    served_by<local_api, local_service> server(at);
    const endpoint& where = server.where;
    courier::system sys;
    courier::net::node net{sys};
    auto ref = net.connect<local_api>(where);
    REQUIRE(ref);
    for (int i = 0; i < 50; ++i) {
      auto sum = ref->ask(add{i, 1}, 5s);
      REQUIRE(sum);
      CHECK(*sum == i + 1);
      auto deferred = ref->ask(later{i}, 5s);  // the handler defers: the promise answers later
      REQUIRE(deferred);
      CHECK(*deferred == 2 * i);
    }
    auto thrown = ref->ask(boom{}, 5s);
    REQUIRE_FALSE(thrown);
    CHECK(thrown.err() == errc::handler_failed);
    CHECK(thrown.err().text.find("boom") != std::string::npos);
    // The served actor stopped with the throw; the connection did not: its next call is answered
    // with the actor's failure, over the same connection.
    REQUIRE(settles([&] { return server.target.base()->has_stopped(); }));
    auto after = ref->ask(add{1, 1}, 5s);
    REQUIRE_FALSE(after);
    CHECK(after.err() != errc::connection_lost);
    CHECK(server.net.connections() == 1);
    CHECK(net.connections() == 1);
  });
}
