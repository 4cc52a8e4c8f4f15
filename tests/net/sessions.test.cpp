// Sessions (courier/net/session.hpp): a server that makes a session per accepted connection, with
// state of its own, who the peer is, pushes to its client, an end it is told of with why, limits
// and an idle time-out; and the mass test: 10,000 sessions in sequence and 500 at once, with no
// descriptor, thread or memory left behind. Over uds and tcp.
#include "courier/net/session.hpp"

#include <sys/resource.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "courier/actor.hpp"
#include "courier/net/node.hpp"
#include "courier/net/services.hpp"
#include "courier/pool.hpp"
#include "peers.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using namespace courier_test::peers;
namespace net = courier::net;

namespace {

std::int32_t int_of(const courier::wire::items_ref& reply) {
  auto r = reply.items();
  auto v = r.read<std::int32_t>();
  return v ? *v : -1;
}

// Eventually true, or false after `limit`.
template <class Predicate>
bool becomes(Predicate p, std::chrono::milliseconds limit = 5s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!p()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// An actor a session owns: it says when it is stopped.
struct ping {};
class owned_probe : public courier::actor<owned_probe, ping> {
 public:
  explicit owned_probe(std::shared_ptr<std::atomic<int>> stopped) : stopped_(std::move(stopped)) {}
  void on(const ping&) {}
  void on_stop() { stopped_->fetch_add(1); }

 private:
  std::shared_ptr<std::atomic<int>> stopped_;
};

// What the sessions of one server saw, for the test to read.
struct session_log {
  std::mutex mutex;
  std::vector<net::peer_info> started;
  std::vector<std::string> ended;  // on_end's reason texts, in the order they came
  std::vector<net::context_ref> clients;
  std::atomic<int> starts{0}, ends{0};
  std::shared_ptr<std::atomic<int>> owned_stopped = std::make_shared<std::atomic<int>>(0);
};

// A session server in this process: each session counts its own calls (CNT_), says who its peer
// is (WHO_), pushes to its client (PUSH: sends "PSH_" with the text back to the caller's side),
// closes its own connection (BYE_), and owns one actor.
struct session_server {
  session_log log;  // first: the sessions' on_end runs while the node and the system stop
  courier::system sys;
  net::node node{sys};
  endpoint where;

  session_server(endpoint at, const net::connection_config& cfg = {}, bool throw_on_second = false)
      : where(std::move(at)) {
    auto s = node.serve_sessions(
        [this, throw_on_second](const net::peer_info& peer, net::context_ref client) {
          if (throw_on_second && peer.id == 2) throw std::runtime_error("no second session today");
          auto calls = std::make_shared<std::int32_t>(0);
          auto services = std::make_shared<net::service_table>();
          services->add(courier::token("CNT_"), [calls](net::incoming& call) { call.reply().add(++*calls); });
          services->add(courier::token("WHO_"), [peer](net::incoming& call) {
            call.reply().add(std::string_view(peer.address)).add(static_cast<std::uint64_t>(peer.id));
          });
          services->add(courier::token("PUSH"), [client](net::incoming& call) {
            auto text = call.read<std::string_view>();
            if (text) (void)client.send(courier::token("PSH_"), net::args(*text));
          });
          services->add(courier::token("BYE_"), [client](net::incoming&) { (void)client.close(); });
          {
            std::lock_guard lock(log.mutex);
            log.started.push_back(peer);
            log.clients.push_back(client);
          }
          log.starts.fetch_add(1);
          net::session s;
          s.services = std::move(services);
          s.on_end = [this](const courier::error& why) {
            {
              std::lock_guard lock(log.mutex);
              log.ended.push_back(why.text);
            }
            log.ends.fetch_add(1);
          };
          s.own(sys.spawn<owned_probe>(log.owned_stopped));
          return s;
        },
        where, cfg);
    INFO((s ? std::string("serving") : s.err().describe()));
    REQUIRE(s);
    if (where.kind == courier::net::transport_kind::tcp) where.port = s->port;
  }

  // Lets go of the clients' refs the test kept (they hold the connections' actors, not their ends).
  void forget_clients() {
    std::lock_guard lock(log.mutex);
    log.clients.clear();
  }
};

// A client with a service for the server's pushes.
struct push_client {
  std::mutex mutex;  // first: a push may come while the node and the system stop
  std::vector<std::string> pushed;
  courier::system sys;
  net::node node{sys};
  net::context_ref parent;

  explicit push_client(const endpoint& where) {
    auto served = std::make_shared<net::service_table>();
    served->add(courier::token("PSH_"), [this](net::incoming& call) {
      auto text = call.read<std::string_view>();
      std::lock_guard lock(mutex);
      pushed.emplace_back(text ? std::string(*text) : std::string("<bad>"));
    });
    auto c = node.connect(where, {}, std::move(served));
    INFO((c ? std::string("connected") : c.err().describe()));
    REQUIRE(c);
    parent = *c;
  }
  std::size_t pushes() {
    std::lock_guard lock(mutex);
    return pushed.size();
  }
};

}  // namespace

TEST_CASE("each connection gets a session of its own: its state, its peer, its id", "[net][sessions]") {
  courier_test::watchdog wd("own sessions", 60s);
  each_transport("sessown", [](const endpoint& at) {
    session_server srv(at);
    push_client a(srv.where), b(srv.where);
    for (std::int32_t i = 1; i <= 3; ++i) {
      auto ra = a.parent.call_wait(courier::token("CNT_"), {}, 5s);
      REQUIRE(ra);
      CHECK(int_of(*ra) == i);
    }
    auto rb = b.parent.call_wait(courier::token("CNT_"), {}, 5s);
    REQUIRE(rb);
    CHECK(int_of(*rb) == 1);  // b's count is b's own

    auto who_a = a.parent.call_wait(courier::token("WHO_"), {}, 5s);
    auto who_b = b.parent.call_wait(courier::token("WHO_"), {}, 5s);
    REQUIRE(who_a);
    REQUIRE(who_b);
    auto ra_items = who_a->items();
    auto address = ra_items.read<std::string_view>();
    auto id_a = ra_items.read<std::uint64_t>();
    auto rb_items = who_b->items();
    (void)rb_items.read<std::string_view>();
    auto id_b = rb_items.read<std::uint64_t>();
    REQUIRE(address);
    REQUIRE(id_a);
    REQUIRE(id_b);
    CHECK(*id_a != *id_b);
    CHECK(*id_a >= 1);
    std::lock_guard lock(srv.log.mutex);
    REQUIRE(srv.log.started.size() == 2);
    for (const net::peer_info& p : srv.log.started) {
      CHECK(p.transport == at.kind);
      if (at.kind == courier::net::transport_kind::uds) {
        REQUIRE(p.credentials);
        CHECK(p.credentials->pid == ::getpid());  // both ends are this process
        CHECK(p.credentials->uid == ::getuid());
        CHECK(p.address == "pid " + std::to_string(::getpid()) + " uid " + std::to_string(::getuid()) + " gid " +
                               std::to_string(::getgid()));
      } else {
        CHECK_FALSE(p.credentials);
        CHECK(p.address.rfind("127.0.0.1:", 0) == 0);
      }
    }
    CHECK(std::string(*address) == srv.log.started[0].address);
  });
}

TEST_CASE("an endpoint that names a connection already accepted is served, its peer read as its transport's",
          "[net][sessions]") {
  courier_test::watchdog wd("accepted connection", 30s);
  each_transport("sessacc", [](const endpoint& at) {
    // What a --thread, --fork or --spawn session is given: the acceptor's endpoint, with the
    // connection it accepted there. The serve call serves that one connection and listens nowhere.
    auto listening = net::listen(at);
    REQUIRE(listening);
    endpoint dial = at;
    if (at.kind == courier::net::transport_kind::tcp) dial.port = listening->port();
    courier::system sys;
    net::node node(sys);
    net::connection_config no_wait;
    no_wait.wait_for_handshake = false;  // the server starts serving after the accept below
    auto client = node.connect(dial, no_wait);
    REQUIRE(client);
    auto accepted = listening->accept();
    for (int i = 0; !accepted && i < 400; ++i) {  // non-blocking: the connect may still be on its way
      std::this_thread::sleep_for(5ms);
      accepted = listening->accept();
    }
    REQUIRE(accepted);
    endpoint named = dial;
    named.descriptor = accepted->release();
    session_server srv(named);

    auto& parent = *client;
    auto counted = parent.call_wait(courier::token("CNT_"), {}, 5s);
    REQUIRE(counted);
    CHECK(int_of(*counted) == 1);
    std::lock_guard lock(srv.log.mutex);
    REQUIRE(srv.log.started.size() == 1);
    const net::peer_info& p = srv.log.started[0];
    CHECK(p.transport == at.kind);
    if (at.kind == courier::net::transport_kind::uds) {
      REQUIRE(p.credentials);
      CHECK(p.credentials->pid == ::getpid());
    } else {
      CHECK(p.address.rfind("127.0.0.1:", 0) == 0);
    }
  });
  // An endpoint of uds or tcp names no connection unless it has a descriptor.
  auto none = net::connection_socket(uds_at("sessnone"));
  REQUIRE_FALSE(none);
  CHECK(none.err() == courier::errc::invalid_argument);
}

TEST_CASE("a session pushes to its client, and hears why when the connection ends; its actors stop",
          "[net][sessions]") {
  courier_test::watchdog wd("push and end", 60s);
  each_transport("sesspush", [](const endpoint& at) {
    session_server srv(at);
    {
      push_client c(srv.where);
      // From a handler (the PUSH service sends to its caller's side) ...
      REQUIRE(c.parent.call_wait(courier::token("PUSH"), net::args(std::string_view("from a handler")), 5s));
      // ... and from outside, through the ref the factory got.
      net::context_ref client;
      {
        std::lock_guard lock(srv.log.mutex);
        REQUIRE(srv.log.clients.size() == 1);
        client = srv.log.clients[0];
      }
      REQUIRE(client.send(courier::token("PSH_"), net::args(std::string_view("from outside"))));
      REQUIRE(becomes([&] { return c.pushes() == 2; }));
      {
        std::lock_guard lock(c.mutex);
        CHECK(c.pushed[0] == "from a handler");
        CHECK(c.pushed[1] == "from outside");
      }
      CHECK(srv.log.ends.load() == 0);
      CHECK(srv.log.owned_stopped->load() == 0);
      REQUIRE(c.parent.close_wait(5s));
    }
    REQUIRE(becomes([&] { return srv.log.ends.load() == 1; }));
    REQUIRE(becomes([&] { return srv.log.owned_stopped->load() == 1; }));
    {
      std::lock_guard lock(srv.log.mutex);
      INFO(srv.log.ended[0]);
      CHECK(srv.log.ended[0].find("closed in order") != std::string::npos);
    }
    // A push to a session that has ended is refused at the call, not lost silently.
    net::context_ref gone;
    {
      std::lock_guard lock(srv.log.mutex);
      gone = srv.log.clients[0];
    }
    auto late = gone.call_wait(courier::token("PSH_"), net::args(std::string_view("late")), 2s);
    REQUIRE_FALSE(late);
    srv.forget_clients();
    REQUIRE(becomes([&] { return srv.node.connections() == 0; }));
  });
}

TEST_CASE("a session closes its own connection: the client finds it closed, the session hears it", "[net][sessions]") {
  courier_test::watchdog wd("session closes", 60s);
  each_transport("sessbye", [](const endpoint& at) {
    session_server srv(at);
    push_client c(srv.where);
    REQUIRE(c.parent.call_wait(courier::token("CNT_"), {}, 5s));
    (void)c.parent.call_wait(courier::token("BYE_"), {}, 5s);  // answered, or refused by the close
    REQUIRE(becomes([&] { return srv.log.ends.load() == 1; }));
    auto after = c.parent.call_wait(courier::token("CNT_"), {}, 5s);
    REQUIRE_FALSE(after);
    INFO(after.err().describe());
    CHECK(after.err().code == courier::errc::connection_lost);
    srv.forget_clients();
  });
}

TEST_CASE("sessions at most max_connections at once: one more is refused on the wire, with the reason",
          "[net][sessions][limits]") {
  courier_test::watchdog wd("max sessions", 60s);
  each_transport("sessmax", [](const endpoint& at) {
    net::connection_config cfg;
    cfg.max_connections = 2;
    session_server srv(at, cfg);
    push_client a(srv.where), b(srv.where);
    REQUIRE(a.parent.call_wait(courier::token("CNT_"), {}, 5s));
    REQUIRE(b.parent.call_wait(courier::token("CNT_"), {}, 5s));
    courier::system sys;
    net::node n(sys);
    auto refused = n.connect(srv.where);
    REQUIRE_FALSE(refused);
    INFO(refused.err().describe());
    CHECK(refused.err().text.find("too many connections") != std::string::npos);
    CHECK(srv.log.starts.load() == 2);  // the refused one never became a session
    REQUIRE(b.parent.close_wait(5s));
    REQUIRE(becomes([&] { return srv.log.ends.load() == 1; }));
    REQUIRE(becomes([&] {  // the slot is free once the connection is gone
      auto c = n.connect(srv.where);
      return c && c->call_wait(courier::token("CNT_"), {}, 5s);
    }));
    srv.forget_clients();
  });
}

TEST_CASE("an idle session is closed after idle_timeout, and told so; a busy one is not", "[net][sessions][idle]") {
  courier_test::watchdog wd("idle sessions", 60s);
  each_transport("sessidle", [](const endpoint& at) {
    net::connection_config cfg;
    cfg.idle_timeout = 300ms;
    session_server srv(at, cfg);
    push_client idle(srv.where), busy(srv.where);
    REQUIRE(idle.parent.call_wait(courier::token("CNT_"), {}, 5s));
    const auto until = std::chrono::steady_clock::now() + 900ms;
    while (std::chrono::steady_clock::now() < until) {  // three times the time-out, a call every 50 ms
      REQUIRE(busy.parent.call_wait(courier::token("CNT_"), {}, 5s));
      std::this_thread::sleep_for(50ms);
    }
    REQUIRE(becomes([&] { return srv.log.ends.load() == 1; }));
    {
      std::lock_guard lock(srv.log.mutex);
      INFO(srv.log.ended[0]);
      CHECK(srv.log.ended[0].find("idle for 300 ms") != std::string::npos);
    }
    CHECK_FALSE(idle.parent.call_wait(courier::token("CNT_"), {}, 5s));
    CHECK(busy.parent.call_wait(courier::token("CNT_"), {}, 5s));
    srv.forget_clients();
  });
}

TEST_CASE("a factory that throws ends that connection only", "[net][sessions]") {
  courier_test::watchdog wd("factory throws", 60s);
  each_transport("sessthrow", [](const endpoint& at) {
    session_server srv(at, {}, true);
    push_client first(srv.where);
    REQUIRE(first.parent.call_wait(courier::token("CNT_"), {}, 5s));
    {
      courier::system sys;
      net::node n(sys);
      auto second = n.connect(srv.where);
      if (second) CHECK_FALSE(second->call_wait(courier::token("CNT_"), {}, 5s));  // it never gets a session
    }
    push_client third(srv.where);
    REQUIRE(third.parent.call_wait(courier::token("CNT_"), {}, 5s));
    REQUIRE(first.parent.call_wait(courier::token("CNT_"), {}, 5s));
    CHECK(srv.log.starts.load() == 2);
    REQUIRE(becomes([&] { return srv.node.connections() == 2; }));
    srv.forget_clients();
  });
}

namespace {

// Room for 500 sessions at once in one process: each is two descriptors (both ends are here).
void allow_descriptors(rlim_t wanted) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= wanted) return;
  lim.rlim_cur = lim.rlim_max < wanted ? lim.rlim_max : wanted;
  (void)::setrlimit(RLIMIT_NOFILE, &lim);
}

}  // namespace

TEST_CASE("10,000 sessions opened and closed in sequence and 500 at once: nothing left behind, no freeze",
          "[net][sessions][.mass]") {
  courier_test::watchdog wd("mass sessions", 240s);
#if defined(COURIER_TEST_TSAN) || defined(__SANITIZE_ADDRESS__)
  constexpr int sequential = 1'000;  // the sanitizers slow each connection; the full count runs in Release
  constexpr int at_once = 100;
#else
  constexpr int sequential = 10'000;
  constexpr int at_once = 500;
#endif
  allow_descriptors(4 * at_once + 256);
  each_transport("sessmass", [&](const endpoint& at) {
    session_server srv(at);
    courier::system sys;
    net::node client(sys);
    auto one = [&]() {
      auto c = client.connect(srv.where);
      if (!c) return false;
      auto r = c->call_wait(courier::token("CNT_"), {}, 5s);
      return r && int_of(*r) == 1 && c->close_wait(5s);
    };
    for (int i = 0; i < 100; ++i) REQUIRE(one());  // warm: pool slots, blocks
    REQUIRE(becomes([&] { return srv.log.ends.load() == 100; }));
    srv.forget_clients();
    REQUIRE(becomes([&] { return srv.node.connections() == 0 && client.connections() == 0; }));
    const int fds = courier_test::open_descriptors();
    const std::string fds_before = courier_test::descriptor_list();
    const int threads = courier_test::thread_count();
    const auto chunks = courier::pool::stats().chunks_allocated;

    int failures = 0;
    for (int i = 0; i < sequential; ++i) {
      failures += one() ? 0 : 1;
      if (i % 1000 == 999) srv.forget_clients();
    }
    CHECK(failures == 0);
    REQUIRE(becomes([&] { return srv.log.ends.load() == 100 + sequential; }));

    std::vector<net::context_ref> open;
    for (int i = 0; i < at_once; ++i) {
      auto c = client.connect(srv.where);
      INFO("connection " << i << ": " << (c ? std::string("ok") : c.err().describe()));
      REQUIRE(c);
      open.push_back(*c);
    }
    REQUIRE(becomes([&] { return srv.log.starts.load() == 100 + sequential + at_once; }));
    std::vector<courier::request_handle<net::detail::context_calls, net::detail::dynamic_call>> calls;
    std::atomic<int> answered{0}, wrong{0};
    for (const net::context_ref& c : open)
      c.call(courier::token("CNT_"), {}, 10s)
          .then([&](const courier::wire::items_ref& r) { (int_of(r) == 1 ? answered : wrong).fetch_add(1); },
                [&](const courier::error&) { wrong.fetch_add(1); });
    REQUIRE(becomes([&] { return answered.load() + wrong.load() == at_once; }, 30s));
    CHECK(wrong.load() == 0);
    for (const net::context_ref& c : open) (void)c.close();
    open.clear();
    REQUIRE(becomes([&] { return srv.log.ends.load() == 100 + sequential + at_once; }, 30s));
    // Each session's owned actor is stopped after its on_end (a stop runs in the actor's next turn).
    CHECK(becomes([&] { return srv.log.owned_stopped->load() == 100 + sequential + at_once; }));
    srv.forget_clients();
    REQUIRE(becomes([&] { return srv.node.connections() == 0 && client.connections() == 0; }, 30s));

    INFO("descriptors before:\n" << fds_before << "after:\n" << courier_test::descriptor_list());
    CHECK(becomes([&] { return courier_test::open_descriptors() == fds; }));
    CHECK(courier_test::thread_count_settled(threads) == threads);
    // Pool memory: what the sessions open at once take (500 connections' records and blocks come
    // from chunks of 64 KiB), not what 10,000 in sequence would.
    const auto grown = courier::pool::stats().chunks_allocated - chunks;
    INFO("pool chunks allocated during the run: " << grown);
    CHECK(grown <= 32 + at_once / 4);  // 76 for 500 at once, on both transports
    // Still serving.
    push_client last(srv.where);
    CHECK(last.parent.call_wait(courier::token("CNT_"), {}, 5s));
    srv.forget_clients();
  });
}
