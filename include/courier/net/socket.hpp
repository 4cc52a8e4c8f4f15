#pragma once
/// @file
/// The bottom layer of the network stack: an owned, non-blocking file descriptor and the two calls
/// that move bytes through it.
///
/// Every descriptor the network layer makes is `O_NONBLOCK | O_CLOEXEC`: non-blocking because one
/// thread drives many connections through the reactor (reactor.hpp), close-on-exec because the pipe
/// transport starts child processes, which must inherit only the one socket meant for them.
///
/// `read_some` and `write_some` retry `EINTR` themselves and report `EAGAIN` as `would_block`, so the
/// layers above see four outcomes and no errno juggling. `write_some` sends with `MSG_NOSIGNAL` on
/// sockets, so writing to a peer that went away is an `EPIPE` result, never a `SIGPIPE`; for a
/// descriptor that is not a socket (a plain pipe) call `ignore_sigpipe()` once.
///
/// Thread-safety: `socket` is a move-only value; distinct objects are independent, one object must not
/// be moved or closed while another thread uses it. `read_some`/`write_some` on the same descriptor
/// from two threads at once are safe for the kernel but interleave bytes: one reader and one writer.

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "courier/error.hpp"

namespace courier::net {

/// The owner of one file descriptor: closes it when destroyed. An empty socket holds -1.
class socket {
 public:
  socket() noexcept = default;
  /// Takes ownership of `fd` as it is (flags unchanged); see make_nonblocking().
  explicit socket(int fd) noexcept : fd_(fd) {}
  socket(socket&& other) noexcept : fd_(other.release()) {}
  socket& operator=(socket&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  socket(const socket&) = delete;
  socket& operator=(const socket&) = delete;
  ~socket() { close(); }

  [[nodiscard]] int fd() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

  /// Gives up ownership: the caller closes the returned descriptor.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the descriptor now (a no-op on an empty socket).
  void close() noexcept;
  /// Closes the current descriptor and owns `fd` instead.
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// Sets `O_NONBLOCK` and `FD_CLOEXEC` on a descriptor made elsewhere (for example fd 0).
[[nodiscard]] courier::result<void> make_nonblocking(int fd);

/// A connected pair of stream sockets (`socketpair(AF_UNIX, SOCK_STREAM)`), both non-blocking and
/// close-on-exec: the pipe transport's channel, and a handy peer for tests.
[[nodiscard]] courier::result<std::pair<socket, socket>> socket_pair();

/// Asks the kernel for send and receive buffers of `bytes` each (SO_SNDBUF, SO_RCVBUF: the --buffersize
/// option); 0 leaves the kernel's defaults. The kernel may round or cap the size (net.core.wmem_max).
[[nodiscard]] courier::result<void> set_buffer_size(const socket& s, std::size_t bytes);

/// What one read or write did.
struct io_result {
  enum status_t : std::uint8_t {
    ok,           ///< `bytes` bytes moved (> 0)
    would_block,  ///< nothing to read, or no room to write: wait for readiness
    eof,          ///< read only: the peer closed its sending side (orderly end of stream)
    failed,       ///< `error` holds the errno (EPIPE and ECONNRESET when the peer went away)
  };
  status_t status = ok;
  std::size_t bytes = 0;
  int error = 0;

  /// The failure as a std::error_code in the system category (empty unless status == failed).
  [[nodiscard]] std::error_code code() const noexcept;
};

/// One `read()` into `into`, retrying EINTR. An empty span reads nothing and returns ok with 0 bytes.
io_result read_some(const socket& s, std::span<std::byte> into) noexcept;

/// One gathering write of `pieces` (at most IOV_MAX are used; the rest wait for the next call),
/// retrying EINTR. On a socket it is `sendmsg(MSG_NOSIGNAL)`, on anything else `writev`. A partial
/// write is `ok` with the count written: the caller keeps the rest.
io_result write_some(const socket& s, std::span<const iovec> pieces) noexcept;

/// Ignores SIGPIPE for the whole process (idempotent, thread-safe). Needed only for writes to plain
/// pipes; sockets are covered by MSG_NOSIGNAL. Child processes started by the pipe transport get the
/// default disposition back.
void ignore_sigpipe() noexcept;

}  // namespace courier::net
