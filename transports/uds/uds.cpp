#include "uds/uds.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

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

/// A name beside the socket file, unique in this process, or nothing where it would not fit.
std::optional<std::string> private_name_for(const std::string& file) {
  static std::atomic<unsigned> serial{0};
  std::string name = file + ".listening-" + std::to_string(::getpid()) + "-" + std::to_string(serial.fetch_add(1));
  if (name.size() >= sizeof(sockaddr_un::sun_path)) return std::nullopt;
  return name;
}

/// The umask decides the file's mode at bind (fchmod on an unbound socket does not reach the file).
/// It is process-wide, so another thread creating a file in these few microseconds gets it too; the
/// caller's chmod sets the asked mode exactly whatever happened. Returns the errno, 0 when bound.
int bind_with_mode(const socket& sock, const std::string& file, mode_t mode) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, file.c_str(), file.size() + 1);
  const mode_t saved = ::umask(static_cast<mode_t>(~mode & 0777));
  const int outcome = ::bind(sock.fd(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int failure = errno;
  ::umask(saved);
  return outcome == 0 ? 0 : failure;
}

/// Runs `place` (which creates the socket file and returns an errno, 0 when done) and, where a file
/// is in the way, replaces it once if it is a socket nobody listens on (left by a server that died).
/// Any other file, and a live server's socket, stay.
template <class Place>
courier::result<void> place_socket_file(const endpoint& where, const sockaddr_un& address, Place place) {
  for (int attempt = 0;; ++attempt) {
    const int failure = place();
    if (failure == 0) return {};
    if ((failure != EADDRINUSE && failure != EEXIST) || attempt > 0) return system_error(failure, "bind", where);
    struct stat st {};
    if (::lstat(where.file.c_str(), &st) < 0) continue;  // gone meanwhile: try again
    if (!S_ISSOCK(st.st_mode))
      return courier::error(std::error_code(EEXIST, std::system_category()),
                            "uds " + where.file + ": the file exists and is not a socket");
    if (someone_listens(address))
      return courier::error(std::error_code(EADDRINUSE, std::system_category()),
                            "uds " + where.file + ": another server is listening");
    ::unlink(where.file.c_str());
  }
}

/// Removes a file on the way out, unless its name was cleared.
struct file_remover {
  std::string file;
  ~file_remover() {
    if (!file.empty()) ::unlink(file.c_str());
  }
};

// The socket file appears only once the socket listens, so a client that waits for the file and
// connects at once never meets a bound socket that does not listen yet (ECONNREFUSED, as if the
// server had died). The socket is bound under a private name beside the file, set to its mode,
// made to listen, and then linked to the asked name. Unlike rename, link never replaces a file, so
// a live server's file is never taken over, even by a second server starting at the same moment.
// A path too long for a private name beside it is bound in place.
courier::result<listener> listen_uds(const endpoint& where) {
  auto address = address_of(where);
  if (!address) return address.err();
  auto sock = stream_socket(where);
  if (!sock) return sock.err();
  const mode_t mode = static_cast<mode_t>(where.file_mode) & 0777;

  const std::optional<std::string> private_file = private_name_for(where.file);
  const std::string& bound_file = private_file ? *private_file : where.file;
  if (private_file) {
    if (const int failure = bind_with_mode(*sock, bound_file, mode); failure != 0)
      return system_error(failure, "bind", where);
  } else if (auto placed = place_socket_file(where, *address, [&] { return bind_with_mode(*sock, bound_file, mode); });
             !placed) {
    return placed.err();
  }
  // The private name always goes; a file bound in place only if this fails.
  file_remover remove_bound_file{bound_file};

  struct stat st {};
  if (::chmod(bound_file.c_str(), mode) < 0 || ::lstat(bound_file.c_str(), &st) < 0)
    return system_error(errno, "chmod", where);
  if (::listen(sock->fd(), SOMAXCONN) < 0) return system_error(errno, "listen", where);
  if (private_file) {
    auto placed = place_socket_file(where, *address,
                                    [&] { return ::link(bound_file.c_str(), where.file.c_str()) == 0 ? 0 : errno; });
    if (!placed) return placed.err();
  } else {
    remove_bound_file.file.clear();
  }
  return listener(std::move(*sock), uds, to_string(where), 0, where.file, st.st_dev, st.st_ino);
}

}  // namespace

const transport_unit uds{"uds", connect_uds, listen_uds, nullptr};

}  // namespace courier::net::transports
