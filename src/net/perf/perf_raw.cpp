#include "perf_raw.hpp"

#include "blocking_io.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <system_error>
#include <thread>
#include <vector>

namespace courier::perf {

namespace {

constexpr std::size_t message_size = 64;
constexpr std::size_t in_flight = 64;

courier::error errno_error(const char* what) {
  return {std::error_code(errno, std::system_category()), std::string("raw peer: ") + what};
}

/// Echoes what arrives on `in` to `out` until the end of the stream.
void echo(int in, int out) {
  std::array<std::byte, 64 * 1024> buffer;
  for (;;) {
    const ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || !write_all(out, buffer.data(), static_cast<std::size_t>(n))) return;
  }
}

courier::result<void> echoed(bool ok) {
  if (ok) return {};
  return courier::error(errc::connection_lost, "raw peer: the echo stopped");
}

}  // namespace

courier::result<raw_peer> raw_peer::start(const std::string& self, const net::endpoint& where, start_mode mode) {
  raw_peer peer;
  peer.self_ = self;
  peer.where_ = where;
  if (where.kind == net::transport_kind::pipe) {
    peer.where_.command = {self, "--raw-echo"};
    return peer;
  }
  if (where.kind == net::transport_kind::uds)
    peer.where_.file = where.file + ".raw";
  else
    peer.where_.port = 0;
  auto acceptor = raw_acceptor::start(peer.where_, {self, "--raw-echo", "--raw-mode", to_string(mode)});
  if (!acceptor) return acceptor.err();
  peer.acceptor_.emplace(std::move(*acceptor));
  return peer;
}

courier::result<raw_acceptor> raw_acceptor::start(net::endpoint& where, const std::vector<std::string>& command) {
  auto listening = net::listen(where);
  if (!listening) return listening.err();
  where.port = listening->port();
  auto process = net::spawn_with_stdio(command, listening->fd());
  if (!process) return process.err();
  return raw_acceptor(std::move(*listening), std::move(*process));
}

courier::result<net::socket> raw_peer::open() {
  auto c = net::connect(where_);
  if (!c) return c.err();
  if (c->child) pipe_child_ = std::move(*c->child);
  if (!make_blocking(c->sock.fd())) return errno_error("fcntl");
  return std::move(c->sock);
}

courier::result<measured> raw_peer::roundtrip(std::chrono::duration<double> run_for) {
  auto sock = open();
  if (!sock) return sock.err();
  std::array<std::byte, message_size> message{};
  return run_timed(run_for, 64, [&] {
    return echoed(write_all(sock->fd(), message.data(), message.size()) &&
                  read_exact(sock->fd(), message.data(), message.size()));
  });
}

courier::result<measured> raw_peer::pipelined(std::chrono::duration<double> run_for) {
  auto sock = open();
  if (!sock) return sock.err();
  std::array<std::byte, message_size * in_flight> window{};
  if (!write_all(sock->fd(), window.data(), window.size())) return errno_error("write");
  auto m = run_timed(run_for, 256, [&] {
    return echoed(read_exact(sock->fd(), window.data(), message_size) &&
                  write_all(sock->fd(), window.data(), message_size));
  });
  if (m && !read_exact(sock->fd(), window.data(), window.size())) return errno_error("read");
  return m;
}

courier::result<measured> raw_peer::connect(std::chrono::duration<double> run_for) {
  std::array<std::byte, message_size> message{};
  return run_timed(run_for, 1, [&] {
    auto sock = open();
    const bool ok = sock && write_all(sock->fd(), message.data(), message.size()) &&
                    read_exact(sock->fd(), message.data(), message.size());
    if (sock) sock->close();
    pipe_child_.reset();  // over pipe a connection is a process: it ends with it
    return echoed(ok);
  });
}

int run_raw_echo(const std::string& self, start_mode mode) {
  int listening = 0;
  socklen_t size = sizeof listening;
  if (::getsockopt(0, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) < 0 || listening == 0) {
    echo(0, 1);
    return 0;
  }
  std::vector<net::child_process> spawned;
  for (;;) {
    const int conn = ::accept4(0, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return 1;
    }
    switch (mode) {
      case start_mode::pool:
        echo(conn, conn);
        ::close(conn);
        break;
      case start_mode::thread:
        // Detached: the peer is ended with SIGTERM once measured, and each thread ends with its connection.
        std::thread([conn] {
          echo(conn, conn);
          ::close(conn);
        }).detach();
        break;
      case start_mode::fork: {
        const pid_t pid = ::fork();  // this process has one thread: the child may run on
        if (pid == 0) {
          echo(conn, conn);
          ::_exit(0);
        }
        ::close(conn);
        while (::waitpid(-1, nullptr, WNOHANG) > 0) {
        }
        break;
      }
      case start_mode::spawn: {
        auto child = net::spawn_with_stdio({self, "--raw-echo"}, conn);
        ::close(conn);
        if (child) spawned.push_back(std::move(*child));
        std::erase_if(spawned, [](net::child_process& c) { return c.try_wait().has_value(); });
        break;
      }
    }
  }
}

}  // namespace courier::perf
