#pragma once
/// @file
/// Sessions: a server that starts something of its own for every connection it accepts.
///
///     net.serve_sessions([&](const net::peer_info& peer, net::context_ref client) {
///       auto user = std::make_shared<chat_user>(peer, client);   // this connection's state
///       net::session s;
///       s.services = make_services(user);                        // handlers that capture it
///       s.on_end = [user](const courier::error& why) { user->leave(why); };
///       return s;
///     }, opts.where, cfg);
///
/// A session is the parent context of one connection (context.hpp): its services are its own
/// (made by the factory for this connection, so the state they capture is this connection's),
/// and `client` is the connection's other side, whose services the session calls or sends to
/// (pushes: `client.send("MSG_", args(...))`), from its handlers or from any actor. Handlers of one
/// session run one at a time, in the connection's turns (its state needs no lock); sessions run
/// side by side on the system's workers. Starting one costs an actor and a connection: no thread
/// and no process.
///
/// A session ends when its connection does: the peer closed it, it broke the protocol, it was
/// silent past connection_config::idle_timeout, the node stopped, or the session closed it itself
/// (`client.close()`: an orderly close). Then `on_end` runs with why (in the connection's last
/// turn), the actors the session owns are stopped, the last owned first, and the session's
/// services are let go (with the state they capture).
///
/// Limits: connection_config::max_connections is the most sessions at once (one more is refused
/// with ERROR 260 on the wire and closed), idle_timeout ends a session whose client sent no call
/// for that long.
///
/// Thread-safety: the factory runs on the workers, for several connections at once (it must not
/// block, and state it shares between sessions needs its own guard, an actor for instance).
/// peer_info and session are values.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "courier/actor_ref.hpp"
#include "courier/error.hpp"
#include "courier/net/context.hpp"
#include "courier/net/endpoint.hpp"

namespace courier::net {

class service_table;
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

/// What a session is made of: what its factory returns for one connection.
struct session {
  /// The services of the connection's parent context (children from its factory); null serves none.
  std::shared_ptr<const service_table> services;
  /// Told once, when the connection has ended, why (code connection_lost, or protocol_error when
  /// the peer broke the protocol): an orderly close reads "the connection was closed in order",
  /// an idle one names its time.
  std::function<void(const courier::error& why)> on_end;

  /// `actor` lives as long as the session: it is stopped when the session ends (after on_end),
  /// the last owned first.
  template <class I>
  session& own(actor_ref<I> actor) {
    owned.push_back([a = std::move(actor)]() mutable { a.stop(); });
    return *this;
  }
  std::vector<std::function<void()>> owned;
};

/// Makes the session of one accepted connection: `peer` says who connected, `client` is their side
/// of the connection (calls and sends to the services they registered). May throw: the connection
/// then ends at once (the client finds it lost), and no on_end runs.
using session_factory = std::function<session(const peer_info& peer, context_ref client)>;

namespace detail {

/// The peer of an accepted socket on `transport`: its address or credentials (id left 0).
peer_info peer_of(const socket& accepted, transport_kind transport);
/// The peer of a connected socket for a log line: "tcp 127.0.0.1:41234", "uds pid P uid U gid G"
/// (a socket pair's too), or "an unknown peer".
std::string describe_peer(const socket& connected);

/// What an accepted connection needs to start its session.
struct session_start {
  std::shared_ptr<const session_factory> make;
  peer_info peer;
};

}  // namespace detail

}  // namespace courier::net
