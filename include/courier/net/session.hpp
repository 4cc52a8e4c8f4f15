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

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "courier/actor_ref.hpp"
#include "courier/error.hpp"
#include "courier/net/context.hpp"
#include "courier/net/peer.hpp"

namespace courier::net {

class service_table;

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

/// What an accepted connection needs to start its session.
struct session_start {
  std::shared_ptr<const session_factory> make;
  peer_info peer;
};

}  // namespace detail

}  // namespace courier::net
