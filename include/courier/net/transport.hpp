#pragma once
/// @file
/// Connect, listen and accept: the only layer that differs per transport. Each transport is a small
/// unit under `transports/<name>/` (pipe, uds, tcp) behind one interface (a table of function
/// pointers, consulted once per connect, listen or accepted connection, never per message); the
/// functions here pick the unit by `endpoint::kind` and return plain non-blocking sockets, so every
/// layer above works the same over every transport.
///
/// - pipe: connect() starts `endpoint::command` as a child process (posix_spawnp) whose stdin and
///   stdout are both its end of a socket pair; the client's end is the returned socket and the child
///   comes back as a child_process, which the caller polls (try_wait) to report the server's exit.
///   The server side calls pipe_server_socket(). There is no pipe listener.
/// - uds: the listener creates its socket file with `endpoint::file_mode` (0600 by default), replaces
///   a stale file left by a dead server, refuses a file a live server listens on, and removes its file
///   when destroyed (only if it is still the file it created).
/// - tcp: getaddrinfo on host and port, IPv4 or IPv6; SO_REUSEADDR on listeners; TCP_NODELAY on every
///   connected and accepted socket (Nagle's algorithm costs a request/response protocol ~40 ms a call).
///
/// System call failures come back as `courier::error{std::error_code(errno, system_category()),
/// "<what> <where>"}`, for example "connect uds /tmp/x.sock".
///
/// Thread-safety: connect, listen and pipe_server_socket may be called from any thread. listener and
/// child_process are move-only values: one thread at a time per object.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "courier/error.hpp"
#include "courier/net/endpoint.hpp"
#include "courier/net/process.hpp"
#include "courier/net/socket.hpp"

namespace courier::net {

struct transport_unit;  // transports/transport_unit.hpp: what each transport folder provides

/// What connect() returns: the stream and, for pipe, the server process it started.
struct connected {
  socket sock;
  std::optional<child_process> child;
};

/// A listening socket; accept() hands out non-blocking connected sockets.
class listener {
 public:
  listener() noexcept = default;
  /// Used by the transport units. `owned_file` (uds) is removed by the destructor if the inode at that
  /// path is still (`file_dev`, `file_ino`), the one this listener created.
  listener(socket listening, const transport_unit& unit, std::string description, std::uint16_t port,
           std::string owned_file = {}, dev_t file_dev = 0, ino_t file_ino = 0) noexcept;
  listener(listener&& other) noexcept;
  listener& operator=(listener&& other) noexcept;
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;
  ~listener();

  /// The listening descriptor: readable when a connection waits (register it with the reactor).
  [[nodiscard]] int fd() const noexcept { return sock_.fd(); }
  explicit operator bool() const noexcept { return static_cast<bool>(sock_); }
  /// Accepts one waiting connection with the transport's socket options applied. Never blocks: with
  /// none waiting the error is EAGAIN (test with would_block(r.error())).
  [[nodiscard]] courier::result<socket> accept();
  /// "uds /tmp/a.sock", "tcp 127.0.0.1:4567" (with the real port when port 0 was asked).
  [[nodiscard]] const std::string& describe() const noexcept { return description_; }
  /// tcp: the bound port; 0 for other transports.
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  /// Closes the socket and removes an owned uds file now.
  void close() noexcept;
  /// Closes this copy of the socket and forgets the file without removing it: what a forked
  /// child does with its parent's listener, which goes on serving.
  void abandon() noexcept;

 private:
  socket sock_;
  const transport_unit* unit_ = nullptr;
  std::string description_;
  std::uint16_t port_ = 0;
  std::string owned_file_;
  dev_t file_dev_ = 0;
  ino_t file_ino_ = 0;
};

/// Whether `e` is the "try again" of a non-blocking call (EAGAIN / EWOULDBLOCK).
[[nodiscard]] bool would_block(const courier::error& e) noexcept;

/// Connects to `where`, waiting at most `limit`; the socket is non-blocking. For pipe it starts the
/// server program (an empty command is an error).
[[nodiscard]] courier::result<connected> connect(const endpoint& where,
                                                 std::chrono::milliseconds limit = std::chrono::seconds(10));

/// Listens on `where` (uds or tcp; pipe has no listener: see pipe_server_socket()).
[[nodiscard]] courier::result<listener> listen(const endpoint& where);

/// The server side of --pipe: takes fd 0 (the socket pair from the client), moves it to a new
/// close-on-exec, non-blocking descriptor, points fd 0 at /dev/null and fd 1 at fd 2, so a stray
/// printf goes to stderr instead of corrupting the stream. Call it once, early. Fails (naming the
/// reason) when fd 0 is not a socket: the program was not started by a pipe client.
[[nodiscard]] courier::result<socket> pipe_server_socket();
/// The connection a server endpoint names (names_one_connection): stdin, as pipe_server_socket()
/// takes it, when where.descriptor is 0 (or -1 for pipe); another descriptor (a connection handed
/// to a --thread session) is taken over and made non-blocking.
[[nodiscard]] courier::result<socket> connection_socket(const endpoint& where);

}  // namespace courier::net
