#pragma once
/// @file
/// Remote actors: the connection actor that makes a peer in another process look like a local
/// actor of the same interface type, and serves a local actor to the peer.
///
/// `connection<Out, In>` owns one transport connection (its wire stream, engine, clock and reactor
/// link) and has two halves that share its turn:
/// - the **outbound** half implements interface `Out`: the `actor_ref<Out>` a client gets from
///   `node::connect<Out>` is a ref to it, so `send`, `request(...).then`, `ask`, `delayed_send` and
///   monitors are the local ones. Its handler for each message encodes the frame (a `send` when no
///   one waits, else a `call` with the next transaction id) and keeps the request's promise in the
///   call table (net/detail/call_table.hpp); the reply frame settles that promise.
/// - the **inbound** half serves `actor_ref<In>`: it decodes each call or send by token (the table of
///   wire_interface<In>), hands it to the served actor as a request (or a send), and encodes the
///   reply as RETURN, a failure as ERROR with its `errc` number. The handler may defer its reply; the
///   connection answers when the promise is answered. A `$SVC` call is answered from In's table.
/// `client_connection<I>` (connect: outbound only) and `server_connection<I>` (serve: inbound only)
/// name the two uses; a connection with both calls and serves on one transport connection.
///
/// When the connection is lost, every call in flight fails with errc::connection_lost and the actor
/// stops with that reason, so monitors see `down` with connection_lost. Like any actor it runs until
/// it stops: dropping the last ref does not close the connection; `ref.stop()` (or node::stop)
/// does, and closes its socket at once even while other refs to it remain.
///
/// It is an ordinary actor: whoever polls the reactor (a worker about to park, an embedded host's run
/// call, or a node's own thread: node.hpp) only turns socket readiness into one `detail::io_ready`
/// message at a time; reading, decoding, dispatching and writing happen in the connection's turn,
/// and what a turn queued is written in one write at its end (on_turn_end).
///
/// This template is the typed shell only: encoding `Out`'s messages, decoding and dispatching
/// `In`'s at a compile-time position. Everything else (the turn protocol, back-pressure, dynamic
/// calls, child contexts, routing, sessions) is the compiled core it derives from
/// (connection_core.hpp), to which its other messages forward.
///
/// Thread-safety: the actor's state is touched only in its own turns. Refs to it are ordinary actor
/// refs.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <typeinfo>
#include <utility>

#include "courier/actor.hpp"
#include "courier/detail/message.hpp"
#include "courier/net/connection_config.hpp"
#include "courier/net/context.hpp"
#include "courier/net/detail/connection_core.hpp"
#include "courier/net/detail/wire_interface.hpp"
#include "courier/net/services.hpp"
#include "courier/net/session.hpp"
#include "courier/net/transport.hpp"
#include "courier/response_promise.hpp"

namespace courier::net {

namespace detail {

template <class T>
class interface_messages;
template <class... Rs, class... Ms>
class interface_messages<courier::interface<Rs(Ms)...>> {
 public:
  template <class Derived, class... Extra>
  using actor_base = courier::actor<Derived, std::remove_cvref_t<Ms>..., Extra...>;
};

/// Queues `Msg` to a connection actor of type `Conn` (the node's close request at its stop).
template <class Msg, class Conn>
void post_to_connection(courier::detail::actor_base* base) {
  post_turn_message<Msg>(base, Conn::template type_index<Msg>);
}

}  // namespace detail

/// The interface of a connection half that is not used: no messages.
using no_interface = courier::interface<>;

/// One transport connection's actor: it implements `Out` by forwarding to the peer and serves `In`
/// by handing the peer's calls to a local actor.
template <class Out, class In>
class connection
    : public detail::interface_messages<Out>::template actor_base<
          connection<Out, In>, detail::io_ready, detail::connection_tick, detail::read_retry, detail::close_request,
          detail::child_exited, detail::deferred_answer, detail::dynamic_call, detail::open_child, detail::close_child>,
      private detail::connection_core {
  using actor_base = courier::detail::actor_base;
  using table = detail::wire_interface<In>;
  static constexpr bool calls_out = detail::wire_interface<Out>::size != 0;
  static constexpr bool serves = table::size != 0;
  static connection* of(actor_base* a) noexcept { return static_cast<connection*>(a); }
  static courier::detail::drive_ops::descriptors drive_hold(actor_base* a) noexcept { return of(a)->hold_io(); }
  static void drive_readable(actor_base* a) noexcept { of(a)->io_readable(); }
  static void drive_release(actor_base* a) noexcept { of(a)->release_io(); }
  static void drive_signal(actor_base* a) noexcept { of(a)->signal_driver(); }

 public:
  /// A plain thread whose call wakes the idle connection encodes and writes it itself (no worker
  /// is woken for it), and a plain thread's `ask` reads its reply itself (courier::detail::drive_ops).
  static constexpr courier::detail::drive_ops courier_drive_ops{&drive_hold, &drive_readable, &drive_release,
                                                                &drive_signal};
  /// Writes what a batch of its mailbox queued before it takes the next batch: a sender as fast as
  /// the connection then finds it writing, not taking its messages one or two at a time (each take
  /// moves the mailbox's cache line between the two threads), and the batches grow to a turn.
  static constexpr bool courier_turn_end_per_batch = true;

  /// The connecting side (node::connect, adopt): `child` is a pipe server's process, `served` what
  /// this side serves to the peer (may be empty), `services` the dynamic services it serves in the
  /// parent context (may be null). `opened`, if given, is told once how the handshake ended: an
  /// empty error when it was accepted, else why the connection was lost (node::connect waits on it
  /// from a plain thread).
  connection(std::shared_ptr<detail::node_core> node, socket sock, std::optional<child_process> child,
             const connection_config& cfg, std::shared_ptr<detail::handshake_outcome> opened = nullptr,
             actor_ref<In> served = {}, std::shared_ptr<const service_table> services = nullptr)
      : detail::connection_core(std::move(node), std::move(sock), std::move(child), cfg, std::move(opened),
                                std::move(services)),
        target_(std::move(served)) {}

  /// The accepting side (node::serve): `share` counts this connection among its listener's and
  /// holds the receive memory budget its blocks count against; `services` are the dynamic
  /// services it serves besides In's (may be null); `context`, a context actor (serve_locally)
  /// that serves the parent context's other calls in its own turns (may be empty); `session`, the
  /// factory whose session (session.hpp) serves the parent context instead of `services`.
  connection(std::shared_ptr<detail::node_core> node, socket sock, actor_ref<In> target, const connection_config& cfg,
             std::shared_ptr<detail::listener_share> share = nullptr,
             std::shared_ptr<const service_table> services = nullptr, context_ref context = {},
             std::optional<detail::session_start> session = std::nullopt)
      : detail::connection_core(std::move(node), std::move(sock), cfg, std::move(share), std::move(services),
                                std::move(context), std::move(session)),
        target_(std::move(target)) {}

  void on_start() {
    detail::shell_binding shell;
    shell.actor = this;
    shell.io_ready = connection::template type_index<detail::io_ready>;
    shell.connection_tick = connection::template type_index<detail::connection_tick>;
    shell.read_retry = connection::template type_index<detail::read_retry>;
    shell.child_exited = connection::template type_index<detail::child_exited>;
    shell.context_map = courier::detail::implementation<connection, detail::context_calls>::indices;
    shell.close = &detail::post_to_connection<detail::close_request, connection>;
    shell.post_answer = &incoming::post_to<connection>;
    shell.read = &read_with_shell;
    shell.refuse_sends = &refuse_sends_of;
    if constexpr (serves) shell.describe = &table::describe;
    shell.calls_out = calls_out;
    shell.serves = serves;
    shell.served_capacity = target_.mailbox_capacity();
    shell.object_bytes = sizeof(connection);
    start(shell);
  }

  /// A message of the interface: a `send` frame when nobody waits, else a `call`.
  template <class M>
  requires(Out::template accepts<M>) response_promise<typename Out::template reply_type<M>> on(const M& msg) {
    using R = typename Out::template reply_type<M>;
    static_assert(!wire::views_frame<R>,
                  "courier: a reply decoded from the wire crosses a mailbox hop to its continuation, so it cannot "
                  "hold plain std::string_view or std::span views into the frame: use courier::wire::string_ref / "
                  "bytes_ref (a view that keeps the receive buffer alive) or std::string / std::vector<std::byte>");
    auto promise = this->template make_response_promise<R>();
    if (refused_at_call(promise, typeid(M).name())) return {};
    if (!promise.pending()) {  // one-way: nobody waits; a send that cannot be encoded is a dead letter
      if (auto ok = wire::encode(stream_.frames(), msg, wire::route{wire::kind::send, 0, 0}, limits()); !ok) {
        counters_.encode_failures.fetch_add(1, std::memory_order_relaxed);
        dead_letter(typeid(M).name(), dead_letter_reason::invalid_argument);
      }
      return {};
    }
    if (calls_.in_flight() >= stream_.config().max_in_flight) {
      promise.fail(courier::error(errc::mailbox_full, "too many calls in flight on this connection"));
      return {};
    }
    const std::uint64_t tid = calls_.next_id();
    if (auto ok = wire::encode(stream_.frames(), msg, wire::route{wire::kind::call, tid, 0}, limits()); !ok) {
      promise.fail(courier::error(errc::invalid_argument, "cannot encode the call: " + ok.err().message()));
      return {};
    }
    stream_.engine().call_sent();  // an orderly close waits for its answer
    calls_.insert(std::move(promise));
    return {};
  }

  // The core's messages and context_ref's calls: handled by the core.
  response_promise<wire::items_ref> on(const detail::dynamic_call& c) {
    call_dynamic(c, this->template make_response_promise<wire::items_ref>());
    return {};
  }
  response_promise<opened_context> on(const detail::open_child& o) {
    open_child(o, this->template make_response_promise<opened_context>());
    return {};
  }
  response_promise<unit> on(const detail::close_child& c) {
    close_child(c, this->template make_response_promise<unit>());
    return {};
  }
  void on(const detail::io_ready&) { on_io_ready(); }
  void on(const detail::read_retry&) { on_read_retry(); }
  void on(const detail::connection_tick&) { on_tick(); }
  void on(const detail::close_request&) { on_close_request(); }
  void on(const detail::child_exited&) { on_child_exited(); }
  void on(const detail::deferred_answer& a) { on_deferred_answer(a); }
  void on_turn_end() { turn_end(); }
  void on_stop() {
    stop();
    target_.reset();
  }

  // The engine's frames (the shell is the frame handler of every read): a call or send of In's
  // in the parent context is dispatched here, at its compile-time position; the rest goes to the
  // core's routing.
  void on_frame(const wire::frame_view& f) {
    if constexpr (serves) {
      const bool is_call = f.kind() == wire::kind::call;
      if ((is_call || f.kind() == wire::kind::send) && f.context_id() == 0) {
        if (const std::size_t p = table::find(f.token()); p != table::size) {
          call_seen_ = true;
          table::visit(p, [&]<std::size_t P>() { dispatch<P>(f, is_call); });
          return;
        }
      }
    }
    route_frame(f);
  }
  using detail::connection_core::in_flight;
  using detail::connection_core::on_bad_reply;
  using detail::connection_core::on_context_ended;
  using detail::connection_core::on_context_open;

 private:
  static void read_with_shell(detail::connection_core& core) {
    auto& self = static_cast<connection&>(core);
    if (const auto budget = self.read_budget()) self.after_read(self.stream_.receive(self, *budget));
  }
  static void refuse_sends_of(actor_base* a, bool on) { of(a)->refuse_sends(on); }

  template <std::size_t P>
  void dispatch(const wire::frame_view& f, bool is_call) {
    using M = typename table::template message_at<P>;
    using R = typename table::template reply_at<P>;
    static_assert(!wire::views_frame<M>,
                  "courier: a message served over the wire crosses a mailbox hop, so its fields cannot be plain "
                  "std::string_view or std::span views into the frame: declare them courier::wire::string_ref / "
                  "bytes_ref (a view that keeps the receive buffer alive) or std::string / std::vector<std::byte>");
    M msg{};
    if (auto ok = wire::decode(f, msg, stream_.frame_owner()); !ok) {
      if (is_call) {
        detail::write_error_frame(stream_, f.transaction_id(), f.context_id(), f.token(),
                                  courier::error(wire::make_error_code(ok.err().code), ok.err().message()));
        stream_.reply_sent();
      }
      return;
    }
    if (!is_call) {
      // Each send counts as in flight until a marker's reply covers it, so sends are held to
      // max_in_flight like calls (not max_in_flight markers of 256 sends each).
      ++in_flight_;
      if (++sends_since_marker_ < marker_every()) {
        target_.send(std::move(msg));
        return;
      }
      const std::size_t covered = std::exchange(sends_since_marker_, 0);
      target_.request(std::move(msg))
          .then([this, covered](const R&) { settled(covered); },
                [this, covered](const courier::error&) { settled(covered); });
      return;
    }
    ++in_flight_;
    // The local call path, for calls: when the served actor is idle, its handler runs now, inside
    // this turn (the push that wakes it is the claim), and so do the reply's continuation and its
    // encoding, later in the same turn. Busy, it gets the message as usual. One-way sends are
    // left to the mailbox, where the served actor handles a flood of them in batches (nested one
    // by one, END fell by about 10% in the same runs).
    courier::detail::inline_call_scope local(target_.base());
    target_.request(std::move(msg))
        .then(
            [this, tid = f.transaction_id(), ctx = f.context_id(), tok = f.token()](const R& value) {
              if (!stream_.finished()) {
                if (auto ok = detail::encode_reply(stream_.frames(), tok, tid, ctx, value, stream_.send_limits()); !ok)
                  detail::write_error_frame(
                      stream_, tid, ctx, tok,
                      courier::error(errc::handler_failed, "cannot encode the reply: " + ok.err().message()));
                stream_.reply_sent();
              }
              settled();
            },
            [this, tid = f.transaction_id(), ctx = f.context_id(), tok = f.token()](const courier::error& e) {
              if (!stream_.finished()) {
                detail::write_error_frame(stream_, tid, ctx, tok, e);
                stream_.reply_sent();
              }
              settled();
            });
  }

  actor_ref<In> target_;
  std::uint32_t sends_since_marker_ = 0;
};

/// The connecting side of a connection that only calls: implements `I` by forwarding to the peer.
template <class I>
using client_connection = connection<I, no_interface>;

/// The accepting side of a connection that only serves: hands the peer's calls to an actor_ref<I>.
template <class I>
using server_connection = connection<no_interface, I>;

}  // namespace courier::net
