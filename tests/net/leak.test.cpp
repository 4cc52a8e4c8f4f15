// 1,000 connections opened and closed over each listening transport, and 50 pipe children started and
// reaped, leave this process's descriptor and thread counts where they were.
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "courier/net/detail/reactor.hpp"
#include "courier/net/transport.hpp"
#include "net_test_util.hpp"
#include "watchdog.hpp"

using courier::net::endpoint;
using courier::net::transport_kind;
using namespace std::chrono_literals;

namespace {

void cycle(const endpoint& where, int rounds) {
  auto l = courier::net::listen(where);
  REQUIRE(l);
  endpoint target = where;
  if (where.kind == transport_kind::tcp) target.port = l->port();
  courier::net::detail::reactor r;  // the accepted sockets pass through a reactor, as a server's do
  struct nothing final : courier::net::detail::io_handler {
    void on_io(std::uint32_t) noexcept override {}
  } h;
  const int fds_before = courier_test::open_descriptors();
  const auto threads_before = courier_test::thread_ids();
  for (int i = 0; i < rounds; ++i) {
    auto c = courier::net::connect(target, 2s);
    REQUIRE(c);
    REQUIRE(courier_test::wait_for(l->fd(), POLLIN));
    auto s = l->accept();
    REQUIRE(s);
    REQUIRE(r.add(s->fd(), EPOLLIN, &h));
    r.remove(s->fd());
    if (i % 2) c->sock.close();  // either side closes first
  }
  CHECK(courier_test::open_descriptors() == fds_before);
  CHECK(courier_test::threads_added(threads_before) == 0);
  CHECK(r.watched() == 0);
}

}  // namespace

TEST_CASE("leak: 1,000 uds connections") {
  courier_test::watchdog wd{"leak uds", 60s};
  endpoint where;
  where.kind = transport_kind::uds;
  where.file = courier_test::temp_socket_path("leak");
  cycle(where, 1000);
}

TEST_CASE("leak: 1,000 tcp connections") {
  courier_test::watchdog wd{"leak tcp", 60s};
  endpoint where;
  where.kind = transport_kind::tcp;
  where.host = "127.0.0.1";
  cycle(where, 1000);
}

TEST_CASE("leak: reactors and reactor threads") {
  courier_test::watchdog wd{"leak reactor", 60s};
  const int fds_before = courier_test::open_descriptors();
  const auto threads_before = courier_test::thread_ids();
  for (int i = 0; i < 100; ++i) {
    courier::net::detail::reactor_thread loop;
    loop.get().wake();
  }
  CHECK(courier_test::open_descriptors() == fds_before);
  CHECK(courier_test::threads_added(threads_before) == 0);
}

TEST_CASE("leak: 50 pipe servers started, echoed through and reaped") {
  courier_test::watchdog wd{"leak pipe", 60s};
  endpoint where;
  where.command = {COURIER_TEST_PIPE_ECHO, "0"};
  const int fds_before = courier_test::open_descriptors();
  const auto threads_before = courier_test::thread_ids();
  for (int i = 0; i < 50; ++i) {
    auto c = courier::net::connect(where, 2s);
    REQUIRE(c);
    REQUIRE(courier_test::write_all(c->sock, "x"));
    REQUIRE(courier_test::read_exactly(c->sock, 1) == "x");
    c->sock.close();
    REQUIRE(c->child->wait(5s) == 0);
  }
  CHECK(courier_test::open_descriptors() == fds_before);
  CHECK(courier_test::threads_added(threads_before) == 0);
  // No zombie is left: every child was reaped.
  CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);
}
