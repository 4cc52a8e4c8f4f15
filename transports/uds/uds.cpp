#include "uds/uds.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace courier::net::transports {

namespace {

courier::result<sockaddr_un> address_of(const endpoint& where) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (where.file.empty()) return courier::error(errc::invalid_argument, "uds: no socket file (--file PATH)");
  if (where.file.size() >= sizeof address.sun_path)
    return courier::error(errc::invalid_argument, "uds " + where.file + ": path longer than " +
                                                      std::to_string(sizeof address.sun_path - 1) + " bytes");
  std::memcpy(address.sun_path, where.file.c_str(), where.file.size() + 1);
  return address;
}

courier::result<socket> stream_socket(const endpoint& where) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return system_error(errno, "socket", where);
  return socket(fd);
}

courier::result<connected> connect_uds(const endpoint& where, std::chrono::milliseconds limit) {
  auto address = address_of(where);
  if (!address) return address.err();
  auto sock = stream_socket(where);
  if (!sock) return sock.err();
  const int failure = connect_within(*sock, reinterpret_cast<const sockaddr*>(&*address), sizeof *address, limit);
  if (failure != 0) return system_error(failure, "connect", where);
  return connected{std::move(*sock), std::nullopt};
}

/// Whether a server listens on the socket file at `address` right now. Non-blocking: a blocking
/// connect to a live server whose backlog is full waits until the backlog drains, which may be
/// never; EAGAIN (backlog full) means alive, ECONNREFUSED means nobody listens (a stale file).
bool someone_listens(const sockaddr_un& address) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  socket probe(fd);
  const int outcome = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  return outcome == 0 || errno == EAGAIN || errno == EINPROGRESS;
}

courier::result<listener> listen_uds(const endpoint& where) {
  auto address = address_of(where);
  if (!address) return address.err();
  auto sock = stream_socket(where);
  if (!sock) return sock.err();
  const auto* raw_address = reinterpret_cast<const sockaddr*>(&*address);

  // The umask decides the file's mode at bind (fchmod on an unbound socket does not reach the file).
  // It is process-wide, so another thread creating a file in these few microseconds gets it too;
  // the chmod below sets the asked mode exactly whatever happened.
  const mode_t mode = static_cast<mode_t>(where.file_mode) & 0777;
  for (int attempt = 0;; ++attempt) {
    const mode_t saved = ::umask(static_cast<mode_t>(~mode & 0777));
    const int bound = ::bind(sock->fd(), raw_address, sizeof *address);
    const int failure = errno;
    ::umask(saved);
    if (bound == 0) break;
    if (failure != EADDRINUSE || attempt > 0) return system_error(failure, "bind", where);
    struct stat st {};
    if (::lstat(where.file.c_str(), &st) < 0) continue;  // gone meanwhile: try again
    if (!S_ISSOCK(st.st_mode))
      return courier::error(std::error_code(EEXIST, std::system_category()),
                            "uds " + where.file + ": the file exists and is not a socket");
    if (someone_listens(*address))
      return courier::error(std::error_code(EADDRINUSE, std::system_category()),
                            "uds " + where.file + ": another server is listening");
    ::unlink(where.file.c_str());  // stale: left by a server that died
  }
  struct stat st {};
  if (::chmod(where.file.c_str(), mode) < 0 || ::lstat(where.file.c_str(), &st) < 0) {
    const int failure = errno;
    ::unlink(where.file.c_str());
    return system_error(failure, "chmod", where);
  }
  if (::listen(sock->fd(), SOMAXCONN) < 0) {
    const int failure = errno;
    ::unlink(where.file.c_str());
    return system_error(failure, "listen", where);
  }
  return listener(std::move(*sock), uds, to_string(where), 0, where.file, st.st_dev, st.st_ino);
}

}  // namespace

const transport_unit uds{"uds", connect_uds, listen_uds, nullptr};

}  // namespace courier::net::transports
