// caf_peer.cpp -- CAF 0.17 implementation of the courier-bench peer workloads.
// See caf_peer.hpp for the exact definition of each workload.
#include "caf_peer.hpp"

#include "bench_util.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <cstdint>
#include <iostream>
#include <thread>
#include <vector>

namespace courier_bench::caf_peer {

namespace {

using clock_type = std::chrono::steady_clock;

using go_atom = caf::atom_constant<caf::atom("go")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using ok_atom = caf::atom_constant<caf::atom("ok")>;

std::atomic<std::int64_t> g_timeout_ms{120000};

struct peer_config : caf::actor_system_config {
  peer_config() {
    auto hc = std::thread::hardware_concurrency();
    if (hc == 0) hc = 1;
    set("scheduler.max-threads", static_cast<std::int64_t>(hc));
  }
};

// Shared between the timing thread and the actor that handles the last message.
struct finish_line {
  std::atomic<clock_type::rep> end{0};
  // The scoped_actor waiting for done_atom. A weak reference on purpose: this
  // struct outlives the actor system, and a strong handle must not.
  caf::actor_addr main;

  template <class Self>
  void finish(Self* self) {
    end.store(clock_type::now().time_since_epoch().count(), std::memory_order_relaxed);
    if (auto m = caf::actor_cast<caf::actor>(main)) self->send(m, done_atom::value);
  }

  double seconds_since(clock_type::time_point t0) const {
    auto e = clock_type::time_point{clock_type::duration{end.load(std::memory_order_relaxed)}};
    return std::chrono::duration<double>(e - t0).count();
  }
};

/// Blocks until done_atom arrives or the timeout expires; on timeout prints a
/// warning and kills `actors`.
bool await_done(caf::scoped_actor& self, const char* what, const std::vector<caf::actor>& actors) {
  bool ok = false;
  auto ms = g_timeout_ms.load(std::memory_order_relaxed);
  self->receive([&](done_atom) { ok = true; }, caf::after(std::chrono::milliseconds{ms}) >> [] {});
  if (!ok) {
    std::cerr << "caf_peer: WARNING: " << what << " timed out after " << ms << " ms; reporting 0 ops/s\n";
    for (auto& a : actors)
      if (a) caf::anon_send_exit(a, caf::exit_reason::kill);
  }
  return ok;
}

void shutdown_all(const std::vector<caf::actor>& actors) {
  for (auto& a : actors)
    if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

double rate(std::size_t ops, double secs) { return secs > 0 ? static_cast<double>(ops) / secs : 0.0; }

// -- W1 -----------------------------------------------------------------------

struct counter_state {
  std::size_t count = 0;
};

caf::behavior self_sender(caf::stateful_actor<counter_state>* self, std::size_t n, finish_line* fl) {
  return {
      [=](go_atom) { self->send(self, 0); },
      [=](int x) {
        if (++self->state.count == n) {
          fl->finish(self);
          self->quit();
        } else {
          self->send(self, (x + 1) & 0x3fffffff);
        }
      },
  };
}

// -- W2 -----------------------------------------------------------------------

caf::behavior pong(caf::event_based_actor*) {
  return {
      [](int x) { return x; },  // reply goes to the sender (ping)
  };
}

caf::behavior ping(caf::stateful_actor<counter_state>* self, caf::actor buddy, std::size_t n, finish_line* fl) {
  return {
      [=](go_atom) { self->send(buddy, 0); },
      [=](int x) {
        if (++self->state.count == n) {
          fl->finish(self);
          self->quit();
        } else {
          self->send(buddy, (x + 1) & 0x3fffffff);
        }
      },
  };
}

// -- W3 -----------------------------------------------------------------------

caf::behavior fan_in_receiver(caf::stateful_actor<counter_state>* self, std::size_t total, finish_line* fl) {
  return {
      [=](int) {
        if (++self->state.count == total) {
          fl->finish(self);
          self->quit();
        }
      },
  };
}

caf::behavior fan_in_sender(caf::event_based_actor* self, caf::actor receiver, std::size_t per_sender) {
  return {
      [=](go_atom) {
        for (std::size_t i = 0; i < per_sender; ++i) self->send(receiver, static_cast<int>(i & 0x3fffffff));
        self->quit();
      },
  };
}

// -- W4 -----------------------------------------------------------------------

struct spawn_state {
  std::atomic<std::size_t> remaining;
  finish_line fl;
};

caf::behavior one_shot(caf::event_based_actor* self, spawn_state* st) {
  return {
      [=](int) {
        if (st->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) st->fl.finish(self);
        self->quit();
      },
  };
}

// -- W5 -----------------------------------------------------------------------

struct ring_state {
  caf::actor next;
};

caf::behavior ring_node(caf::stateful_actor<ring_state>* self, finish_line* fl) {
  return {
      [=](caf::actor& next) {
        self->state.next = std::move(next);
        return ok_atom::value;
      },
      [=](std::int64_t token) {
        if (token == 0)
          fl->finish(self);
        else
          self->send(self->state.next, token - 1);
      },
  };
}

// -- W8 -----------------------------------------------------------------------

caf::behavior w8_server(caf::event_based_actor*) {
  return {
      [](std::int64_t x) { return x + 1; },
  };
}

void w8_next(caf::stateful_actor<counter_state>* self, caf::actor server, std::size_t n, finish_line* fl) {
  if (self->state.count == n) {
    fl->finish(self);
    self->quit();
    return;
  }
  ++self->state.count;
  self->request(server, std::chrono::seconds(1), static_cast<std::int64_t>(self->state.count)).then([=](std::int64_t) {
    w8_next(self, server, n, fl);
  });
}

caf::behavior w8_client(caf::stateful_actor<counter_state>* self, caf::actor server, std::size_t n, finish_line* fl) {
  return {
      [=](go_atom) { w8_next(self, server, n, fl); },
  };
}

}  // namespace

void set_timeout(std::chrono::milliseconds timeout) { g_timeout_ms.store(timeout.count(), std::memory_order_relaxed); }

result w1_self_send(std::size_t n) {
  if (n == 0) return {0};
  finish_line fl;  // outlives the actor system
  peer_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  fl.main = self->address();
  auto a = sys.spawn(self_sender, n, &fl);
  auto t0 = clock_type::now();
  self->send(a, go_atom::value);
  if (!await_done(self, "W1 self-send", {a})) return {0};
  return {rate(n, fl.seconds_since(t0))};
}

result w2_ping_pong(std::size_t n) {
  if (n == 0) return {0};
  finish_line fl;
  peer_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  fl.main = self->address();
  auto po = sys.spawn(pong);
  auto pi = sys.spawn(ping, po, n, &fl);
  auto t0 = clock_type::now();
  self->send(pi, go_atom::value);
  if (!await_done(self, "W2 ping-pong", {pi, po})) return {0};
  auto r = rate(n, fl.seconds_since(t0));
  shutdown_all({po});
  return {r};
}

result w3_fan_in(std::size_t per_sender, std::size_t senders) {
  auto total = per_sender * senders;
  if (total == 0) return {0};
  finish_line fl;
  peer_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  fl.main = self->address();
  auto rx = sys.spawn(fan_in_receiver, total, &fl);
  std::vector<caf::actor> all;
  all.push_back(rx);
  for (std::size_t i = 0; i < senders; ++i) all.push_back(sys.spawn(fan_in_sender, rx, per_sender));
  auto t0 = clock_type::now();
  for (std::size_t i = 1; i < all.size(); ++i) self->send(all[i], go_atom::value);
  if (!await_done(self, "W3 fan-in", all)) return {0};
  return {rate(total, fl.seconds_since(t0))};
}

result w4_spawn(std::size_t n) {
  if (n == 0) return {0};
  spawn_state st;
  st.remaining.store(n);
  peer_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  st.fl.main = self->address();
  std::vector<caf::actor> actors;
  actors.reserve(n);  // allocated before the baseline is taken
  auto base = live_bytes();
  reset_peak();
  auto t0 = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) actors.push_back(sys.spawn(one_shot, &st));
  for (auto& a : actors) {
    self->send(a, 1);
    a = nullptr;  // drop our strong reference so the actor can be freed
  }
  if (!await_done(self, "W4 spawn", actors)) return {0};
  auto peak = peak_live_bytes();
  result r{rate(n, st.fl.seconds_since(t0))};
  r.bytes_per_actor = peak > base ? static_cast<double>(peak - base) / static_cast<double>(n) : 0.0;
  return r;
}

result w5_ring(std::size_t actors, std::size_t hops) {
  if (actors == 0 || hops == 0) return {0};
  finish_line fl;
  peer_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  fl.main = self->address();
  std::vector<caf::actor> ring;
  ring.reserve(actors);
  for (std::size_t i = 0; i < actors; ++i) ring.push_back(sys.spawn(ring_node, &fl));
  // Wire the ring synchronously (untimed) so no token can overtake the setup.
  bool wired = true;
  for (std::size_t i = 0; i < actors && wired; ++i)
    self->request(ring[i], std::chrono::seconds{10}, ring[(i + 1) % actors])
        .receive([](ok_atom) {}, [&](caf::error&) { wired = false; });
  if (!wired) {
    std::cerr << "caf_peer: WARNING: W5 ring setup failed; reporting 0\n";
    shutdown_all(ring);
    return {0};
  }
  auto t0 = clock_type::now();
  // The first send injects the token; `hops` actor-to-actor forwards follow.
  self->send(ring[0], static_cast<std::int64_t>(hops));
  if (!await_done(self, "W5 ring", ring)) return {0};
  auto r = rate(hops, fl.seconds_since(t0));
  shutdown_all(ring);  // the ring is a reference cycle: break it explicitly
  return {r};
}

}  // namespace courier_bench::caf_peer

namespace courier_bench::caf_peer {

result w8_request_timeout(std::size_t n) {
  if (n == 0) return {0};
  finish_line fl;
  peer_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  fl.main = self->address();
  auto server = sys.spawn(w8_server);
  auto client = sys.spawn(w8_client, server, n, &fl);
  auto t0 = clock_type::now();
  self->send(client, go_atom::value);
  if (!await_done(self, "W8 request-timeout", {client, server})) return {0};
  auto r = rate(n, fl.seconds_since(t0));
  shutdown_all({server});
  return {r};
}

}  // namespace courier_bench::caf_peer
