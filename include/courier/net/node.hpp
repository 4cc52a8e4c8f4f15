#pragma once
/// @file
/// A system's door to the network: serve an actor, services or a session per connection on an
/// endpoint; connect to a served one.
///
///     courier::system sys;
///     courier::net::node net(sys);                                   // after the system: goes first
///     auto server = net.serve<calc_api>(calc, opts.where);            // pipe, uds or tcp
///     courier::actor_ref<calc_api> calc = *net.connect<calc_api>(opts.where);   // in the client
///     auto sum = calc.ask(add{2, 3}, 1s);                            // the local API, over the wire
///
/// A node owns one reactor (epoll, edge-triggered) that turns socket readiness into an `io_ready`
/// message for the connection actor (net/detail/connection.hpp) and accepts connections.
///
/// Who polls the sockets depends on the system's mode (`polled_by_system()` says which):
/// - **threaded**: the system's workers poll the reactor when they would park, so the worker that
///   a socket wakes runs that connection's turn itself: reading, decoding, the served actor's
///   handler and writing, with no hand-off between threads.
/// - **embedded** (`config::embedded()`, with `wake_fd`): the host's loop, through the loop
///   contract. The reactor's epoll descriptor joins `wake_fd`, so the one descriptor the host
///   watches turns readable for socket readiness too, and every run call (`poll`, `run_one`,
///   `run_until_idle`) and the driving thread's waits in `ask` and `inbox::receive` dispatch it
///   first. The node starts no thread; connections run on the host's thread.
/// - **deterministic**: the test's run calls (`run_one`, `run_step`, `run_until_idle`, `poll`) and
///   its waits in `ask` look at the sockets without waiting, as embedded run calls do; no thread.
///   A socket is read when the test runs the system, so a conversation over a socket pair replays
///   the same every time (tests/net/connection_core.test.cpp).
/// - **embedded with `config::on_wake`** (no `wake_fd` to join): a reactor thread of the node's
///   own waits on epoll and sends `io_ready`, which wakes the host like any message from another
///   thread.
///
/// Lifetime: declare the node after the system, so it is destroyed first. Destroying it (or
/// stop()) stops accepting and closes every connection in order (docs/protocol.md section 11):
/// each sends close; a served call received before it is still answered, later ones are refused
/// with 260; a client's calls in flight still get their answers. Whatever is still open after the
/// grace (2 s by default) is closed at once, and its calls in flight fail with
/// errc::connection_lost. stop() joins the node's thread if it has one. On the driving thread of an
/// embedded or deterministic system, stop() runs the system while the connections close (as
/// `ask` does), since nobody else would.
///
/// Thread-safety: serve, connect, stop and the counters may be called from any thread.

#include <chrono>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "courier/error.hpp"
#include "courier/net/connection_config.hpp"
#include "courier/net/detail/acceptor.hpp"
#include "courier/net/detail/connection.hpp"
#include "courier/net/detail/node_core.hpp"
#include "courier/net/endpoint.hpp"
#include "courier/net/session.hpp"
#include "courier/net/transport.hpp"
#include "courier/system.hpp"

namespace courier::net {

/// What serve() reports: where it listens (the real port when port 0 was asked).
struct serving {
  std::string where;
  std::uint16_t port = 0;
};

class node {
 public:
  explicit node(courier::system& sys) : core_(std::make_shared<detail::node_core>(sys)) {}
  node(const node&) = delete;
  node& operator=(const node&) = delete;
  ~node() { stop(); }

  /// Connects to a server that serves `I` at `where` (within cfg.connect_timeout) and returns a
  /// ref that sends to it. Waits for the handshake (up to cfg.handshake_timeout) when called from
  /// a plain thread of a threaded system, so a refused or mismatched server is an error here;
  /// elsewhere (an actor, an embedded system), or with cfg.wait_for_handshake false, it returns
  /// at once and the first call reports such a failure.
  template <class I>
  courier::result<actor_ref<I>> connect(const endpoint& where, const connection_config& cfg = {}) {
    auto c = net::connect(where, cfg.connect_timeout);
    if (!c) return c.err();
    return start_client<I>(std::move(c->sock), std::move(c->child), cfg, "connect " + to_string(where));
  }

  /// Connects to a server at `where` for calls by token (context.hpp): the parent context of the
  /// connection, whose services (typed or dynamic) are called with items written at the call.
  /// `services` are what this side serves the server in the parent (the server's calls back to
  /// its client); may be null. Waits for the handshake as connect<I> does.
  courier::result<context_ref> connect(const endpoint& where, const connection_config& cfg = {},
                                       std::shared_ptr<const service_table> services = nullptr) {
    auto c = net::connect(where, cfg.connect_timeout);
    if (!c) return c.err();
    auto conn = start_connection<connection<no_interface, no_interface>>(
        std::move(c->sock), std::move(c->child), cfg, "connect " + to_string(where), std::move(services));
    if (!conn) return conn.err();
    return context_ref(actor_ref<detail::context_calls>(std::move(*conn)), 0);
  }

  /// A client on a stream that is already connected (a socket pair, an inherited descriptor):
  /// like connect(), without the transport's part (cfg.wait_for_handshake false: no wait). The
  /// descriptor is made non-blocking.
  template <class I>
  courier::result<actor_ref<I>> adopt(socket connected, const connection_config& cfg = {}) {
    if (auto ok = make_nonblocking(connected.fd()); !ok) return ok.err();
    return start_client<I>(std::move(connected), std::nullopt, cfg, "adopt");
  }

  /// What the connection behind `ref` (a ref from connect() or adopt()) has counted; nothing when
  /// `ref` is not one of this node's connections or the connection has ended. Any thread.
  template <class I>
  std::optional<connection_counters> counters(const actor_ref<I>& ref) const {
    return core_->counters_of(ref.base());
  }

  /// The parent context of the connection behind `ref` (from connect<I>, adopt<I> or connect_duplex): the
  /// same connection called by token, typed and dynamic services alike, and its children opened;
  /// empty when `ref` is not one of this node's connections or the connection has ended.
  template <class I>
  context_ref context_of(const actor_ref<I>& ref) const {
    return core_->context_of(ref.base());
  }

  /// One connection that calls and serves, on a stream that is already connected (a socket pair,
  /// an inherited descriptor): the returned ref sends `Out`'s messages to the peer, and the peer's
  /// calls go to `served`. The two ends take opposite sides of the protocol (`side`: one
  /// wire::role::initiator, the other wire::role::acceptor). No wait for the handshake: the first
  /// call reports a failure. The descriptor is made non-blocking.
  template <class Out, class In>
  courier::result<actor_ref<Out>> connect_duplex(socket connected, actor_ref<In> served, wire::role side,
                                                 const connection_config& cfg = {}) {
    if (auto ok = make_nonblocking(connected.fd()); !ok) return ok.err();
    using duplex_connection = connection<Out, In>;
    const spawn_options opts{.mailbox_capacity = cfg.mailbox_capacity};
    auto conn =
        side == wire::role::initiator
            ? core_->system().template spawn<duplex_connection>(
                  opts, core_, std::move(connected), std::optional<child_process>{}, cfg, nullptr, std::move(served))
            : core_->system().template spawn<duplex_connection>(opts, core_, std::move(connected), std::move(served),
                                                                cfg, core_->make_share(cfg));
    return actor_ref<Out>(std::move(conn));
  }

  /// Serves dynamic services on one stream that is already connected.
  courier::result<void> serve_connection(std::shared_ptr<const service_table> services, socket connected,
                                         const connection_config& cfg = {}) {
    if (auto ok = make_nonblocking(connected.fd()); !ok) return ok.err();
    core_->system().template spawn<server_connection<no_interface>>(
        core_, std::move(connected), actor_ref<no_interface>{}, cfg, core_->make_share(cfg), std::move(services));
    return {};
  }

  /// Serves `target` on one stream that is already connected (the server side of adopt()).
  template <class I>
  courier::result<void> serve_connection(actor_ref<I> target, socket connected, const connection_config& cfg = {}) {
    if (auto ok = make_nonblocking(connected.fd()); !ok) return ok.err();
    core_->system().template spawn<server_connection<I>>(core_, std::move(connected), std::move(target), cfg,
                                                         core_->make_share(cfg));
    return {};
  }

  /// Serves `target` at `where`: each connection accepted there (uds, tcp), or the one connection
  /// `where` names (pipe's stdin, a session's: names_one_connection), gets its own connection
  /// actor, which hands calls to `target`.
  template <class I>
  courier::result<serving> serve(actor_ref<I> target, const endpoint& where, const connection_config& cfg = {}) {
    return serve_with(std::move(target), nullptr, where, cfg);
  }

  /// Serves dynamic services (services.hpp) at `where`, as serve(target, where) does.
  courier::result<serving> serve(std::shared_ptr<const service_table> services, const endpoint& where,
                                 const connection_config& cfg = {}) {
    return serve_with(actor_ref<no_interface>{}, std::move(services), where, cfg);
  }

  /// Serves a context actor (serve_locally) at `where`, as serve(target, where) does. Every
  /// connection hands the calls of its parent context to that one actor, whose handlers run in
  /// its own turns, one at a time (state shared by all clients needs no lock); children the
  /// clients open come from `children` (a table whose factory makes them; may be null: none).
  courier::result<serving> serve_on(context_ref context, const endpoint& where, const connection_config& cfg = {},
                                    std::shared_ptr<const service_table> children = nullptr) {
    return serve_with(actor_ref<no_interface>{}, std::move(children), where, cfg, std::move(context));
  }

  /// The next session this node serves gets the number `first` in its peer_info.id, the ones
  /// after it the numbers that follow. For a server whose sessions run on nodes of their own (a
  /// thread or a process each): its acceptor numbers them, so that the number is the server's.
  void number_sessions_from(std::uint64_t first) noexcept { core_->number_sessions_from(first); }

  /// This node's connections count their receive memory against `budget`, instead of a budget of
  /// cfg.max_receive_memory per listener: a server whose sessions run on nodes of their own (a
  /// thread each) keeps one budget for the process. Call it before serving.
  void count_receive_memory_against(std::shared_ptr<detail::receive_memory> budget) noexcept {
    core_->count_receive_memory_against(std::move(budget));
  }

  /// Serves a session per connection (session.hpp) at `where`: each connection the server accepts
  /// gets the session `make` returns for it (for pipe, the one connection on stdin). At most
  /// cfg.max_connections sessions at once; cfg.idle_timeout ends idle ones.
  courier::result<serving> serve_sessions(session_factory make, const endpoint& where,
                                          const connection_config& cfg = {}) {
    auto factory = std::make_shared<const session_factory>(std::move(make));
    std::weak_ptr<detail::node_core> weak = core_;
    auto start = [weak, factory, cfg, kind = where.kind](socket sock, std::shared_ptr<detail::listener_share> share) {
      auto core = weak.lock();
      if (!core) return;
      detail::session_start session{factory, detail::peer_of(sock, kind)};
      session.peer.id = core->next_session_id();
      core->system().template spawn<server_connection<no_interface>>(core, std::move(sock), actor_ref<no_interface>{},
                                                                     cfg, std::move(share), nullptr, context_ref{},
                                                                     std::move(session));
    };
    if (names_one_connection(where)) {
      auto sock = connection_socket(where);  // non-blocking, close-on-exec
      if (!sock) return sock.err();
      start(std::move(*sock), core_->make_share(cfg));
      return served_here(where);
    }
    auto l = net::listen(where);
    if (!l) return l.err();
    serving s{l->describe(), l->port()};
    auto share = core_->make_share(cfg);
    auto a = std::make_unique<detail::acceptor>(
        std::move(*l), [start, share](socket sock) { start(std::move(sock), share); }, share, cfg.max_connections);
    const int fd = a->listening().fd();
    if (auto ok = core_->io().add(fd, EPOLLIN | EPOLLET, a.get()); !ok) return ok.err();
    core_->keep(std::move(a));
    return s;
  }

  /// The same as serve(services, where).
  courier::result<serving> serve_on(std::shared_ptr<const service_table> services, const endpoint& where,
                                    const connection_config& cfg = {}) {
    return serve(std::move(services), where, cfg);
  }

 private:
  static serving served_here(const endpoint& where) {
    return serving{where.kind == transport_kind::pipe ? std::string("pipe (stdin)") : to_string(where), 0};
  }

  template <class I>
  courier::result<serving> serve_with(actor_ref<I> target, std::shared_ptr<const service_table> services,
                                      const endpoint& where, const connection_config& cfg, context_ref context = {}) {
    if (names_one_connection(where)) {
      auto sock = connection_socket(where);  // non-blocking, close-on-exec
      if (!sock) return sock.err();
      core_->system().template spawn<server_connection<I>>(core_, std::move(*sock), std::move(target), cfg,
                                                           core_->make_share(cfg), std::move(services),
                                                           std::move(context));
      return served_here(where);
    }
    auto l = net::listen(where);
    if (!l) return l.err();
    serving s{l->describe(), l->port()};
    std::weak_ptr<detail::node_core> weak = core_;
    auto share = core_->make_share(cfg);
    auto a = std::make_unique<detail::acceptor>(
        std::move(*l),
        [weak, target, cfg, share, services, context](socket sock) {
          if (auto core = weak.lock())
            core->system().template spawn<server_connection<I>>(core, std::move(sock), target, cfg, share, services,
                                                                context);
        },
        share, cfg.max_connections);
    const int fd = a->listening().fd();
    if (auto ok = core_->io().add(fd, EPOLLIN | EPOLLET, a.get()); !ok) return ok.err();
    core_->keep(std::move(a));
    return s;
  }

 public:
  /// The same as serve(target, where).
  template <class I>
  courier::result<serving> serve_on(actor_ref<I> target, const endpoint& where, const connection_config& cfg = {}) {
    return serve(std::move(target), where, cfg);
  }

  /// Connections alive (client and server side).
  std::size_t connections() const { return core_->connections(); }
  /// Blocks until a connection was made and none is left (a --pipe server's end of life), or
  /// stop(); false on time-out.
  bool wait_no_connections(std::chrono::milliseconds timeout) { return core_->wait_no_connections(timeout); }
  /// Blocks until stop() is called from another thread.
  void wait_stopped() { core_->wait_stopped(); }
  /// True when the system polls the node's sockets itself (threaded, and embedded with a
  /// wake_fd); false when the node runs a reactor thread of its own (see "Who polls the sockets").
  bool polled_by_system() const noexcept { return core_->polled_by_system(); }

  /// Stops accepting, closes every connection (in order where the peer still listens), joins
  /// the reactor thread if there is one. Idempotent. On the driving thread of a manual system it
  /// runs the system until the connections have closed (or `grace` passed).
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(2)) { core_->stop(grace); }

 private:
  // Spawns the client connection and, from a plain thread of a threaded system, waits for the
  // handshake's outcome. Told by the connection itself rather than asked: a connection lost
  // before an ask reached it (a pipe server that exits at once) would answer actor_stopped and
  // lose the reason.
  template <class I>
  courier::result<actor_ref<I>> start_client(socket sock, std::optional<child_process> child,
                                             const connection_config& cfg, const std::string& what) {
    auto conn = start_connection<client_connection<I>>(std::move(sock), std::move(child), cfg, what);
    if (!conn) return conn.err();
    return actor_ref<I>(std::move(*conn));
  }

  template <class Connection>
  courier::result<actor_ref<Connection>> start_connection(socket sock, std::optional<child_process> child,
                                                          const connection_config& cfg, const std::string& what,
                                                          std::shared_ptr<const service_table> services = nullptr) {
    auto opened = std::make_shared<detail::handshake_outcome>();
    auto outcome = opened->outcome.get_future();
    const spawn_options options{.mailbox_capacity = cfg.mailbox_capacity};
    const bool waits = cfg.wait_for_handshake && core_->system().settings().mode == courier::scheduling::threaded &&
                       courier::detail::current_actor == nullptr;
    // The engine's own handshake time-out ends the wait; the extra second is a backstop.
    const auto wait_until = std::chrono::steady_clock::now() + cfg.handshake_timeout + std::chrono::seconds(1);
    actor_ref<Connection> conn;
    if (waits && courier::detail::may_run_here(courier::detail::core_of(core_->system()))) {
      // This thread runs the connection's first turns itself, as a plain thread's ask does: it
      // writes the handshake and reads the answer, and no worker is woken for either (each
      // wake-up costs more here than the turn). The connection is then idle, so this thread's
      // first call runs it too.
      conn = courier::detail::caller_starts_access::spawn<Connection>(core_->system(), options, core_, std::move(sock),
                                                                      std::move(child), cfg, opened,
                                                                      actor_ref<no_interface>{}, std::move(services));
      courier::detail::drive_while_waiting(
          conn.base(), opened->settled,
          std::chrono::duration_cast<std::chrono::nanoseconds>(wait_until.time_since_epoch()).count());
    } else {
      conn = core_->system().template spawn<Connection>(options, core_, std::move(sock), std::move(child), cfg, opened,
                                                        actor_ref<no_interface>{}, std::move(services));
    }
    if (waits) {
      if (outcome.wait_until(wait_until) != std::future_status::ready) {
        conn.stop();
        return courier::error(errc::request_timeout, what + ": no handshake in time");
      }
      courier::error e;
      try {
        e = outcome.get();
      } catch (const std::future_error&) {  // the actor was destroyed without starting (system shut down)
        e = courier::error(errc::connection_lost, what + ": the connection never started");
      }
      if (e) {
        conn.stop();
        return e;
      }
    }
    return conn;
  }

  std::shared_ptr<detail::node_core> core_;
};

}  // namespace courier::net
