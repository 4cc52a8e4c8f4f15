#pragma once
/// @file
/// Where a connection goes: one of the transports (pipe, uds, tcp) and its parameters. An endpoint
/// is plain data, usually filled in by parse_options() (options.hpp) and handed to connect() or
/// listen() (transport.hpp), which are the only places that look at the kind.
///
/// Thread-safety: a value type.

#include <cstdint>
#include <string>
#include <vector>

namespace courier::net {

/// The transports.
enum class transport_kind : std::uint8_t {
  pipe,  ///< the client starts `command` as a child on a socket pair (its stdin and stdout)
  uds,   ///< a Unix-domain stream socket bound to `file`
  tcp,   ///< TCP on `host`:`port` (IPv4 or IPv6; loopback unless told otherwise)
};

struct endpoint {
  transport_kind kind = transport_kind::pipe;
  /// uds: the socket file's path.
  std::string file;
  /// uds: the permissions a listener gives its socket file (owner-only by default).
  std::uint32_t file_mode = 0600;
  /// tcp: a name or a numeric address ("127.0.0.1", "::1", "localhost", "0.0.0.0" for every interface).
  std::string host = "127.0.0.1";
  /// tcp: the port; 0 on a listener asks the kernel for a free one (listener::port() tells which).
  std::uint16_t port = 0;
  /// pipe, client side: the server program and its arguments (what follows `@` on the command line).
  std::vector<std::string> command;
  /// Server side: the one connection to serve, already made, on this descriptor, instead of a
  /// listener: the connection a --thread, --fork or --spawn session was handed (`kind` says which
  /// transport accepted it, so its peer is read as that transport's), or a pipe's. 0 is stdin (a
  /// session's process, the socket pair of a pipe client); another is taken over by the one serve
  /// call given this endpoint, which closes it when the connection ends. -1: pipe serves stdin,
  /// uds and tcp listen.
  int descriptor = -1;
};

/// Server side: whether `where` names one connection already made (pipe's, or one handed to a
/// session) rather than a place to listen.
inline bool names_one_connection(const endpoint& where) noexcept {
  return where.kind == transport_kind::pipe || where.descriptor >= 0;
}

/// "pipe @ ./server --x", "uds /tmp/a.sock", "tcp 127.0.0.1:4567", "tcp [::1]:4567".
std::string to_string(const endpoint& where);
/// "pipe", "uds" or "tcp".
const char* to_string(transport_kind kind) noexcept;

}  // namespace courier::net
