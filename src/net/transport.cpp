#include "courier/net/transport.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <thread>

#include "pipe/pipe.hpp"
#include "tcp/tcp.hpp"
#include "uds/uds.hpp"

namespace courier::net {

namespace {

const transport_unit& unit_for(transport_kind kind) noexcept {
  switch (kind) {
    case transport_kind::uds: return transports::uds;
    case transport_kind::tcp: return transports::tcp;
    case transport_kind::pipe: break;
  }
  return transports::pipe;
}

courier::error errno_error(int errno_value, std::string text) {
  return {std::error_code(errno_value, std::system_category()), std::move(text)};
}

}  // namespace

courier::error system_error(int errno_value, std::string_view what, const endpoint& where) {
  std::string text(what);
  (text += ' ') += to_string(where);
  return errno_error(errno_value, std::move(text));
}

int connect_within(const socket& sock, const sockaddr* address, socklen_t length,
                   std::chrono::milliseconds limit) noexcept {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (::connect(sock.fd(), address, length) == 0) return 0;
    const int failure = errno;
    if (failure == EINTR) continue;
    const auto now = std::chrono::steady_clock::now();
    if (failure == EAGAIN) {  // uds: the server's backlog is full; it may drain
      if (now >= until) return ETIMEDOUT;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (failure != EINPROGRESS) return failure;
    for (;;) {
      pollfd watch{sock.fd(), POLLOUT, 0};
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return ETIMEDOUT;
      const int n = ::poll(&watch, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno;
      if (n == 0) return ETIMEDOUT;
      int outcome = 0;
      socklen_t size = sizeof outcome;
      if (::getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &outcome, &size) < 0) return errno;
      return outcome;
    }
  }
}

// Compared by the category's address and the number, with no call into the category: this runs
// when the process is out of descriptors, where even a sanitizer's check of a virtual call (which
// opens a pipe) cannot run.
bool would_block(const courier::error& e) noexcept {
  const int n = e.code.value();
  return &e.code.category() == &std::system_category() && (n == EAGAIN || n == EWOULDBLOCK);
}

// --- listener -------------------------------------------------------------------------------------

listener::listener(socket listening, const transport_unit& unit, std::string description, std::uint16_t port,
                   std::string owned_file, dev_t file_dev, ino_t file_ino) noexcept
    : sock_(std::move(listening)),
      unit_(&unit),
      description_(std::move(description)),
      port_(port),
      owned_file_(std::move(owned_file)),
      file_dev_(file_dev),
      file_ino_(file_ino) {}

listener::listener(listener&& other) noexcept
    : sock_(std::move(other.sock_)),
      unit_(other.unit_),
      description_(std::move(other.description_)),
      port_(other.port_),
      owned_file_(std::move(other.owned_file_)),
      file_dev_(other.file_dev_),
      file_ino_(other.file_ino_) {
  other.owned_file_.clear();
}

listener& listener::operator=(listener&& other) noexcept {
  if (this != &other) {
    close();
    sock_ = std::move(other.sock_);
    unit_ = other.unit_;
    description_ = std::move(other.description_);
    port_ = other.port_;
    owned_file_ = std::move(other.owned_file_);
    other.owned_file_.clear();
    file_dev_ = other.file_dev_;
    file_ino_ = other.file_ino_;
  }
  return *this;
}

listener::~listener() { close(); }

void listener::close() noexcept {
  sock_.close();
  if (owned_file_.empty()) return;
  // Remove the file only if it is still ours: a second server may have replaced it meanwhile.
  struct stat st {};
  if (::lstat(owned_file_.c_str(), &st) == 0 && st.st_dev == file_dev_ && st.st_ino == file_ino_)
    ::unlink(owned_file_.c_str());
  owned_file_.clear();
}

void listener::abandon() noexcept {
  sock_.close();
  owned_file_.clear();
}

courier::result<socket> listener::accept() {
  for (;;) {
    const int fd = ::accept4(sock_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      socket accepted(fd);
      if (unit_ && unit_->prepare_accepted) {
        if (auto ok = unit_->prepare_accepted(accepted); !ok) return ok.err();
      }
      return accepted;
    }
    // A connection that was reset while it waited in the backlog is not this listener's failure.
    if (errno == EINTR || errno == ECONNABORTED) continue;
    return errno_error(errno, "accept " + description_);
  }
}

// --- dispatch -------------------------------------------------------------------------------------

courier::result<connected> connect(const endpoint& where, std::chrono::milliseconds limit) {
  return unit_for(where.kind).connect(where, limit);
}

courier::result<listener> listen(const endpoint& where) {
  const transport_unit& unit = unit_for(where.kind);
  if (!unit.listen)
    return courier::error(errc::invalid_argument,
                          std::string(unit.name) + ": no listener; a pipe server calls pipe_server_socket()");
  return unit.listen(where);
}

courier::result<socket> pipe_server_socket() {
  struct stat st {};
  if (::fstat(0, &st) < 0) return errno_error(errno, "pipe server: fstat stdin");
  if (!S_ISSOCK(st.st_mode))
    return courier::error(errc::invalid_argument,
                          "pipe server: stdin is not a socket; start this program from a client: client @ server");
  const int moved = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return errno_error(errno, "pipe server: move stdin");
  socket sock(moved);
  if (auto ok = make_nonblocking(sock.fd()); !ok) return ok.err();
  std::fflush(stdout);
  if (::dup2(2, 1) < 0) return errno_error(errno, "pipe server: point stdout at stderr");
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);  // the copy at fd 0 has no close-on-exec: dup2 clears it
    ::close(null);
  }
  return sock;
}

courier::result<socket> connection_socket(const endpoint& where) {
  if (where.descriptor == 0 || (where.descriptor < 0 && where.kind == transport_kind::pipe))
    return pipe_server_socket();
  if (where.descriptor < 0)
    return courier::error(errc::invalid_argument, to_string(where) + ": names no connection (a server listens there)");
  socket sock(where.descriptor);
  if (auto ok = make_nonblocking(sock.fd()); !ok) return ok.err();
  return sock;
}

}  // namespace courier::net
