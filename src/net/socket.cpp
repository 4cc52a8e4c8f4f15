#include "courier/net/socket.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <mutex>

namespace courier::net {

void socket::close() noexcept {
  // No retry on EINTR: Linux releases the descriptor even then, and a retry could close a reused one.
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

void socket::reset(int fd) noexcept {
  close();
  fd_ = fd;
}

courier::result<void> make_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ((flags & O_NONBLOCK) == 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) ||
      ::fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
    return courier::error(std::error_code(errno, std::system_category()), "fcntl O_NONBLOCK|FD_CLOEXEC");
  return {};
}

courier::result<std::pair<socket, socket>> socket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) < 0)
    return courier::error(std::error_code(errno, std::system_category()), "socketpair AF_UNIX");
  return std::pair<socket, socket>(socket(fds[0]), socket(fds[1]));
}

courier::result<void> set_buffer_size(const socket& s, std::size_t bytes) {
  if (bytes == 0) return {};
  const int size = bytes > static_cast<std::size_t>(INT_MAX) ? INT_MAX : static_cast<int>(bytes);
  if (::setsockopt(s.fd(), SOL_SOCKET, SO_SNDBUF, &size, sizeof size) < 0 ||
      ::setsockopt(s.fd(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size) < 0)
    return courier::error(std::error_code(errno, std::system_category()), "setsockopt SO_SNDBUF/SO_RCVBUF");
  return {};
}

std::error_code io_result::code() const noexcept {
  if (status != failed) return {};
  return {error, std::system_category()};
}

io_result read_some(const socket& s, std::span<std::byte> into) noexcept {
  if (into.empty()) return {};
  for (;;) {
    const ssize_t n = ::read(s.fd(), into.data(), into.size());
    if (n > 0) return {io_result::ok, static_cast<std::size_t>(n), 0};
    if (n == 0) return {io_result::eof, 0, 0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {io_result::would_block, 0, 0};
    return {io_result::failed, 0, errno};
  }
}

io_result write_some(const socket& s, std::span<const iovec> pieces) noexcept {
  if (pieces.empty()) return {};
  const std::size_t count = pieces.size() < IOV_MAX ? pieces.size() : IOV_MAX;
  msghdr message{};
  message.msg_iov = const_cast<iovec*>(pieces.data());  // sendmsg does not write through it
  message.msg_iovlen = count;
  bool is_socket = true;
  for (;;) {
    // One piece (every frame writer's case) goes by send: sendmsg would copy in the message header
    // and import an iovec for it, per call.
    const ssize_t n = !is_socket   ? ::writev(s.fd(), pieces.data(), static_cast<int>(count))
                      : count == 1 ? ::send(s.fd(), pieces[0].iov_base, pieces[0].iov_len, MSG_NOSIGNAL)
                                   : ::sendmsg(s.fd(), &message, MSG_NOSIGNAL);
    if (n >= 0) return {io_result::ok, static_cast<std::size_t>(n), 0};
    if (errno == EINTR) continue;
    if (errno == ENOTSOCK && is_socket) {
      is_socket = false;
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {io_result::would_block, 0, 0};
    return {io_result::failed, 0, errno};
  }
}

void ignore_sigpipe() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_handler = SIG_IGN;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGPIPE, &action, nullptr);
  });
}

}  // namespace courier::net
