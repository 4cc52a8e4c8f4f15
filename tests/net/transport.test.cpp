#include "courier/net/transport.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "net_test_util.hpp"
#include "watchdog.hpp"

using courier::net::endpoint;
using courier::net::transport_kind;
using namespace std::chrono_literals;

namespace {

endpoint uds_at(const std::string& file) {
  endpoint where;
  where.kind = transport_kind::uds;
  where.file = file;
  return where;
}

endpoint tcp_at(const std::string& host, std::uint16_t port) {
  endpoint where;
  where.kind = transport_kind::tcp;
  where.host = host;
  where.port = port;
  return where;
}

endpoint pipe_to(std::vector<std::string> command) {
  endpoint where;
  where.command = std::move(command);
  return where;
}

/// Accepts one connection, waiting up to a few seconds for it.
courier::net::socket accept_one(courier::net::listener& l) {
  for (int tries = 0; tries < 500; ++tries) {
    auto accepted = l.accept();
    if (accepted) return std::move(*accepted);
    REQUIRE(courier::net::would_block(accepted.err()));
    courier_test::wait_for(l.fd(), POLLIN, 10ms);
  }
  FAIL("no connection arrived");
  return {};
}

/// Both ends of a fresh connection carry bytes both ways.
void check_echo(const courier::net::socket& a, const courier::net::socket& b) {
  REQUIRE(courier_test::write_all(a, "ping"));
  CHECK(courier_test::read_exactly(b, 4) == "ping");
  REQUIRE(courier_test::write_all(b, "pong!"));
  CHECK(courier_test::read_exactly(a, 5) == "pong!");
}

bool no_delay(int fd) {
  int on = 0;
  socklen_t size = sizeof on;
  return ::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &size) == 0 && on != 0;
}

/// A socket file left behind by a server that died: bound, then closed without unlinking.
void leave_stale_socket_file(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  ::close(fd);
}

}  // namespace

TEST_CASE("uds: listen, connect, accept; the file is owner-only and removed with the listener") {
  courier_test::watchdog wd{"uds basic", 20s};
  const std::string path = courier_test::temp_socket_path("basic");
  {
    auto l = courier::net::listen(uds_at(path));
    REQUIRE(l);
    CHECK(l->describe() == "uds " + path);
    CHECK(l->port() == 0);
    CHECK(courier_test::nonblocking_and_cloexec(l->fd()));
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 0777) == 0600);

    auto none = l->accept();
    REQUIRE_FALSE(none);
    CHECK(courier::net::would_block(none.err()));

    auto c = courier::net::connect(uds_at(path), 2s);
    REQUIRE(c);
    CHECK_FALSE(c->child);
    CHECK(courier_test::nonblocking_and_cloexec(c->sock.fd()));
    auto s = accept_one(*l);
    CHECK(courier_test::nonblocking_and_cloexec(s.fd()));
    check_echo(c->sock, s);
  }
  CHECK(::access(path.c_str(), F_OK) != 0);
}

TEST_CASE("uds: file_mode widens the permissions when asked") {
  const std::string path = courier_test::temp_socket_path("mode");
  endpoint where = uds_at(path);
  where.file_mode = 0660;
  auto l = courier::net::listen(where);
  REQUIRE(l);
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0660);
}

TEST_CASE("uds: a stale file from a dead server is replaced; a live server's file is refused") {
  courier_test::watchdog wd{"uds stale/live", 20s};
  const std::string path = courier_test::temp_socket_path("stale");
  leave_stale_socket_file(path);
  REQUIRE(::access(path.c_str(), F_OK) == 0);
  auto first = courier::net::listen(uds_at(path));
  REQUIRE(first);

  auto second = courier::net::listen(uds_at(path));
  REQUIRE_FALSE(second);
  CHECK(second.err().text == "uds " + path + ": another server is listening");
  CHECK(second.err().code == std::errc::address_in_use);
  // The refused second server must not have removed the first one's file.
  CHECK(::access(path.c_str(), F_OK) == 0);
  // The liveness probe was a connection: the first server sees it end at once, as any server must
  // be ready to see from a client that gives up.
  auto probe = accept_one(*first);
  REQUIRE(courier_test::wait_for(probe.fd(), POLLIN));
  std::byte buffer[8];
  CHECK(courier::net::read_some(probe, buffer).status == courier::net::io_result::eof);
  auto c = courier::net::connect(uds_at(path), 2s);
  REQUIRE(c);
  auto s = accept_one(*first);
  check_echo(c->sock, s);
}

TEST_CASE("uds: a file that is not a socket is never replaced") {
  const std::string path = courier_test::temp_socket_path("regular");
  { std::ofstream(path) << "precious"; }
  auto l = courier::net::listen(uds_at(path));
  REQUIRE_FALSE(l);
  CHECK(l.err().text.find("not a socket") != std::string::npos);
  std::string content;
  std::ifstream(path) >> content;
  CHECK(content == "precious");
  ::unlink(path.c_str());
}

TEST_CASE("uds: the listener removes only its own file") {
  const std::string path = courier_test::temp_socket_path("own");
  auto l = courier::net::listen(uds_at(path));
  REQUIRE(l);
  // Someone replaced the file (a second server after removing ours): our destructor leaves theirs.
  ::unlink(path.c_str());
  leave_stale_socket_file(path);
  l->close();
  CHECK(::access(path.c_str(), F_OK) == 0);
  ::unlink(path.c_str());
}

TEST_CASE("uds: errors name the endpoint") {
  auto missing = courier::net::connect(uds_at("/tmp/courier-net-test-no-such.sock"), 1s);
  REQUIRE_FALSE(missing);
  CHECK(missing.err().code == std::errc::no_such_file_or_directory);
  CHECK(missing.err().text == "connect uds /tmp/courier-net-test-no-such.sock");

  auto too_long = courier::net::listen(uds_at("/tmp/" + std::string(200, 'x')));
  REQUIRE_FALSE(too_long);
  CHECK(too_long.err() == courier::errc::invalid_argument);

  auto empty = courier::net::listen(uds_at(""));
  REQUIRE_FALSE(empty);
  CHECK(empty.err() == courier::errc::invalid_argument);
}

TEST_CASE("tcp: port 0 gives a real port; NODELAY on both ends; IPv4") {
  courier_test::watchdog wd{"tcp ipv4", 20s};
  auto l = courier::net::listen(tcp_at("127.0.0.1", 0));
  REQUIRE(l);
  REQUIRE(l->port() != 0);
  CHECK(l->describe() == "tcp 127.0.0.1:" + std::to_string(l->port()));
  auto c = courier::net::connect(tcp_at("127.0.0.1", l->port()), 2s);
  REQUIRE(c);
  auto s = accept_one(*l);
  CHECK(no_delay(c->sock.fd()));
  CHECK(no_delay(s.fd()));
  CHECK(courier_test::nonblocking_and_cloexec(c->sock.fd()));
  CHECK(courier_test::nonblocking_and_cloexec(s.fd()));
  check_echo(c->sock, s);
}

TEST_CASE("tcp: IPv6 loopback") {
  courier_test::watchdog wd{"tcp ipv6", 20s};
  auto l = courier::net::listen(tcp_at("::1", 0));
  if (!l && l.err().code == std::errc::address_not_available) {
    WARN("no IPv6 loopback on this host: " << l.err().describe());
    return;
  }
  REQUIRE(l);
  CHECK(l->describe() == "tcp [::1]:" + std::to_string(l->port()));
  auto c = courier::net::connect(tcp_at("::1", l->port()), 2s);
  REQUIRE(c);
  auto s = accept_one(*l);
  CHECK(no_delay(c->sock.fd()));
  CHECK(no_delay(s.fd()));
  check_echo(c->sock, s);
}

TEST_CASE("tcp: a name resolves; SO_REUSEADDR lets a restarted server bind at once") {
  courier_test::watchdog wd{"tcp reuse", 20s};
  std::uint16_t port = 0;
  {
    auto l = courier::net::listen(tcp_at("127.0.0.1", 0));
    REQUIRE(l);
    port = l->port();
    auto c = courier::net::connect(tcp_at("localhost", port), 2s);
    REQUIRE(c);
    auto s = accept_one(*l);
    check_echo(c->sock, s);
    // The server closes first, so its side of the connection sits in TIME_WAIT.
  }
  auto again = courier::net::listen(tcp_at("127.0.0.1", port));
  REQUIRE(again);
  CHECK(again->port() == port);
}

TEST_CASE("tcp: errors name the endpoint") {
  auto l = courier::net::listen(tcp_at("127.0.0.1", 0));
  REQUIRE(l);
  const std::uint16_t port = l->port();
  l->close();
  auto refused = courier::net::connect(tcp_at("127.0.0.1", port), 2s);
  REQUIRE_FALSE(refused);
  CHECK(refused.err().code == std::errc::connection_refused);
  CHECK(refused.err().text == "connect tcp 127.0.0.1:" + std::to_string(port));

  auto taken_holder = courier::net::listen(tcp_at("127.0.0.1", 0));
  REQUIRE(taken_holder);
  auto taken = courier::net::listen(tcp_at("127.0.0.1", taken_holder->port()));
  REQUIRE_FALSE(taken);
  CHECK(taken.err().code == std::errc::address_in_use);

  auto unknown = courier::net::connect(tcp_at("no-such-host.invalid", 1), 2s);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.err().text.find("resolve tcp no-such-host.invalid:1") == 0);
}

TEST_CASE("pipe: the child runs on a socket pair; echo; its exit status comes back") {
  courier_test::watchdog wd{"pipe echo", 20s};
  auto c = courier::net::connect(pipe_to({COURIER_TEST_PIPE_ECHO, "7"}), 2s);
  REQUIRE(c);
  REQUIRE(c->child);
  CHECK(c->child->pid() > 0);
  CHECK(courier_test::nonblocking_and_cloexec(c->sock.fd()));
  CHECK_FALSE(c->child->try_wait());

  // The child's stray printf went to its stderr: the first bytes we read are our own echo.
  REQUIRE(courier_test::write_all(c->sock, "hello through the pipe"));
  CHECK(courier_test::read_exactly(c->sock, 22) == "hello through the pipe");
  std::string big(1 << 20, 'b');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  // Write and read in turns: the echo fills both socket buffers otherwise.
  std::string back;
  for (std::size_t at = 0; at < big.size(); at += 65536) {
    REQUIRE(courier_test::write_all(c->sock, std::string_view(big).substr(at, 65536)));
    back += courier_test::read_exactly(c->sock, 65536);
  }
  CHECK(back == big);

  c->sock.close();  // the child sees EOF and exits with the status it was given
  CHECK(c->child->wait(5s) == 7);
  CHECK(c->child->try_wait() == 7);
  CHECK(c->child->describe_exit() == "exited with status 7");
}

TEST_CASE("pipe: a child that exits at once: EOF on the socket, status from try_wait, and the pidfd") {
  courier_test::watchdog wd{"pipe exit", 20s};
  auto c = courier::net::connect(pipe_to({COURIER_TEST_PIPE_ECHO, "3", "now"}), 2s);
  REQUIRE(c);
  REQUIRE(courier_test::wait_for(c->sock.fd(), POLLIN));
  std::byte buffer[16];
  CHECK(courier::net::read_some(c->sock, buffer).status == courier::net::io_result::eof);
  if (c->child->exit_fd() >= 0) CHECK(courier_test::wait_for(c->child->exit_fd(), POLLIN));
  CHECK(courier_test::eventually([&] { return c->child->try_wait().has_value(); }, 5s));
  CHECK(c->child->try_wait() == 3);
}

TEST_CASE("pipe: the child's stdin is an ordinary blocking descriptor") {
  courier_test::watchdog wd{"pipe blocking", 20s};
  auto c = courier::net::connect(pipe_to({COURIER_TEST_PIPE_ECHO, "9", "blocking"}), 2s);
  REQUIRE(c);
  CHECK(c->child->wait(5s) == 9);
}

TEST_CASE("pipe: a killed child reports 128 + signal") {
  courier_test::watchdog wd{"pipe kill", 20s};
  auto c = courier::net::connect(pipe_to({COURIER_TEST_PIPE_ECHO, "0"}), 2s);
  REQUIRE(c);
  c->child->kill(SIGKILL);
  CHECK(c->child->wait(5s) == 128 + SIGKILL);
  CHECK(c->child->describe_exit().find("killed by signal 9") == 0);
}

TEST_CASE("pipe: the destructor reaps the child, killing one that does not exit") {
  courier_test::watchdog wd{"pipe reap", 20s};
  pid_t pid = -1;
  {
    // The socket stays open, so the echo server never sees EOF: the grace period runs out.
    auto c = courier::net::connect(pipe_to({COURIER_TEST_PIPE_ECHO, "0"}), 2s);
    REQUIRE(c);
    pid = c->child->pid();
    courier::net::child_process child = std::move(*c->child);
    c->child.reset();
    CHECK(child.pid() == pid);
  }
  // Reaped: no such process (not even a zombie) is ours any more.
  CHECK(::waitpid(pid, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

TEST_CASE("pipe: errors") {
  auto empty = courier::net::connect(pipe_to({}), 1s);
  REQUIRE_FALSE(empty);
  CHECK(empty.err() == courier::errc::invalid_argument);

  auto missing = courier::net::connect(pipe_to({"/nonexistent/courier-server"}), 1s);
  REQUIRE_FALSE(missing);
  CHECK(missing.err().code == std::errc::no_such_file_or_directory);
  CHECK(missing.err().text == "start pipe @ /nonexistent/courier-server");

  endpoint where;
  auto no_listener = courier::net::listen(where);
  REQUIRE_FALSE(no_listener);
  CHECK(no_listener.err() == courier::errc::invalid_argument);

  // A server started by hand (stdin not a socket) refuses, naming the reason (exit 100 in the helper).
  const std::string command = std::string(COURIER_TEST_PIPE_ECHO) + " 0 < /dev/null 2>/dev/null";
  const int status = std::system(command.c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 100);
}

TEST_CASE("uds: the socket file appears only once the server listens") {
  // A client that waits for the file and connects at once must never meet a bound socket that
  // does not listen yet (ECONNREFUSED, as if the server were gone).
  courier_test::watchdog wd{"uds listen then appear", 30s};
  const std::string path = courier_test::temp_socket_path("appear");
  std::atomic<bool> done{false};
  std::atomic<int> connected{0}, refused{0}, gone{0};
  std::thread watcher([&] {
    while (!done.load()) {
      if (::access(path.c_str(), F_OK) != 0) continue;
      const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
      const int outcome = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
      const int failure = errno;
      ::close(fd);
      if (outcome == 0 || failure == EAGAIN) {
        connected.fetch_add(1);
      } else if (failure == ECONNREFUSED) {
        refused.fetch_add(1);
      } else {
        continue;  // ENOENT: the file went between access and connect
      }
      while (!done.load() && ::access(path.c_str(), F_OK) == 0) std::this_thread::yield();
      gone.fetch_add(1);
    }
  });
  for (int round = 0; round < 1000; ++round) {
    const int before = connected.load() + refused.load();
    {
      auto l = courier::net::listen(uds_at(path));
      REQUIRE(l);
      while (connected.load() + refused.load() == before) std::this_thread::yield();
    }
    while (gone.load() == round) std::this_thread::yield();  // the watcher saw the file go
  }
  done = true;
  watcher.join();
  INFO(connected.load() << " connected, " << refused.load() << " refused");
  CHECK(refused.load() == 0);
  CHECK(connected.load() == 1000);
}
