#include "courier/net/detail/reactor.hpp"

#include <poll.h>

#include <atomic>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "net_test_util.hpp"
#include "watchdog.hpp"

using courier::net::detail::reactor;
using namespace std::chrono_literals;

namespace {

/// Counts its events and drains what is readable, so level-triggered readiness ends.
struct recorder final : courier::net::detail::io_handler {
  const courier::net::socket* sock = nullptr;
  int calls = 0;
  std::uint32_t last = 0;
  bool drain = true;
  std::function<void()> also;
  void on_io(std::uint32_t events) noexcept override {
    ++calls;
    last = events;
    if (drain && sock) {
      std::byte buffer[256];
      while (courier::net::read_some(*sock, buffer).status == courier::net::io_result::ok) {
      }
    }
    if (also) also();
  }
};

void send_byte(const courier::net::socket& s) { REQUIRE(courier_test::write_all(s, "x")); }

}  // namespace

TEST_CASE("reactor: dispatches readiness to the handler of the descriptor") {
  courier_test::watchdog wd{"reactor dispatch", 20s};
  reactor r;
  auto p1 = courier::net::socket_pair();
  auto p2 = courier::net::socket_pair();
  REQUIRE(p1);
  REQUIRE(p2);
  recorder h1, h2;
  h1.sock = &p1->second;
  h2.sock = &p2->second;
  REQUIRE(r.add(p1->second.fd(), EPOLLIN, &h1));
  REQUIRE(r.add(p2->second.fd(), EPOLLIN, &h2));
  CHECK(r.watched() == 2);

  CHECK(r.run_once(0) == 0);  // nothing ready
  send_byte(p1->first);
  CHECK(r.run_once(1000) == 1);
  CHECK(h1.calls == 1);
  CHECK((h1.last & EPOLLIN) != 0);
  CHECK(h2.calls == 0);

  send_byte(p1->first);
  send_byte(p2->first);
  CHECK(courier_test::eventually([&] { return r.run_once(100) > 0 && h1.calls == 2 && h2.calls == 1; }, 2s));
}

TEST_CASE("reactor: level-triggered: unread data is reported again") {
  courier_test::watchdog wd{"reactor level", 20s};
  reactor r;
  auto p = courier::net::socket_pair();
  REQUIRE(p);
  recorder h;
  h.drain = false;
  REQUIRE(r.add(p->second.fd(), EPOLLIN, &h));
  send_byte(p->first);
  CHECK(r.run_once(1000) == 1);
  CHECK(r.run_once(1000) == 1);
  CHECK(h.calls == 2);
}

TEST_CASE("reactor: modify switches events; remove stops them; add twice is an error") {
  courier_test::watchdog wd{"reactor modify", 20s};
  reactor r;
  auto p = courier::net::socket_pair();
  REQUIRE(p);
  recorder h;
  h.sock = &p->first;
  REQUIRE(r.add(p->first.fd(), EPOLLIN, &h));
  CHECK(r.run_once(0) == 0);
  REQUIRE(r.modify(p->first.fd(), EPOLLOUT, &h));  // an empty socket buffer: writable at once
  CHECK(r.run_once(1000) == 1);
  CHECK((h.last & EPOLLOUT) != 0);
  auto twice = r.add(p->first.fd(), EPOLLIN, &h);
  CHECK_FALSE(twice);
  r.remove(p->first.fd());
  r.remove(p->first.fd());  // a no-op
  CHECK(r.watched() == 0);
  CHECK(r.run_once(0) == 0);
  CHECK_FALSE(r.modify(p->first.fd(), EPOLLIN, &h));
  CHECK_FALSE(r.add(-1, EPOLLIN, &h));
}

TEST_CASE("reactor: modify_events and report act under a registration's tag, never a removed one's") {
  courier_test::watchdog wd{"reactor modify_events", 20s};
  reactor r;
  auto p = courier::net::socket_pair();
  REQUIRE(p);
  recorder h;
  h.sock = &p->second;
  CHECK(r.registration_tag(p->second.fd()) == 0);  // not watched
  REQUIRE(r.add(p->second.fd(), EPOLLIN | EPOLLET, &h));
  const std::uint64_t tag = r.registration_tag(p->second.fd());
  CHECK(tag != 0);
  REQUIRE(r.modify_events(p->second.fd(), tag, EPOLLET));  // out: arrivals are not reported
  send_byte(p->first);
  CHECK(r.run_once(50) == 0);
  CHECK(h.calls == 0);
  REQUIRE(r.modify_events(p->second.fd(), tag, EPOLLIN | EPOLLET));  // back: what arrived is reported
  CHECK(r.run_once(1000) == 1);
  CHECK(h.calls == 1);
  // report: the handler as run_once would call it, without asking epoll (nothing arrived now).
  CHECK(r.report(tag, EPOLLIN) == 1);
  CHECK(h.calls == 2);
  CHECK(h.last == EPOLLIN);
  CHECK(r.report(0, EPOLLIN) == 0);
  CHECK(r.report(tag + (std::uint64_t{1} << 32), EPOLLIN) == 0);  // another generation
  r.remove(p->second.fd());
  CHECK_FALSE(r.modify_events(p->second.fd(), tag, EPOLLIN));  // no longer watched: epoll refuses
  CHECK(r.report(tag, EPOLLIN) == 0);                          // nor is its handler called again
  REQUIRE(r.add(p->second.fd(), EPOLLIN | EPOLLET, &h));
  CHECK(r.report(tag, EPOLLIN) == 0);  // watched again: a new tag
  CHECK(r.report(r.registration_tag(p->second.fd()), EPOLLIN) == 1);
  CHECK(h.calls == 3);
}

TEST_CASE("reactor: a handler that removes another one in the same round stops its event") {
  courier_test::watchdog wd{"reactor remove in round", 20s};
  reactor r;
  auto p1 = courier::net::socket_pair();
  auto p2 = courier::net::socket_pair();
  REQUIRE(p1);
  REQUIRE(p2);
  recorder h1, h2;
  h1.sock = &p1->second;
  h2.sock = &p2->second;
  // Whichever runs first removes the other, as a connection that closes a peer connection would.
  h1.also = [&] { r.remove(p2->second.fd()); };
  h2.also = [&] { r.remove(p1->second.fd()); };
  REQUIRE(r.add(p1->second.fd(), EPOLLIN, &h1));
  REQUIRE(r.add(p2->second.fd(), EPOLLIN, &h2));
  send_byte(p1->first);
  send_byte(p2->first);
  REQUIRE(courier_test::wait_for(p1->second.fd(), POLLIN));
  REQUIRE(courier_test::wait_for(p2->second.fd(), POLLIN));
  CHECK(r.run_once(1000) == 1);
  CHECK(h1.calls + h2.calls == 1);
}

TEST_CASE("reactor: an event collected for a descriptor number that was removed and reused is skipped") {
  courier_test::watchdog wd{"reactor fd reuse", 20s};
  reactor r;
  auto p1 = courier::net::socket_pair();
  auto p2 = courier::net::socket_pair();
  REQUIRE(p1);
  REQUIRE(p2);
  recorder h1, h2, newcomer;
  h1.sock = &p1->second;
  h2.sock = &p2->second;
  std::optional<std::pair<courier::net::socket, courier::net::socket>> replacement;
  int reused_fd = -1;
  // Whichever handler runs first closes the other's socket and registers a new one, which gets the
  // lowest free descriptor number: the one just closed. The old event for that number is stale.
  auto swap_out = [&](courier::net::socket& victim) {
    reused_fd = victim.fd();
    r.remove(victim.fd());
    victim.close();
    auto fresh = courier::net::socket_pair();
    REQUIRE(fresh);
    replacement.emplace(std::move(*fresh));
    newcomer.drain = false;
    REQUIRE(r.add(replacement->first.fd(), EPOLLIN | EPOLLOUT, &newcomer));
  };
  h1.also = [&] {
    if (!replacement) swap_out(p2->second);
  };
  h2.also = [&] {
    if (!replacement) swap_out(p1->second);
  };
  REQUIRE(r.add(p1->second.fd(), EPOLLIN, &h1));
  REQUIRE(r.add(p2->second.fd(), EPOLLIN, &h2));
  send_byte(p1->first);
  send_byte(p2->first);
  REQUIRE(courier_test::wait_for(p1->second.fd(), POLLIN));
  REQUIRE(courier_test::wait_for(p2->second.fd(), POLLIN));
  CHECK(r.run_once(1000) == 1);
  REQUIRE(replacement);
  CHECK(replacement->first.fd() == reused_fd);
  CHECK(newcomer.calls == 0);
  CHECK(r.run_once(1000) == 1);  // the newcomer's own readiness (writable) comes in the next round
  CHECK(newcomer.calls == 1);
}

TEST_CASE("reactor: the epoll descriptor is pollable by a host loop") {
  courier_test::watchdog wd{"reactor pollable", 20s};
  reactor r;
  auto p = courier::net::socket_pair();
  REQUIRE(p);
  recorder h;
  h.sock = &p->second;
  REQUIRE(r.add(p->second.fd(), EPOLLIN, &h));
  CHECK_FALSE(courier_test::wait_for(r.fd(), POLLIN, 0ms));
  send_byte(p->first);
  CHECK(courier_test::wait_for(r.fd(), POLLIN, 1s));
  CHECK(r.run_once(0) == 1);
}

TEST_CASE("reactor: wake() from another thread ends a blocked run_once") {
  courier_test::watchdog wd{"reactor wake", 20s};
  reactor r;
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    CHECK(r.run_once(-1) == 0);
    returned = true;
  });
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(returned.load());
  r.wake();
  waiter.join();
  CHECK(returned.load());
  // Several wakes before a round collapse into one return, and the next round blocks again.
  r.wake();
  r.wake();
  CHECK(r.run_once(1000) == 0);
  const auto before = std::chrono::steady_clock::now();
  CHECK(r.run_once(50) == 0);
  CHECK(std::chrono::steady_clock::now() - before >= 40ms);
}

TEST_CASE("reactor_thread: runs handlers on its own thread until stopped") {
  courier_test::watchdog wd{"reactor_thread", 20s};
  auto p = courier::net::socket_pair();
  REQUIRE(p);
  std::atomic<int> calls{0};
  std::atomic<bool> on_loop_thread{false};
  struct counting final : courier::net::detail::io_handler {
    const courier::net::socket* sock;
    std::atomic<int>* calls;
    std::atomic<bool>* on_loop_thread;
    std::thread::id loop;
    void on_io(std::uint32_t) noexcept override {
      std::byte buffer[64];
      while (courier::net::read_some(*sock, buffer).status == courier::net::io_result::ok) {
      }
      on_loop_thread->store(std::this_thread::get_id() == loop);
      calls->fetch_add(1);
    }
  } h;
  courier::net::detail::reactor_thread loop;
  h.sock = &p->second;
  h.calls = &calls;
  h.on_loop_thread = &on_loop_thread;
  h.loop = loop.thread_id();
  REQUIRE(loop.get().add(p->second.fd(), EPOLLIN, &h));  // from this thread, while the loop waits
  for (int i = 0; i < 5; ++i) {
    send_byte(p->first);
    CHECK(courier_test::eventually([&] { return calls.load() == i + 1; }, 5s));
  }
  CHECK(on_loop_thread.load());
  loop.get().remove(p->second.fd());
  loop.stop();
  loop.stop();
}
