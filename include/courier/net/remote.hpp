#pragma once
/// @file
/// Remote actors: the two connection actors that make a peer in another process look like a local
/// actor of the same interface type.
///
/// - `client_connection<I>` implements interface `I` itself: the `actor_ref<I>` a client gets from
///   `node::connect<I>` is a ref to it, so `send`, `request(...).then`, `ask`, `delayed_send` and
///   monitors are the local ones. Its handler for each message encodes the frame (a `send` when no
///   one waits, else a `call` with the next transaction id) and keeps the request's promise in a
///   table indexed by transaction id; the reply frame settles that promise. When the connection
///   is lost, every call in flight fails with errc::connection_lost and the actor stops with that
///   reason, so monitors see `down` with connection_lost. Like any actor it runs until it stops:
///   dropping the last ref does not close the connection; `ref.stop()` (or node::stop) does, and
///   closes its socket at once even while other refs to it remain.
/// - `server_connection<I>` serves one accepted connection: it decodes each call or send by token
///   (the table of wire_interface<I>), hands it to the served `actor_ref<I>` as a request (or a
///   send), and encodes the reply as RETURN, a failure as ERROR with its `errc` number. The
///   handler may defer its reply; the connection answers when the promise is answered.
///
/// Both are ordinary actors: whoever polls the reactor (a worker about to park, an embedded host's
/// run call, or a node's own thread: node.hpp) only turns socket readiness into one `io_ready`
/// message at a time; reading, decoding, dispatching and writing happen in the connection's turn,
/// and what a turn queued is written in one write at its end (on_turn_end).
///
/// Thread-safety: the actors' state is touched only in their own turns. Refs to them are ordinary
/// actor refs.

#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "courier/actor.hpp"
#include "courier/detail/message.hpp"
#include "courier/detail/runtime.hpp"
#include "courier/net/connection.hpp"
#include "courier/net/reactor.hpp"
#include "courier/net/transport.hpp"
#include "courier/net/wire_interface.hpp"
#include "courier/pool.hpp"
#include "courier/response_promise.hpp"

namespace courier::net {

/// Readiness of the connection's socket, from whoever polls the reactor (at most one queued at a time).
struct io_ready {};
/// The session's clock: handshake and close time-outs, keepalive pings, dead-peer detection. One
/// is on its way at a time, due at the connection's next deadline.
struct session_tick {};
/// A connection whose receive blocks were all held looks again (one pending at a time).
struct read_retry {};
/// The node is stopping: close in order (calls received are still answered, new ones refused).
struct close_request {};
/// A pipe client's server process exited (its pidfd turned readable), or the wait for it is over.
struct child_exited {};

namespace detail {

class node_core;

/// A reactor handler the node owns and frees (the reactor's io_handler has no virtual destructor).
class owned_handler : public io_handler {
 public:
  virtual ~owned_handler() = default;
};

/// A connection actor's registration with the reactor, owned by the actor; freed when it stops,
/// after reactor::remove (which waits for an on_io in progress on another thread).
class io_link : public owned_handler {
 public:
  std::atomic<bool> queued{false};
  std::atomic<bool> alive{true};
  int fd = -1;
};

/// Queues `Msg` on the normal lane without the capacity check (as a timer's message): a
/// connection with a bounded mailbox (connection_config::mailbox_capacity) must never lose its
/// readiness, which edge-triggered epoll reports once, nor its node's request to close.
template <class Msg, class Conn>
void post_to_connection(courier::detail::actor_base* base) {
  auto* slot = courier::detail::make_message<Msg>(Conn::template type_index<Msg>, nullptr, Msg{});
  if (!base->enqueue(slot)) pool::destroy(slot);  // stopped: nothing left to do
}

template <class Conn>
void post_io_ready(const actor_ref<Conn>& ref) {
  post_to_connection<io_ready, Conn>(ref.base());
}

/// A registration that queues `Msg` (at most one at a time) when its descriptor turns ready.
template <class Conn, class Msg = io_ready>
class io_link_for final : public io_link {
 public:
  explicit io_link_for(actor_ref<Conn> r) : ref(std::move(r)) {}
  void on_io(std::uint32_t) noexcept override {
    if (!alive.load(std::memory_order_acquire)) return;
    if (!queued.exchange(true, std::memory_order_acq_rel)) {
      try {
        post_to_connection<Msg, Conn>(ref.base());
      } catch (...) {
        queued.store(false, std::memory_order_release);  // out of memory: the next readiness retries
      }
    }
  }
  actor_ref<Conn> ref;
};

/// What one listener shares with the connections it accepted: how many are alive (for
/// connection_config::max_connections) and the receive memory they may hold.
struct listener_share {
  std::atomic<std::size_t> connections{0};
  std::shared_ptr<receive_memory> memory;
};

/// What both connection actors share: the node's services (reactor, registry of live
/// connections), the connection's bytes, and its reactor link.
class connection_base {
 public:
  connection_base(std::shared_ptr<node_core> node, socket sock, wire::role role, const connection_config& cfg,
                  std::shared_ptr<listener_share> share = nullptr);
  ~connection_base();

 protected:
  /// Registers with the reactor and queues the handshake; `actor` is the connection actor, and
  /// `close` queues a close_request to it (the node calls it when it stops).
  void attach(std::unique_ptr<io_link> link, courier::detail::actor_base* actor,
              void (*close)(courier::detail::actor_base*));
  /// Stops receiving readiness, closes the socket, forgets the actor in the node's registry.
  void detach() noexcept;
  /// Clears the queued flag: readiness after this point queues a new io_ready.
  void rearm() noexcept { link_->queued.store(false, std::memory_order_release); }
  /// Writes what is queued; on failure the connection finishes.
  void flush() { conn_.flush(); }
  /// Another descriptor of this connection's (a pipe server's pidfd) watched for readability.
  bool node_io_add(int fd, io_handler* handler);
  void node_io_remove(int fd) noexcept;
  void leave_share() noexcept;

  /// Keeps one session_tick on its way, due at the connection's next deadline: a tick already
  /// armed for that time or earlier stays (one that fires early only re-arms). Called at the end
  /// of every turn, so a deadline that moved closer (a close started) is armed at once.
  template <class Conn>
  void arm_clock(const actor_ref<Conn>& self, bool reading) {
    const auto due = conn_.next_deadline(reading);
    if (due == std::chrono::steady_clock::time_point::max() || due >= clock_due_) return;
    clock_.cancel();
    const auto now = std::chrono::steady_clock::now();
    const auto wait = due <= now ? std::chrono::nanoseconds(0) : std::chrono::ceil<std::chrono::nanoseconds>(due - now);
    clock_ = self.delayed_send(session_tick{}, wait);
    clock_due_ = due;
  }
  /// The armed tick arrived.
  void clock_fired() noexcept { clock_due_ = std::chrono::steady_clock::time_point::max(); }

  std::shared_ptr<node_core> node_;
  std::shared_ptr<listener_share> share_;
  connection conn_;
  std::unique_ptr<io_link> link_;
  courier::detail::actor_base* self_base_ = nullptr;
  timer_handle clock_;  // the session_tick on its way
  std::chrono::steady_clock::time_point clock_due_ = std::chrono::steady_clock::time_point::max();
  bool retry_pending_ = false;  // a read_retry is on its way
};

/// The reason a connection actor stops with when its connection ended with `why`: protocol_error
/// when the peer broke the protocol, else connection_lost, with why's text (monitors see it).
inline courier::error exit_reason_of(const courier::error& why) {
  return courier::error(why.code == errc::protocol_error ? errc::protocol_error : errc::connection_lost, why.text);
}

/// Every receive block is still viewed by messages in other actors' mailboxes: nothing tells the
/// connection when one is let go, so it looks again shortly (an io_ready after a millisecond).
template <class Conn>
void retry_read_later(const actor_ref<Conn>& self, bool& pending) {
  if (pending) return;
  pending = true;
  self.delayed_send(read_retry{}, std::chrono::milliseconds(1));
}

/// An error code for an ERROR frame and its text.
void write_error_frame(connection& c, std::uint64_t tid, std::uint64_t ctx, courier::token tok, const courier::error& e);

template <class T>
class interface_messages;
template <class... Rs, class... Ms>
class interface_messages<courier::interface<Rs(Ms)...>> {
 public:
  template <class Derived, class... Extra>
  using actor_base = courier::actor<Derived, std::remove_cvref_t<Ms>..., Extra...>;
};

}  // namespace detail

/// The client side of a connection: an actor that implements `I` by forwarding to the peer.
template <class I>
class client_connection
    : public detail::interface_messages<I>::template actor_base<client_connection<I>, io_ready, session_tick, read_retry,
                                                                  close_request, child_exited>,
      private detail::connection_base {
  using table = wire_interface<I>;

 public:
  /// `opened`, if given, is told once how the handshake ended: an empty error when it was
  /// accepted, else why the connection was lost (node::connect waits on it from a plain thread).
  client_connection(std::shared_ptr<detail::node_core> node, socket sock, std::optional<child_process> child,
                    const connection_config& cfg, std::shared_ptr<std::promise<courier::error>> opened = nullptr)
      : detail::connection_base(std::move(node), std::move(sock), wire::role::initiator, cfg),
        child_(std::move(child)),
        opened_(std::move(opened)),
        calls_(round_up_pow2(cfg.max_in_flight)) {}

  void on_start() {
    attach(std::make_unique<detail::io_link_for<client_connection>>(this->self()), this,
           &detail::post_to_connection<close_request, client_connection>);
    watch_child();
    drain();
  }

  /// A message of the interface: a `send` frame when nobody waits, else a `call`.
  template <class M>
    requires(I::template accepts<M>)
  response_promise<typename I::template reply_type<M>> on(const M& msg) {
    using R = typename I::template reply_type<M>;
    static_assert(!wire::views_frame<R>,
                  "courier: a reply decoded from the wire crosses a mailbox hop to its continuation, so it cannot "
                  "hold plain std::string_view or std::span views into the frame: use courier::wire::string_ref / "
                  "bytes_ref (a view that keeps the receive buffer alive) or std::string / std::vector<std::byte>");
    auto promise = this->template make_response_promise<R>();
    const bool gone = conn_.finished() || (conn_.open() && !conn_.open_for_calls());
    // Above the outbound mark a bounded mailbox refuses at the call (see on_turn_end), so what it
    // accepted goes on the wire; an unbounded one cannot refuse, so its messages are refused here.
    const bool over = this->mailbox_capacity() == 0 && conn_.unwritten() > conn_.config().outbound_high_water;
    if (gone || over) {
      if (!promise.pending()) {  // a one-way send: counted, and a dead letter as a local refusal is
        refused_sends_.fetch_add(1, std::memory_order_relaxed);
        ++conn_.stats().refused_sends;
        courier::detail::dead_letter(this->core(), this->id(), typeid(M).name(),
                                     gone ? dead_letter_reason::stopped : dead_letter_reason::mailbox_full);
      } else if (conn_.finished()) {
        promise.fail(why());
      } else if (!gone) {
        promise.fail(courier::error(errc::mailbox_full, "the connection's outbound buffer is above its high-water mark"));
      } else {
        promise.fail(courier::error(errc::connection_lost, "the connection is closing"));
      }
      return {};
    }
    if (!promise.pending()) {  // one-way: nobody waits; a send that cannot be encoded is a dead letter
      if (auto ok = wire::encode(conn_.frames(), msg, wire::route{wire::kind::send, 0, 0}, limits()); !ok) {
        encode_failures_.fetch_add(1, std::memory_order_relaxed);
        courier::detail::dead_letter(this->core(), this->id(), typeid(M).name(), dead_letter_reason::invalid_argument);
      }
      return {};
    }
    if (in_flight_ >= conn_.config().max_in_flight) {
      promise.fail(courier::error(errc::mailbox_full, "too many calls in flight on this connection"));
      return {};
    }
    // The next transaction id whose slot is free (a slot whose caller gave up may be reused): a
    // call that stays unanswered keeps its slot without holding up the ids after it.
    while (calls_[next_tid_ & (calls_.size() - 1)].tid != 0 && !reclaim(calls_[next_tid_ & (calls_.size() - 1)])) ++next_tid_;
    const std::uint64_t tid = next_tid_;
    call_slot& slot = calls_[tid & (calls_.size() - 1)];
    if (auto ok = wire::encode(conn_.frames(), msg, wire::route{wire::kind::call, tid, 0}, limits()); !ok) {
      promise.fail(courier::error(errc::invalid_argument, "cannot encode the call: " + ok.err().message()));
      return {};
    }
    ++next_tid_;
    conn_.session().call_sent();  // an orderly close waits for its answer
    slot.tid = tid;
    slot.position = static_cast<std::uint16_t>(I::template position<M>);
    ::new (slot.storage) response_promise<R>(std::move(promise));
    ++in_flight_;
    return {};
  }

  void on(const io_ready&) {
    rearm();
    drain();
  }

  void on(const read_retry&) {
    retry_pending_ = false;
    drain();
  }

  void on(const session_tick&) {
    clock_fired();
    // While every receive block is held, or while we leave the socket unread because the peer
    // does not read what we send, silence says nothing about the peer.
    conn_.tick(reading());
    if (conn_.finished()) lose();
  }

  // The node is stopping: an orderly close; the calls in flight are still answered by the peer
  // (new ones fail at the call), and the connection ends once the close completes.
  void on(const close_request&) {
    conn_.close("client stopping");
    if (conn_.finished()) lose();
  }

  void on(const child_exited&) {
    unwatch_child();
    reap_child();
    if (lost_ && !stopped_) finish_lose();
  }

  void on_turn_end() {
    if (conn_.wants_write()) flush();
    if (conn_.finished()) {
      lose();
      return;
    }
    watch_outbound();
    if (paused_reading_ && conn_.unwritten() <= conn_.config().outbound_high_water / 2) {
      paused_reading_ = false;
      drain();
      if (conn_.wants_write()) flush();
    }
    withdraw_held();
    arm_clock(this->self(), reading());
  }

  void on_stop() {
    clock_.cancel();  // the timer holds a ref to this actor until it ends
    child_wait_.cancel();
    fail_all(conn_.finished() ? why() : courier::error(errc::connection_lost, "the connection was stopped"));
    if (conn_.open() && !conn_.finished()) {
      conn_.close("client stopped");
      flush();
    }
    unwatch_child();
    detach();
    reap_child();
  }

  // The session's application frames: replies and errors of our calls (anything else is the
  // server calling us, which a client connection does not serve).
  void on_frame(const wire::frame_view& f) {
    if (f.kind() != wire::kind::reply && f.kind() != wire::kind::error) {
      if (f.kind() == wire::kind::call) {
        detail::write_error_frame(conn_, f.transaction_id(), f.context_id(), f.token(),
                                  courier::error(errc::no_such_service, "this peer is a client and serves nothing"));
        conn_.reply_sent();
      }
      return;
    }
    call_slot& slot = calls_[f.transaction_id() & (calls_.size() - 1)];
    if (f.transaction_id() == 0 || slot.tid != f.transaction_id()) {
      ++conn_.stats().dropped_replies;
      conn_.session().count_dropped_reply();
      return;
    }
    settle(slot, [&]<class R>(response_promise<R>& promise) {
      if (promise.settled()) {  // the caller timed out: a late reply, dropped and counted
        ++conn_.stats().dropped_replies;
        conn_.session().count_dropped_reply();
      } else if (f.kind() == wire::kind::error) {
        promise.fail(error_of(f));
      } else {
        R value{};
        if (auto ok = decode_reply(f, value, conn_.frame_owner()); ok)
          promise.deliver(std::move(value));
        else
          promise.fail(courier::error(errc::protocol_error, "cannot decode the reply: " + ok.err().message()));
      }
    });
  }

  // A reply (or error) to one of our calls arrived spoiled: that call fails, the connection goes on.
  void on_bad_reply(std::uint64_t tid, const wire::error& e) {
    call_slot& slot = calls_[tid & (calls_.size() - 1)];
    if (tid == 0 || slot.tid != tid) return;
    settle(slot, [&]<class R>(response_promise<R>& promise) {
      promise.fail(courier::error(errc::protocol_error, "the reply was spoiled: " + e.message()));
    });
  }

  /// Calls waiting for their reply.
  std::size_t in_flight() const noexcept { return in_flight_; }

  /// One-way sends this connection accepted into its mailbox but did not put on the wire because
  /// the connection was closing or lost (or, with an unbounded mailbox only, because its outbound
  /// buffer was above outbound_high_water: a bounded mailbox refuses those at the call instead).
  /// A send has no reply to fail: each is also reported to the system's dead-letter hook (reason
  /// stopped, or mailbox_full), as a local refusal is. Any thread may read it.
  std::uint64_t refused_sends() const noexcept { return refused_sends_.load(std::memory_order_relaxed); }

  /// One-way sends that could not be encoded within the limits the peer announced (a string past
  /// its frame size); each is also a dead letter with reason invalid_argument (a request fails
  /// with errc::invalid_argument instead). Any thread may read it.
  std::uint64_t encode_failures() const noexcept { return encode_failures_.load(std::memory_order_relaxed); }

  /// The most bytes that waited for the socket at the end of a turn: with a bounded mailbox, at
  /// most outbound_high_water plus what the mailbox accepted before it refused (mailbox_capacity
  /// messages) and one turn's messages. Any thread may read it.
  std::size_t outbound_peak() const noexcept { return outbound_peak_.load(std::memory_order_relaxed); }

 private:
  struct call_slot {
    std::uint64_t tid = 0;
    std::uint16_t position = 0;
    alignas(void*) unsigned char storage[sizeof(void*)];
  };
  static_assert(sizeof(response_promise<unit>) == sizeof(void*));

  static std::size_t round_up_pow2(std::size_t n) {
    std::size_t p = 1;
    while (p < n) p <<= 1;
    return p;
  }

  const wire::limits& limits() const noexcept { return conn_.send_limits(); }

  // After a turn's write: above outbound_high_water the mailbox refuses sends and requests at the
  // call; it takes them again once a write brings the output down to half the mark (hysteresis,
  // so a peer reading just behind does not flip it every turn). A write happens in every turn,
  // and writable readiness is a turn (io_ready: the socket is registered for EPOLLOUT, edge
  // triggered), so the refusal ends once the peer reads again.
  void watch_outbound() noexcept {
    const std::size_t left = conn_.unwritten();
    const std::size_t mark = conn_.config().outbound_high_water;
    if (left > mark)
      this->refuse_sends(true);
    else if (left <= mark / 2)
      this->refuse_sends(false);
    if (left > outbound_peak_.load(std::memory_order_relaxed)) outbound_peak_.store(left, std::memory_order_relaxed);
  }

  bool reading() const noexcept { return !paused_reading_ && !conn_.read_stalled(); }

  // Reads while the peer reads what we send: above outbound_high_water the socket is left unread
  // (as a server does), so a peer that writes pings or calls and never reads our pongs and errors
  // cannot make us hold more than the mark plus one frame; reading again once a write brings the
  // output down to half the mark. Near the mark a read is held to what still fits below it.
  void drain() {
    const bool was_open = conn_.open();
    const std::size_t mark = conn_.config().outbound_high_water;
    const std::size_t left = conn_.unwritten();
    if (left > mark) {
      paused_reading_ = true;
      return;
    }
    const std::size_t room = mark - left < wire::header_size ? wire::header_size : mark - left;
    if (conn_.receive(*this, room)) detail::post_io_ready(this->self());  // budget spent: yield, read on later
    else if (conn_.read_stalled()) detail::retry_read_later(this->self(), retry_pending_);
    if (conn_.finished()) {
      lose();  // fails the waiters with why (a refused or spoiled handshake too)
    } else if (!was_open && conn_.open()) {
      if (auto o = std::exchange(opened_, nullptr)) o->set_value({});
    }
  }

  // Runs `f` on the typed promise of an occupied slot, then frees the slot. The promise type is
  // found from the slot's message position (a switch, see wire_interface::visit).
  template <class F>
  void settle(call_slot& slot, F&& f) {
    table::visit(slot.position, [&]<std::size_t P>() {
      using R = typename table::template reply_at<P>;
      auto* promise = std::launder(reinterpret_cast<response_promise<R>*>(slot.storage));
      f(*promise);
      promise->~response_promise<R>();
    });
    slot.tid = 0;
    --in_flight_;
  }

  // Whether the caller of an occupied slot still waits (it may have timed out).
  bool waiting(const call_slot& slot) {
    bool answer = false;
    table::visit(slot.position, [&]<std::size_t P>() {
      using R = typename table::template reply_at<P>;
      answer = !std::launder(reinterpret_cast<const response_promise<R>*>(slot.storage))->settled();
    });
    return answer;
  }

  // A slot whose caller already gave up (timed out) may be reused; its reply will find no call.
  bool reclaim(call_slot& slot) {
    if (waiting(slot)) return false;
    settle(slot, []<class R>(response_promise<R>&) {});
    return true;
  }

  static courier::error error_of(const wire::frame_view& f) {
    wire::reader r = f.items();
    auto code = r.read<std::uint32_t>();
    auto text = r.read<std::string_view>();
    if (!code) return courier::error(errc::protocol_error, "an ERROR frame without its code");
    return error_from_wire(*code, text ? *text : std::string_view{});
  }

  void fail_all(const courier::error& why) {
    for (call_slot& slot : calls_) {
      if (slot.tid != 0) settle(slot, [&]<class R>(response_promise<R>& promise) { promise.fail(why); });
    }
    if (auto o = std::exchange(opened_, nullptr)) o->set_value(why);
  }

  // Why the connection finished, with the pipe server's exit once it is known.
  const courier::error& why() const noexcept { return lost_ ? lost_why_ : conn_.why(); }

  // Frames queued during the handshake that the peer's frame size refused: their calls fail,
  // their sends are counted as encode failures (dead letters), as if refused at the call.
  void withdraw_held() {
    if (!conn_.open()) return;
    for (const withdrawn_frame& w : conn_.take_withdrawn()) {
      const std::string why = "the frame (" + std::to_string(w.size) + " bytes) is larger than the peer accepts (" +
                              std::to_string(limits().max_frame_size) + " bytes)";
      if (w.kind != wire::kind::call) {
        encode_failures_.fetch_add(1, std::memory_order_relaxed);
        courier::detail::dead_letter(this->core(), this->id(), "a send queued during the handshake",
                                     dead_letter_reason::invalid_argument);
        continue;
      }
      conn_.session().call_withdrawn();
      call_slot& slot = calls_[w.transaction_id & (calls_.size() - 1)];
      if (slot.tid != w.transaction_id) continue;
      settle(slot, [&]<class R>(response_promise<R>& promise) {
        promise.fail(courier::error(errc::invalid_argument, "cannot send the call: " + why));
      });
    }
  }

  // The connection is over: fail what waits, and stop with connection_lost (or protocol_error)
  // so monitors hear why. A pipe server's exit is part of why: it is waited for, without blocking
  // this worker, through its pidfd (child_exited) for up to 200 ms. The stop is queued behind the
  // messages already sent to us, so that they fail with why() rather than actor_stopped: requests
  // queued right after the spawn, which would otherwise lose a pipe server's exit status when
  // the server exits before the handshake.
  void lose() {
    if (lost_) return;
    lost_why_ = conn_.why();
    lost_ = true;
    if (child_ && !exit_status_) {
      reap_child();
      if (!exit_status_) {
        // Not exited yet (it is reading the end of its stream): child_exited comes from the pidfd
        // or, at the latest, from this timer.
        child_wait_ = this->self().delayed_send(child_exited{}, std::chrono::milliseconds(200));
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
    auto link = std::make_unique<detail::io_link_for<client_connection, child_exited>>(this->self());
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

  std::optional<child_process> child_;
  std::optional<int> exit_status_;
  std::unique_ptr<detail::io_link> child_link_;  // the pidfd's registration
  timer_handle child_wait_;
  std::shared_ptr<std::promise<courier::error>> opened_;
  std::vector<call_slot> calls_;
  std::uint64_t next_tid_ = 1;
  std::size_t in_flight_ = 0;
  courier::error lost_why_;
  std::atomic<std::uint64_t> refused_sends_{0};
  std::atomic<std::uint64_t> encode_failures_{0};
  std::atomic<std::size_t> outbound_peak_{0};
  bool lost_ = false;
  bool stopped_ = false;         // the stop is queued (finish_lose)
  bool paused_reading_ = false;  // the peer does not read: neither do we
};

/// The server side of one accepted connection: decodes calls and sends for `I` and hands them to
/// the served actor.
template <class I>
class server_connection
    : public courier::actor<server_connection<I>, io_ready, session_tick, read_retry, close_request>,
      private detail::connection_base {
  using table = wire_interface<I>;

 public:
  /// `share` (from serve()) counts this connection among its listener's and holds the receive
  /// memory budget its blocks count against.
  server_connection(std::shared_ptr<detail::node_core> node, socket sock, actor_ref<I> target, const connection_config& cfg,
                    std::shared_ptr<detail::listener_share> share = nullptr)
      : detail::connection_base(std::move(node), std::move(sock), wire::role::acceptor, cfg, std::move(share)),
        target_(std::move(target)) {}

  void on_start() {
    attach(std::make_unique<detail::io_link_for<server_connection>>(this->self()), this,
           &detail::post_to_connection<close_request, server_connection>);
    drain();
  }

  void on(const io_ready&) {
    rearm();
    drain();
  }

  void on(const read_retry&) {
    retry_pending_ = false;
    drain();
  }

  void on(const session_tick&) {
    clock_fired();
    // While paused for back-pressure (or while every receive block is held) we do not read, so
    // the peer's bytes (its pongs too) wait in the socket: silence then says nothing about the
    // peer, and the keepalive waits with us. Output the peer does not read for the dead-peer
    // time ends the connection all the same (connection::tick).
    conn_.tick(reading());
    if (conn_.finished()) stop_with_why();
  }

  // The node is stopping: an orderly close (docs/protocol.md section 11). Calls received before
  // it are still answered; the session refuses later ones with 260; the connection ends once the
  // close completes, or when the node's grace runs out.
  void on(const close_request&) { conn_.close("server stopping"); }

  void on_turn_end() {
    if (conn_.wants_write()) flush();
    if (conn_.finished()) {
      stop_with_why();  // replies still owed have nowhere to go
      return;
    }
    on_turn_end_resume();
    arm_clock(this->self(), reading());
  }

  void on_stop() {
    clock_.cancel();  // the timer holds a ref to this actor until it ends
    if (conn_.open() && !conn_.finished()) {
      conn_.close("server stopped");
      flush();
    }
    detach();
    target_.reset();
  }

  void on_frame(const wire::frame_view& f) {
    const bool is_call = f.kind() == wire::kind::call;
    if (!is_call && f.kind() != wire::kind::send) {
      ++conn_.stats().dropped_replies;  // a reply or error: this side makes no calls
      conn_.session().count_dropped_reply();
      return;
    }
    const std::size_t p = table::find(f.token());
    if (p == table::size) {
      if (is_call) {
        detail::write_error_frame(conn_, f.transaction_id(), f.context_id(), f.token(),
                                  courier::error(errc::no_such_service, "no service " + std::string(f.token().view())));
        conn_.reply_sent();
      }
      return;
    }
    table::visit(p, [&]<std::size_t P>() { dispatch<P>(f, is_call); });
  }

  std::size_t in_flight() const noexcept { return in_flight_; }

 private:
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

  template <std::size_t P>
  void dispatch(const wire::frame_view& f, bool is_call) {
    using M = typename table::template message_at<P>;
    using R = typename table::template reply_at<P>;
    static_assert(!wire::views_frame<M>,
                  "courier: a message served over the wire crosses a mailbox hop, so its fields cannot be plain "
                  "std::string_view or std::span views into the frame: declare them courier::wire::string_ref / "
                  "bytes_ref (a view that keeps the receive buffer alive) or std::string / std::vector<std::byte>");
    M msg{};
    if (auto ok = wire::decode(f, msg, conn_.frame_owner()); !ok) {
      if (is_call) {
        detail::write_error_frame(conn_, f.transaction_id(), f.context_id(), f.token(),
                                  courier::error(wire::make_error_code(ok.err().code), ok.err().message()));
        conn_.reply_sent();
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
    target_.request(std::move(msg))
        .then(
            [this, tid = f.transaction_id(), ctx = f.context_id(), tok = f.token()](const R& value) {
              if (!conn_.finished()) {
                if (auto ok = encode_reply(conn_.frames(), tok, tid, ctx, value, conn_.send_limits()); !ok)
                  detail::write_error_frame(conn_, tid, ctx, tok,
                                            courier::error(errc::handler_failed, "cannot encode the reply: " + ok.err().message()));
                conn_.reply_sent();
              }
              settled();
            },
            [this, tid = f.transaction_id(), ctx = f.context_id(), tok = f.token()](const courier::error& e) {
              if (!conn_.finished()) {
                detail::write_error_frame(conn_, tid, ctx, tok, e);
                conn_.reply_sent();
              }
              settled();
            });
  }

  // Monitors of a server connection see down with the connection's code and why.
  void stop_with_why() { this->stop(detail::exit_reason_of(conn_.why())); }

  // While paused for back-pressure, or while every receive block is held, the socket is unread.
  bool reading() const noexcept { return !paused_ && !conn_.read_stalled(); }

  void settled(std::size_t answered = 1) {
    in_flight_ -= answered;
    if (paused_ && in_flight_ <= in_flight_limit() / 2) {
      paused_ = false;
      drain();
    }
  }

  // Written replies make room: a connection paused on its outbound mark resumes reading.
  void on_turn_end_resume() {
    if (paused_ && in_flight_ < in_flight_limit() && conn_.unwritten() <= conn_.config().outbound_high_water / 2) {
      paused_ = false;
      drain();
    }
  }

  // Reads while the served actor keeps up; above the high-water marks (calls and marked sends in
  // flight, or replies the client does not read) the socket is left unread, so it fills and TCP
  // flow control reaches the client. A read budget spent yields the worker to other actors.
  void drain() {
    if (conn_.finished()) return;
    const std::size_t limit = in_flight_limit();
    if (in_flight_ >= limit || conn_.unwritten() > conn_.config().outbound_high_water) {
      paused_ = true;
      return;
    }
    // Read no more frames than there is room for: every frame is at least a header long.
    if (conn_.receive(*this, (limit - in_flight_) * wire::header_size)) detail::post_io_ready(this->self());
    else if (conn_.read_stalled()) detail::retry_read_later(this->self(), retry_pending_);
  }

  // Calls and sends that may wait for the served actor: max_in_flight, and at most half a bounded
  // mailbox's capacity, so that what the connection hands over always fits.
  std::size_t in_flight_limit() const noexcept {
    const std::size_t cap = target_.mailbox_capacity();
    const std::size_t own = conn_.config().max_in_flight;
    return cap != 0 && cap / 2 < own ? (cap / 2 == 0 ? 1 : cap / 2) : own;
  }

  actor_ref<I> target_;
  std::size_t in_flight_ = 0;
  std::uint32_t sends_since_marker_ = 0;
  bool paused_ = false;
};

}  // namespace courier::net
