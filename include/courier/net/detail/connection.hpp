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
/// Thread-safety: the actor's state is touched only in its own turns. Refs to it are ordinary actor
/// refs.

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "courier/actor.hpp"
#include "courier/detail/message.hpp"
#include "courier/detail/runtime.hpp"
#include "courier/net/connection_config.hpp"
#include "courier/net/context.hpp"
#include "courier/net/local_context.hpp"
#include "courier/net/detail/call_table.hpp"
#include "courier/net/detail/connection_base.hpp"
#include "courier/net/detail/wire_stream.hpp"
#include "courier/net/detail/reactor.hpp"
#include "courier/net/transport.hpp"
#include "courier/net/detail/wire_interface.hpp"
#include "courier/net/services.hpp"
#include "courier/net/session.hpp"
#include "courier/pool.hpp"
#include "courier/response_promise.hpp"

namespace courier::net {

/// The interface of a connection half that is not used: no messages.
using no_interface = courier::interface<>;

/// One transport connection's actor: it implements `Out` by forwarding to the peer and serves `In`
/// by handing the peer's calls to a local actor.
template <class Out, class In>
class connection
    : public detail::interface_messages<Out>::template actor_base<connection<Out, In>, detail::io_ready, detail::connection_tick,
                                                                    detail::read_retry, detail::close_request,
                                                                    detail::child_exited, detail::deferred_answer,
                                                                    detail::dynamic_call, detail::open_child,
                                                                    detail::close_child>,
      private detail::connection_base {
  using actor_base = courier::detail::actor_base;
  using table = detail::wire_interface<In>;
  static constexpr bool calls_out = detail::wire_interface<Out>::size != 0;
  static constexpr bool serves = table::size != 0;
  static connection* of(actor_base* a) noexcept { return static_cast<connection*>(a); }
  static int drive_hold(actor_base* a) noexcept { return of(a)->hold_io(); }
  static void drive_readable(actor_base* a) noexcept { of(a)->io_readable(); }
  static void drive_release(actor_base* a) noexcept { of(a)->release_io(); }
  static int drive_signal_fd(actor_base* a) noexcept { return of(a)->driver_signal_fd(); }
  static void drive_signal(actor_base* a) noexcept { of(a)->signal_driver(); }

 public:
  /// A plain thread whose call wakes the idle connection encodes and writes it itself (no worker
  /// is woken for it), and a plain thread's `ask` reads its reply itself (courier::detail::drive_ops).
  static constexpr courier::detail::drive_ops courier_drive_ops{&drive_hold, &drive_readable, &drive_release,
                                                                &drive_signal_fd, &drive_signal};
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
      : detail::connection_base(std::move(node), std::move(sock), wire::role::initiator, cfg),
        target_(std::move(served)),
        services_(std::move(services)),
        child_(std::move(child)),
        opened_(std::move(opened)),
        calls_(cfg.max_in_flight) {}

  /// The accepting side (node::serve): `share` counts this connection among its listener's and
  /// holds the receive memory budget its blocks count against; `services` are the dynamic
  /// services it serves besides In's (may be null); `context`, a context actor (serve_locally)
  /// that serves the parent context's other calls in its own turns (may be empty); `session`, the
  /// factory whose session (session.hpp) serves the parent context instead of `services`.
  connection(std::shared_ptr<detail::node_core> node, socket sock, actor_ref<In> target, const connection_config& cfg,
             std::shared_ptr<detail::listener_share> share = nullptr,
             std::shared_ptr<const service_table> services = nullptr, context_ref context = {},
             std::optional<detail::session_start> session = std::nullopt)
      : detail::connection_base(std::move(node), std::move(sock), wire::role::acceptor, cfg, std::move(share)),
        target_(std::move(target)),
        services_(std::move(services)),
        context_(std::move(context)),
        calls_(cfg.max_in_flight),
        session_start_(std::move(session)) {}

  void on_start() {
    bounded_mailbox_ = this->mailbox_capacity() != 0;
    attach(std::make_unique<detail::reactor_registration_for<connection>>(this->self()), this,
           context_map(),
           &detail::post_to_connection<detail::close_request, connection>);
    watch_child();
    start_session();
    last_call_ = std::chrono::steady_clock::now();
    drain();
  }

  /// A message of the interface: a `send` frame when nobody waits, else a `call`.
  template <class M>
    requires(Out::template accepts<M>)
  response_promise<typename Out::template reply_type<M>> on(const M& msg) {
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
        courier::detail::dead_letter(this->core(), this->id(), typeid(M).name(), dead_letter_reason::invalid_argument);
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

  /// A dynamic call or send (context_ref): its items were encoded at the call; here they become
  /// a frame in the context it names.
  response_promise<wire::items_ref> on(const detail::dynamic_call& c) {
    auto promise = this->template make_response_promise<wire::items_ref>();
    const bool one_way = !promise.pending();
    if (refused_at_call(promise, "a dynamic send")) return {};
    auto refuse = [&](courier::error e) {
      if (one_way)
        courier::detail::dead_letter(this->core(), this->id(), "a dynamic send", dead_letter_reason::invalid_argument);
      else
        promise.fail(std::move(e));
    };
    if (c.items.fault() != nullptr) {
      refuse(*c.items.fault());
      return {};
    }
    if (c.context != 0 && !stream_.engine().context_usable(c.context)) {
      refuse(courier::error(errc::no_such_context,
                            "context " + std::to_string(c.context) + " is not open (never opened, or closed)"));
      return {};
    }
    if (!one_way && calls_.in_flight() >= stream_.config().max_in_flight) {
      promise.fail(courier::error(errc::mailbox_full, "too many calls in flight on this connection"));
      return {};
    }
    const std::uint64_t tid = one_way ? 0 : calls_.next_id();
    if (auto ok = append_frame(wire::frame_header{wire::protocol_version, one_way ? wire::kind::send : wire::kind::call, 0, 0,
                                                  c.token, tid, c.context},
                               c.items.bytes());
        !ok) {
      if (one_way) counters_.encode_failures.fetch_add(1, std::memory_order_relaxed);
      refuse(courier::error(errc::invalid_argument, "cannot encode the call: " + ok.err().message()));
      return {};
    }
    if (!one_way) {
      stream_.engine().call_sent();  // an orderly close waits for its answer
      calls_.insert(std::move(promise));
    }
    return {};
  }

  /// Opens a child context at the peer (context_ref::open_child); answered when the peer answers.
  /// Asked during the handshake, it waits for the handshake's end.
  response_promise<opened_context> on(const detail::open_child& o) {
    auto promise = this->template make_response_promise<opened_context>();
    if (!promise.pending()) {  // nobody would learn the child's id
      courier::detail::dead_letter(this->core(), this->id(), "a child context's open without a reply",
                                   dead_letter_reason::invalid_argument);
      return {};
    }
    if (!stream_.finished() && !stream_.open()) {
      opens_waiting_.push_back({o, std::move(promise)});
      return {};
    }
    start_open(o, std::move(promise));  // refuses it when the connection is gone or closing
    return {};
  }

  /// Closes a child in order (context_ref::close), or, for context 0, the connection.
  response_promise<unit> on(const detail::close_child& c) {
    auto promise = this->template make_response_promise<unit>();
    if (c.context == 0) {
      if (promise.pending()) parent_closes_.push_back(std::move(promise));
      on(detail::close_request{});
      return {};
    }
    if (stream_.finished()) {
      if (promise.pending()) promise.fail(why());
      return {};
    }
    const std::uint64_t tid = calls_.next_id();
    if (!stream_.engine().close_context(stream_.frames(), c.context, tid)) {
      if (promise.pending())
        promise.fail(courier::error(errc::no_such_context, "context " + std::to_string(c.context) +
                                                               " is not open here (never opened, closed, or closing)"));
      return {};
    }
    // A one-way close (nobody waits) still takes the id's slot, so no call reuses the id before
    // its answer comes; that answer then counts as a reply nobody waited for.
    calls_.insert(std::move(promise));
    return {};
  }

  void on(const detail::io_ready&) {
    rearm();
    drain();
  }

  void on(const detail::read_retry&) {
    retry_pending_ = false;
    drain();
  }

  void on(const detail::connection_tick&) {
    clock_fired();
    // Bytes that wait in the socket arrived before this turn: they are read before any time-out is
    // judged, so a connection slow to get to its input (a busy worker, a stopped process) does not
    // charge its own delay to the peer (a handshake that came in time, a pong to our ping).
    if (reading() && !stream_.finished()) drain();
    if (idle_due() <= std::chrono::steady_clock::now()) {
      idle_ended_ = true;
      stream_.close("idle for " + std::to_string(stream_.config().idle_timeout.count()) + " ms");
    }
    // While paused for back-pressure (the peer does not read what we send, or the served actor has
    // too many calls), or while every receive block is held, we do not read, so the peer's bytes
    // (its pongs too) wait in the socket: silence then says nothing about the peer, and the
    // keepalive waits with us. Output the peer does not read for the dead-peer time ends the
    // connection all the same (wire_stream::tick).
    stream_.tick(reading());
    if (stream_.finished()) lose();
  }

  // The node is stopping: an orderly close (docs/protocol.md section 11). Calls received before it
  // are still answered and the peer still answers ours; the engine refuses later calls with 260 and
  // ours fail at the call; the connection ends once the close completes, or when the node's grace
  // runs out.
  void on(const detail::close_request&) {
    stream_.close(stream_.engine().side() == wire::role::initiator ? "client stopping" : "server stopping");
    if (stream_.finished()) lose();
  }

  void on(const detail::child_exited&) {
    unwatch_child();
    reap_child();
    if (lost_ && !stopped_) finish_lose();
  }

  void on_turn_end() {
    if (call_seen_) {
      call_seen_ = false;
      if (stream_.config().idle_timeout.count() != 0) last_call_ = std::chrono::steady_clock::now();
    }
    if (stream_.wants_write()) flush();
    if (stream_.finished()) {
      lose();  // replies still owed have nowhere to go
      return;
    }
    if constexpr (calls_out) watch_outbound();
    if (paused_ && may_resume()) {
      paused_ = false;
      drain();
      if (stream_.wants_write()) flush();
    }
    withdraw_held();
    arm_clock(this->self(), reading(), idle_due());
  }

  void on_stop() {
    clock_.cancel();  // the timer holds a ref to this actor until it ends
    child_wait_.cancel();
    const bool orderly = stream_.engine().state() == wire::engine_state::closed;
    fail_all(stream_.finished() ? why() : courier::error(errc::connection_lost, "the connection was stopped"));
    for (response_promise<unit>& p : parent_closes_) {
      if (orderly)
        p.deliver(unit{});
      else
        p.fail(stream_.finished() ? why() : courier::error(errc::connection_lost, "the connection was stopped"));
    }
    parent_closes_.clear();
    if (stream_.open() && !stream_.finished()) {
      stream_.close(stream_.engine().side() == wire::role::initiator ? "client stopped" : "server stopped");
      flush();
    }
    unwatch_child();
    detach();
    reap_child();
    target_.reset();
    context_ = {};
    for (auto& [id, child] : child_contexts_) (void)child.close();
    child_contexts_.clear();
    end_session();
  }

  // The engine's application frames: answers to our calls (the outbound half), calls and sends of
  // the peer (the inbound half).
  void on_frame(const wire::frame_view& f) {
    if (f.kind() == wire::kind::reply || f.kind() == wire::kind::error) {
      // Unknown, or late (the caller timed out): dropped and counted.
      if (calls_.answer(f.transaction_id(), f, stream_.frame_owner()) != detail::answer_outcome::settled) {
        ++stream_.stats().dropped_replies;
        stream_.engine().count_dropped_reply();
      }
      return;
    }
    const bool is_call = f.kind() == wire::kind::call;
    if (!is_call && f.kind() != wire::kind::send) return;
    call_seen_ = true;
    if (context_ && f.context_id() == 0 && (!serves || table::find(f.token()) == table::size)) {
      forward_to_context(context_, f, is_call);
      return;
    }
    if (f.context_id() != 0 && !child_contexts_.empty()) {
      if (auto it = child_contexts_.find(f.context_id()); it != child_contexts_.end()) {
        forward_to_context(it->second, f, is_call);
        return;
      }
    }
    if (f.token() == wire::reflection_token) {
      if (is_call) answer_reflection(f);
      return;
    }
    // One dispatch for typed and dynamic services: In's table first (the parent context only),
    // then the dynamic services of the context the frame names.
    if constexpr (serves) {
      if (const std::size_t p = table::find(f.token()); p != table::size && f.context_id() == 0) {
        table::visit(p, [&]<std::size_t P>() { dispatch<P>(f, is_call); });
        return;
      }
    }
    if (const service_table* services = services_of(f.context_id())) {
      if (const service_handler* handler = services->find(f.token())) {
        run_service(*handler, f, is_call);
        return;
      }
    }
    if (is_call) {
      detail::write_error_frame(stream_, f.transaction_id(), f.context_id(), f.token(),
                                courier::error(errc::no_such_service, "no service " + std::string(f.token().view())));
      answered(f.context_id());
    }
  }

  // The engine's questions about child contexts (docs/protocol.md section 6): a child the peer
  // opens gets its services from the parent table's factory, for its kind (served by an actor of
  // its own when the parent context is an actor's); it ends when its close is complete here.
  wire::context_verdict on_context_open(std::uint64_t id, courier::token kind, std::string_view name) {
    const child_factory* factory = services_ && services_->children() ? &services_->children() : nullptr;
    std::shared_ptr<const service_table> child = factory != nullptr ? (*factory)(kind, name) : nullptr;
    if (!child) {
      return {static_cast<std::uint32_t>(errc::no_such_service),
              kind == courier::token{} ? std::string("no default child context here")
                                       : "no child context of kind " + std::string(kind.view()) + " here"};
    }
    if (context_)
      child_contexts_[id] = serve_locally(node_system(), std::move(child));
    else
      child_services_[id] = std::move(child);
    return {};
  }
  void on_context_ended(std::uint64_t id) { child_ended(id); }

  // A deferred dynamic reply (deferred_reply) arrived: answered now, in this turn.
  void on(const detail::deferred_answer& a) {
    if (!stream_.finished()) {
      bool written = false;
      if (a.items) {
        written = static_cast<bool>(append_frame(
            wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, a.token, a.transaction_id, a.context_id},
            a.items->view().subspan(wire::header_size)));
      }
      if (!written)
        detail::write_error_frame(stream_, a.transaction_id, a.context_id, a.token,
                                  a.items ? courier::error(errc::handler_failed, "the reply is larger than the peer accepts")
                                          : a.failure);
      answered(a.context_id);
    }
    settled();
  }

  // A reply (or error) to one of our calls arrived spoiled: that call fails, the connection goes on.
  void on_bad_reply(std::uint64_t tid, const wire::error& e) {
    (void)calls_.fail(tid, courier::error(errc::protocol_error, "the reply was spoiled: " + e.message()));
  }

  /// Our calls waiting for their reply.
  std::size_t in_flight() const noexcept { return calls_.in_flight(); }

 private:
  // This actor's type indices for the messages of context_calls (a context_ref to it).
  static const std::uint16_t* context_map() noexcept {
    return courier::detail::implementation<connection, detail::context_calls>::indices;
  }

  // Appends a frame of `header` whose body is `items` (items already encoded); on failure (larger
  // than the peer accepts) nothing is appended.
  wire::result<std::size_t> append_frame(const wire::frame_header& header, std::span<const std::byte> items) {
    wire::frame_writer w(stream_.frames(), header, stream_.send_limits());
    if (!items.empty()) std::memcpy(stream_.frames().extend(items.size()), items.data(), items.size());
    return w.finish();
  }

  const wire::limits& limits() const noexcept { return stream_.send_limits(); }

  // Whether a call or send must be refused at the call: the connection is gone or closing, or
  // (unbounded mailbox) its output is above the mark. A refused send is counted and a dead letter
  // named `what`, as a local refusal is; a refused call fails with the reason.
  template <class R>
  bool refused_at_call(response_promise<R>& promise, const char* what) {
    const bool gone = stream_.finished() || (stream_.open() && !stream_.open_for_calls());
    // Above the outbound mark a bounded mailbox refuses at the call (see on_turn_end), so what it
    // accepted goes on the wire; an unbounded one cannot refuse, so its messages are refused here.
    const bool over = !bounded_mailbox_ && stream_.unwritten() > stream_.config().outbound_high_water;
    if (!gone && !over) return false;
    if (!promise.pending()) {
      counters_.refused_sends.fetch_add(1, std::memory_order_relaxed);
      ++stream_.stats().refused_sends;
      courier::detail::dead_letter(this->core(), this->id(), what,
                                   gone ? dead_letter_reason::stopped : dead_letter_reason::mailbox_full);
    } else if (stream_.finished()) {
      promise.fail(why());
    } else if (!gone) {
      promise.fail(courier::error(errc::mailbox_full, "the connection's outbound buffer is above its high-water mark"));
    } else {
      promise.fail(courier::error(errc::connection_lost, "the connection is closing"));
    }
    return true;
  }

  // The context_open goes out; the child is usable at once here, with the services this side
  // serves in it, and its answer settles `promise` (an ERROR: the peer refused it, and the engine
  // ends the child).
  void start_open(const detail::open_child& o, response_promise<opened_context> promise) {
    if (!stream_.open_for_calls()) {
      promise.fail(stream_.finished() ? why() : courier::error(errc::connection_lost, "the connection is closing"));
      return;
    }
    const std::uint64_t tid = calls_.next_id();
    const std::uint64_t id = stream_.engine().open_context(stream_.frames(), tid, o.kind, o.name);
    if (id == 0) {
      const std::uint64_t limit = stream_.engine().agreed().max_child_contexts;
      promise.fail(courier::error(errc::too_many_contexts,
                                  limit == 0 ? std::string("the peer accepts no child contexts")
                                             : "the peer accepts at most " + std::to_string(limit) + " child contexts"));
      return;
    }
    if (o.services) child_services_[id] = o.services;
    calls_.insert(std::move(promise));
  }

  // After a turn's write: above outbound_high_water the mailbox refuses sends and requests at the
  // call; it takes them again once a write brings the output down to half the mark (hysteresis,
  // so a peer reading just behind does not flip it every turn). A write happens in every turn,
  // and while output waits writable readiness is a turn (detail::io_ready: flush() adds EPOLLOUT to the
  // registration until the output is gone), so the refusal ends once the peer reads again.
  void watch_outbound() noexcept {
    const std::size_t left = stream_.unwritten();
    const std::size_t mark = stream_.config().outbound_high_water;
    if (left > mark)
      this->refuse_sends(true);
    else if (left <= mark / 2)
      this->refuse_sends(false);
    counters_.note_outbound(left);
  }

  // While paused for back-pressure, or while every receive block is held, the socket is unread.
  bool reading() const noexcept { return !paused_ && !stream_.read_stalled(); }

  // Whether reading must wait: the peer does not read what we send (above outbound_high_water, so
  // a peer that writes pings or calls and never reads our pongs and answers cannot make us hold
  // more than the mark plus one frame), or the served actor has too many of its calls.
  bool must_pause() const noexcept {
    if (stream_.unwritten() > stream_.config().outbound_high_water) return true;
    return inbound() && in_flight_ >= in_flight_limit();
  }
  // Reading again once a write brings the output down to half the mark (hysteresis, so a peer
  // reading just behind does not flip it every turn) and the served actor has room again.
  bool may_resume() const noexcept {
    if (stream_.unwritten() > stream_.config().outbound_high_water / 2) return false;
    return !inbound() || in_flight_ < in_flight_limit();
  }
  // Whether the peer's calls are served here (typed or dynamic services).
  bool inbound() const noexcept { return serves || services_ != nullptr || static_cast<bool>(context_); }

  // Reads while the peer reads what we send and the served actor keeps up; above the marks the
  // socket is left unread, so it fills and TCP flow control reaches the peer. Near the outbound
  // mark a read is held to what still fits below it, and no more frames are read than the served
  // actor has room for (every frame is at least a header long). A read budget spent yields the
  // worker to other actors.
  void drain() {
    if (stream_.finished()) {
      lose();
      return;
    }
    const bool was_open = stream_.open();
    if (must_pause()) {
      paused_ = true;
      return;
    }
    std::size_t budget = static_cast<std::size_t>(-1);
    if constexpr (calls_out) {
      const std::size_t mark = stream_.config().outbound_high_water;
      const std::size_t left = stream_.unwritten();
      budget = mark - left < wire::header_size ? wire::header_size : mark - left;
    }
    if (inbound()) budget = std::min(budget, (in_flight_limit() - in_flight_) * wire::header_size);
    if (stream_.receive(*this, budget)) detail::post_io_ready(this->self());  // budget spent: yield, read on later
    else if (stream_.read_stalled()) detail::retry_read_later(this->self(), retry_pending_);
    if (stream_.finished()) {
      lose();  // fails the waiters with why (a refused or spoiled handshake too)
    } else if (!was_open && stream_.open()) {
      if (auto o = std::exchange(opened_, nullptr)) o->settle({});
      for (waiting_open& w : std::exchange(opens_waiting_, {})) start_open(w.request, std::move(w.promise));
    }
  }

  void fail_all(const courier::error& why) {
    calls_.fail_all(why);
    for (waiting_open& w : std::exchange(opens_waiting_, {})) w.promise.fail(why);
    if (auto o = std::exchange(opened_, nullptr)) o->settle(why);
  }

  // Why the connection finished, with the pipe server's exit once it is known.
  const courier::error& why() const noexcept { return lost_ ? lost_why_ : stream_.why(); }

  // Frames queued during the handshake that the peer's frame size refused: their calls fail,
  // their sends are counted as encode failures (dead letters), as if refused at the call.
  void withdraw_held() {
    if (!stream_.open()) return;
    for (const detail::withdrawn_frame& w : stream_.take_withdrawn()) {
      const std::string why = "the frame (" + std::to_string(w.size) + " bytes) is larger than the peer accepts (" +
                              std::to_string(limits().max_frame_size) + " bytes)";
      if (w.kind != wire::kind::call) {
        counters_.encode_failures.fetch_add(1, std::memory_order_relaxed);
        courier::detail::dead_letter(this->core(), this->id(), "a send queued during the handshake",
                                     dead_letter_reason::invalid_argument);
        continue;
      }
      stream_.engine().call_withdrawn();
      (void)calls_.fail(w.transaction_id, courier::error(errc::invalid_argument, "cannot send the call: " + why));
    }
  }

  // The connection is over: fail what waits, and stop with connection_lost (or protocol_error)
  // so monitors hear why. A pipe server's exit is part of why: it is waited for, without blocking
  // this worker, through its pidfd (detail::child_exited) for up to 200 ms. The stop is queued behind the
  // messages already sent to us, so that they fail with why() rather than actor_stopped: requests
  // queued right after the spawn, which would otherwise lose a pipe server's exit status when
  // the server exits before the handshake.
  void lose() {
    if (lost_) return;
    lost_why_ = stream_.why();
    lost_ = true;
    if (child_ && !exit_status_) {
      reap_child();
      if (!exit_status_) {
        // Not exited yet (it is reading the end of its stream): detail::child_exited comes from the pidfd
        // or, at the latest, from this timer.
        child_wait_ = this->self().delayed_send(detail::child_exited{}, std::chrono::milliseconds(200));
        return;
      }
    }
    finish_lose();
  }

  void finish_lose() {
    stopped_ = true;
    if (child_ && exit_status_) lost_why_.text += "; server process " + child_->describe_exit();
    fail_all(lost_why_);
    // Monitors see down with the code and why: "the peer was silent for 30000 ms", a protocol
    // error the peer made, the server's exit.
    this->request_exit(detail::exit_reason_of(lost_why_), false);
  }

  // A pipe server's pidfd joins the reactor: its exit is a message, never a wait.
  void watch_child() {
    if (!child_ || child_->exit_fd() < 0) return;
    auto link = std::make_unique<detail::reactor_registration_for<connection, detail::child_exited>>(this->self());
    link->fd = child_->exit_fd();
    if (node_io_add(link->fd, link.get())) child_link_ = std::move(link);
  }

  // Before the reap closes the pidfd: a closed descriptor must not stay in the reactor's table.
  void unwatch_child() noexcept {
    if (!child_link_) return;
    node_io_remove(child_link_->fd);
    child_link_.reset();
  }

  void reap_child() {
    if (!child_ || exit_status_) return;
    exit_status_ = child_->try_wait();
  }

  // Every 256th one-way send travels as a request: its reply tells the connection that everything
  // sent before it was handled (per-sender order), which bounds the sends in flight without a reply
  // per message.
  // A smaller max_in_flight marks more often (a quarter of it), so the sends not yet marked can
  // never hold the connection paused (it resumes at half).
  static constexpr std::uint32_t send_marker_every = 256;
  std::uint32_t marker_every() const noexcept {
    const std::size_t quarter = in_flight_limit() / 4;
    return quarter >= send_marker_every ? send_marker_every : quarter == 0 ? 1u : static_cast<std::uint32_t>(quarter);
  }

  // What this connection serves: the served interface's messages, described from their types,
  // then the dynamic services with the signatures they declared.
  void answer_reflection(const wire::frame_view& f) {
    wire::frame_writer w(stream_.frames(),
                         wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, f.token(), f.transaction_id(),
                                            f.context_id()},
                         stream_.send_limits());
    if (f.context_id() == 0) table::describe(w);
    if (const service_table* services = services_of(f.context_id())) services->describe(w);
    if (!w.finish())
      detail::write_error_frame(stream_, f.transaction_id(), f.context_id(), f.token(),
                                courier::error(errc::handler_failed, "the service list does not fit in a frame"));
    answered(f.context_id());
  }

  // A dynamic service runs here, in this turn: its reply is written straight into the output
  // (no copy, no allocation), unless it fails, finds its arguments wrong, or defers.
  void run_service(const service_handler& handler, const wire::frame_view& f, bool is_call) {
    wire::out_buffer& out = is_call ? stream_.frames() : scratch_;
    const std::size_t start = out.size();
    wire::frame_writer reply(out,
                             wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, f.token(), f.transaction_id(),
                                                f.context_id()},
                             stream_.send_limits());
    incoming call(f, &reply, this, &incoming::post_to<connection>, context_map());
    call.run(handler);
    if (!is_call) {
      scratch_.clear();
      return;
    }
    if (call.deferred()) {
      out.truncate(start);
      ++in_flight_;  // answered by a deferred_answer; counted like a call the served actor holds
      return;
    }
    if (auto failed = call.outcome()) {
      out.truncate(start);
      detail::write_error_frame(stream_, f.transaction_id(), f.context_id(), f.token(), *failed);
    } else if (auto ok = reply.finish(); !ok) {
      detail::write_error_frame(stream_, f.transaction_id(), f.context_id(), f.token(),
                                courier::error(errc::handler_failed, "cannot encode the reply: " + ok.err().message()));
    }
    answered(f.context_id());
  }

  // A call in a context served by a context actor (the parent's, or a child's own): its items
  // are copied into the call message (the frame's block is not held across the hop) and its
  // reply's items written back. Counted in flight like a call the served actor holds.
  void forward_to_context(const context_ref& target, const wire::frame_view& f, bool is_call) {
    const std::uint64_t ctx = f.context_id();
    detail::dynamic_call call{f.token(), target.id(), arguments::from_items(f.body()), self_as_context(), ctx};
    ++in_flight_;
    if (!is_call) {
      (void)target.connection().send(std::move(call));
      settled();
      return;
    }
    target.connection()
        .request(std::move(call))
        .then(
            [this, tid = f.transaction_id(), tok = f.token(), ctx](const wire::items_ref& reply) {
              if (!stream_.finished()) {
                if (!append_frame(wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, tok, tid, ctx}, reply.body()))
                  detail::write_error_frame(stream_, tid, ctx, tok,
                                            courier::error(errc::handler_failed, "the reply is larger than the peer accepts"));
                answered(ctx);
              }
              settled();
            },
            [this, tid = f.transaction_id(), tok = f.token(), ctx](const courier::error& e) {
              if (!stream_.finished()) {
                detail::write_error_frame(stream_, tid, ctx, tok, e);
                answered(ctx);
              }
              settled();
            });
  }

  // Child `id` ended here: its table is let go, its actor (if it has one) stopped.
  void child_ended(std::uint64_t id) {
    child_services_.erase(id);
    if (auto it = child_contexts_.find(id); it != child_contexts_.end()) {
      (void)it->second.close();
      child_contexts_.erase(it);
    }
  }

  // This connection as the context_calls a context actor's handler calls back (incoming::peer).
  actor_ref<detail::context_calls> self_as_context() {
    actor_base* self = this;
    self->add_ref();
    return actor_ref<detail::context_calls>::adopt(self, context_map());
  }

  // The dynamic services of context `id`: the parent's table, or a child's.
  const service_table* services_of(std::uint64_t id) const noexcept {
    if (id == 0) return services_.get();
    auto it = child_services_.find(id);
    return it != child_services_.end() ? it->second.get() : nullptr;
  }

  // One answer to a call received in context `id` went out: the engine may answer a child's close
  // (and end it) after the last one.
  void answered(std::uint64_t id) {
    if (id == 0)
      stream_.reply_sent();
    else if (stream_.reply_sent(id))
      child_ended(id);
  }

  // The session's factory makes the parent context's services for this connection, with its
  // peer and a ref to the client's side. A factory that throws ends the connection at once.
  void start_session() {
    if (!session_start_) return;
    detail::session_start start = std::move(*session_start_);
    session_start_.reset();
    try {
      session_id_ = start.peer.id;
      session s = (*start.make)(start.peer, context_ref(self_as_context(), 0));
      services_ = std::move(s.services);
      session_end_ = std::move(s.on_end);
      session_owned_ = std::move(s.owned);
      log_session(log_level::info, std::string("started for ").append(to_string(start.peer.transport)).append(" ").append(start.peer.address));
    } catch (const std::exception& e) {
      log_session(log_level::error, std::string("could not start: ").append(e.what()));
      stream_.fail(courier::error(errc::handler_failed, std::string("the session could not start: ") + e.what()));
    } catch (...) {
      log_session(log_level::error, "could not start");
      stream_.fail(courier::error(errc::handler_failed, "the session could not start"));
    }
  }

  void log_session(log_level level, std::string_view what) noexcept {
    const auto& log = stream_.config().log;
    if (!logs(log, level)) return;
    try {
      std::string line("session ");
      line.append(std::to_string(session_id_)).append(" ").append(what);
      log->write(level, line);
    } catch (...) {  // no memory for the line: the session goes on without it
    }
  }

  // The connection ended: the session hears why, its actors stop (the last owned first), and its
  // services go (with the state they capture, refs to this connection among it).
  void end_session() noexcept {
    if (session_end_) {
      courier::error reason = stream_.finished() ? detail::exit_reason_of(why())
                                                 : courier::error(errc::connection_lost, "the connection was stopped");
      if (idle_ended_)
        reason = courier::error(errc::connection_lost, "the session was idle for " +
                                                           std::to_string(stream_.config().idle_timeout.count()) +
                                                           " ms and was closed");
      if (logs(stream_.config().log, log_level::info)) {
        try {
          log_session(log_level::info, std::string("ended: ").append(reason.describe()));
        } catch (...) {
        }
      }
      try {
        std::exchange(session_end_, nullptr)(reason);
      } catch (...) {  // the session is over either way
      }
    }
    for (auto it = session_owned_.rbegin(); it != session_owned_.rend(); ++it) (*it)();
    session_owned_.clear();
    services_.reset();
    child_services_.clear();
  }

  // When the session counts as idle (connection_config::idle_timeout): its client's last call or
  // send and the time-out after it; never while closing, or with no time-out.
  std::chrono::steady_clock::time_point idle_due() noexcept {
    const auto limit = stream_.config().idle_timeout;
    if (limit.count() == 0 || stream_.engine().side() != wire::role::acceptor || !stream_.open_for_calls())
      return std::chrono::steady_clock::time_point::max();
    return last_call_ + limit;
  }

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
          .then([this, covered](const R&) { settled(covered); }, [this, covered](const courier::error&) { settled(covered); });
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
                  detail::write_error_frame(stream_, tid, ctx, tok,
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

  void settled(std::size_t answered = 1) {
    in_flight_ -= answered;
    if (paused_ && in_flight_ <= in_flight_limit() / 2 && may_resume()) {
      paused_ = false;
      drain();
    }
  }

  // Calls and sends that may wait for the served actor: max_in_flight, and at most half a bounded
  // mailbox's capacity, so that what the connection hands over always fits.
  std::size_t in_flight_limit() const noexcept {
    const std::size_t cap = target_.mailbox_capacity();
    const std::size_t own = stream_.config().max_in_flight;
    return cap != 0 && cap / 2 < own ? (cap / 2 == 0 ? 1 : cap / 2) : own;
  }

  struct waiting_open {
    detail::open_child request;
    response_promise<opened_context> promise;
  };

  actor_ref<In> target_;
  std::shared_ptr<const service_table> services_;  // dynamic services, besides In's (may be null)
  context_ref context_;  // a context actor serving the parent's other calls (may be empty)
  std::unordered_map<std::uint64_t, context_ref> child_contexts_;  // open children served by actors of their own
  std::unordered_map<std::uint64_t, std::shared_ptr<const service_table>> child_services_;  // open children
  wire::out_buffer scratch_;  // where a one-way send's handler writes a reply nobody reads
  std::size_t in_flight_ = 0;  // the peer's calls and unmarked sends the served actor has not answered
  std::uint32_t sends_since_marker_ = 0;
  std::optional<child_process> child_;
  std::optional<int> exit_status_;
  std::unique_ptr<detail::reactor_registration> child_link_;  // the pidfd's registration
  timer_handle child_wait_;
  std::shared_ptr<detail::handshake_outcome> opened_;
  std::vector<waiting_open> opens_waiting_;         // child opens asked before the handshake ended
  std::vector<response_promise<unit>> parent_closes_;  // context_ref::close of the parent: settled at the end
  detail::call_table calls_;
  courier::error lost_why_;
  bool lost_ = false;
  bool stopped_ = false;  // the stop is queued (finish_lose)
  bool paused_ = false;   // back-pressure: the socket is left unread
  // The mailbox's capacity, read once: it sits on the producers' cache line, and reading it for
  // every message cost each sender's next push a cache miss (half of --send's sending thread).
  bool bounded_mailbox_ = false;
  std::optional<detail::session_start> session_start_;  // until on_start makes the session
  std::function<void(const courier::error&)> session_end_;
  std::uint64_t session_id_ = 0;
  std::vector<std::function<void()>> session_owned_;  // stops the session's actors
  std::chrono::steady_clock::time_point last_call_{};  // the peer's last call or send (idle_timeout)
  bool call_seen_ = false;  // a call or send came in this turn
  bool idle_ended_ = false;
};

/// The connecting side of a connection that only calls: implements `I` by forwarding to the peer.
template <class I>
using client_connection = connection<I, no_interface>;

/// The accepting side of a connection that only serves: hands the peer's calls to an actor_ref<I>.
template <class I>
using server_connection = connection<no_interface, I>;

}  // namespace courier::net
