#pragma once
/// @file
/// Who is on the other side of a connection: a session's peer_info (its number, transport, address
/// and, over uds, the kernel's credentials), read from the connected socket.
///
/// Thread-safety: values, and functions of one socket.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "courier/net/endpoint.hpp"

namespace courier::net {

class socket;

/// The peer process of a Unix-domain connection, as the kernel saw it when it connected
/// (SO_PEERCRED).
struct peer_credentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

/// Who is on the other side of a session's connection.
struct peer_info {
  /// This session's number, from 1, never reused while its server runs: in every start mode of
  /// run_server (its acceptor numbers the sessions it starts on threads or processes of their
  /// own), and on a node that serves sessions itself.
  std::uint64_t id = 0;
  transport_kind transport = transport_kind::tcp;
  /// tcp: the peer's address and port ("127.0.0.1:41234", "[::1]:41234"); uds: "pid P uid U gid G";
  /// pipe: "stdin". A session a server runs on a thread or in a process of its own (run_server's
  /// --thread, --fork and --spawn) is told its client's tcp address or uds credentials, with that
  /// transport.
  std::string address;
  /// uds: the peer's process and user.
  std::optional<peer_credentials> credentials;
};

namespace detail {

/// The peer of an accepted socket on `transport`: its address or credentials (id left 0).
peer_info peer_of(const socket& accepted, transport_kind transport);
/// The peer of a connected socket for a log line: "tcp 127.0.0.1:41234", "uds pid P uid U gid G"
/// (a socket pair's too), or "an unknown peer".
std::string describe_peer(const socket& connected);

}  // namespace detail

}  // namespace courier::net
