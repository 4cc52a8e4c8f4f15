#include "courier/net/socket.hpp"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <catch2/catch.hpp>

#include "net_test_util.hpp"
#include "watchdog.hpp"

using courier::net::io_result;
using courier::net::read_some;
// Not `using courier::net::socket`: <sys/socket.h>'s socket() would hide the class name.
using socket_t = courier::net::socket;
using courier::net::write_some;

namespace {

iovec piece(std::string_view text) { return {const_cast<char*>(text.data()), text.size()}; }

}  // namespace

TEST_CASE("socket: owns its descriptor; move, release and close") {
  auto pair = courier::net::socket_pair();
  REQUIRE(pair);
  socket_t a = std::move(pair->first);
  CHECK(a);
  CHECK_FALSE(pair->first);
  const int fd = a.fd();
  socket_t b;
  b = std::move(a);
  CHECK(b.fd() == fd);
  const int released = b.release();
  CHECK_FALSE(b);
  CHECK(::fcntl(released, F_GETFD) >= 0);  // still open: the caller owns it now
  b.reset(released);
  b.close();
  CHECK(::fcntl(released, F_GETFD) < 0);
  CHECK(errno == EBADF);
}

TEST_CASE("socket: socket_pair makes non-blocking, close-on-exec descriptors") {
  auto pair = courier::net::socket_pair();
  REQUIRE(pair);
  CHECK(courier_test::nonblocking_and_cloexec(pair->first.fd()));
  CHECK(courier_test::nonblocking_and_cloexec(pair->second.fd()));

  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  socket_t r(fds[0]), w(fds[1]);
  CHECK_FALSE(courier_test::nonblocking_and_cloexec(r.fd()));
  REQUIRE(courier::net::make_nonblocking(r.fd()));
  CHECK(courier_test::nonblocking_and_cloexec(r.fd()));
}

TEST_CASE("socket: gathering write, read, would_block when empty, eof when the peer closed") {
  courier_test::watchdog wd{"socket read/write", std::chrono::seconds(20)};
  auto pair = courier::net::socket_pair();
  REQUIRE(pair);
  auto& [a, b] = *pair;

  std::byte buffer[64];
  CHECK(read_some(b, buffer).status == io_result::would_block);

  const iovec pieces[] = {piece("hello, "), piece(""), piece("world")};
  const auto put = write_some(a, pieces);
  REQUIRE(put.status == io_result::ok);
  CHECK(put.bytes == 12);
  CHECK(courier_test::read_exactly(b, 12) == "hello, world");

  CHECK(read_some(b, {}).status == io_result::ok);  // an empty span reads nothing
  a.close();
  const auto end = read_some(b, buffer);
  CHECK(end.status == io_result::eof);
  CHECK(end.bytes == 0);
}

TEST_CASE("socket: writes until the buffer is full report would_block, then a partial count") {
  courier_test::watchdog wd{"socket would_block", std::chrono::seconds(20)};
  auto pair = courier::net::socket_pair();
  REQUIRE(pair);
  std::string block(64 * 1024, 'x');
  std::size_t total = 0;
  io_result put;
  for (int i = 0; i < 10000; ++i) {
    const iovec one = piece(block);
    put = write_some(pair->first, {&one, 1});
    if (put.status != io_result::ok) break;
    total += put.bytes;
  }
  CHECK(put.status == io_result::would_block);
  CHECK(total > 0);
  // Draining everything makes room again.
  CHECK(courier_test::read_exactly(pair->second, total).size() == total);
  CHECK(courier_test::wait_for(pair->first.fd(), POLLOUT));
  const iovec one = piece(block);
  CHECK(write_some(pair->first, {&one, 1}).status == io_result::ok);
}

TEST_CASE("socket: writing to a closed peer is EPIPE, not SIGPIPE") {
  courier_test::watchdog wd{"socket sigpipe", std::chrono::seconds(20)};
  // The default disposition kills the process on SIGPIPE: the test only survives if none is raised.
  ::signal(SIGPIPE, SIG_DFL);
  auto pair = courier::net::socket_pair();
  REQUIRE(pair);
  pair->second.close();
  const iovec one = piece("into the void");
  const auto put = write_some(pair->first, {&one, 1});
  CHECK(put.status == io_result::failed);
  CHECK(put.error == EPIPE);
  CHECK(put.code() == std::errc::broken_pipe);
}

TEST_CASE("socket: write_some falls back to writev on a plain pipe; ignore_sigpipe covers it") {
  courier_test::watchdog wd{"socket pipe", std::chrono::seconds(20)};
  int fds[2];
  REQUIRE(::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0);
  socket_t r(fds[0]), w(fds[1]);
  const iovec pieces[] = {piece("through "), piece("a pipe")};
  const auto put = write_some(w, pieces);
  REQUIRE(put.status == io_result::ok);
  CHECK(courier_test::read_exactly(r, 14) == "through a pipe");

  courier::net::ignore_sigpipe();
  courier::net::ignore_sigpipe();  // idempotent
  r.close();
  const auto broken = write_some(w, pieces);
  CHECK(broken.status == io_result::failed);
  CHECK(broken.error == EPIPE);
}

TEST_CASE("socket: set_buffer_size asks the kernel for both buffers") {
  auto pair = courier::net::socket_pair();
  REQUIRE(pair);
  REQUIRE(courier::net::set_buffer_size(pair->first, 0));  // the kernel's defaults stay
  REQUIRE(courier::net::set_buffer_size(pair->first, 65536));
  int size = 0;
  socklen_t length = sizeof size;
  REQUIRE(::getsockopt(pair->first.fd(), SOL_SOCKET, SO_SNDBUF, &size, &length) == 0);
  CHECK(size >= 65536);  // Linux doubles the request for its bookkeeping
  REQUIRE(::getsockopt(pair->first.fd(), SOL_SOCKET, SO_RCVBUF, &size, &length) == 0);
  CHECK(size >= 65536);
}
