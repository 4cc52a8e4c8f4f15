#pragma once
/// @file
/// The compiled part of the connection actor (connection.hpp), private to the network layer:
/// everything a connection does that does not depend on the interfaces it calls and serves.
/// - the turn protocol: readiness (io_ready), the engine's clock (connection_tick), a read that
///   waits for a receive block (read_retry), the node's stop (close_request), a pipe server's
///   exit (child_exited), the turn's end (one write), the actor's stop;
/// - back-pressure: reading pauses while the peer does not read or the served side is full;
/// - the calls out that are not typed (context_ref: dynamic calls, child contexts' open and
///   close) and the call table that settles every call's promise;
/// - routing a call the typed table does not take: to a context actor, a child context, a table
///   of dynamic services, reflection (`$SVC`), or ERROR no_such_service; sessions and idle time;
/// - the plain-thread driving hooks (courier::detail::drive_ops) and the reactor registration.
/// The typed shell (connection.hpp) derives from it, tells it once at start who it is
/// (shell_binding: its actor, the type indices it gave these messages), and forwards its
/// messages here; the core reaches the shell once per read (to read with the shell as the frame
/// handler, so typed dispatch stays a compile-time position), never per message.
///
/// Thread-safety: reactor_registration is touched by the reactor's thread and the actor (atomics);
/// the core only in the actor's turns.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "courier/actor_ref.hpp"
#include "courier/detail/message.hpp"
#include "courier/detail/runtime.hpp"
#include "courier/net/connection_config.hpp"
#include "courier/net/context.hpp"
#include "courier/net/detail/call_table.hpp"
#include "courier/net/detail/context_router.hpp"
#include "courier/net/detail/live_counters.hpp"
#include "courier/net/detail/reactor.hpp"
#include "courier/net/detail/wire_stream.hpp"
#include "courier/net/services.hpp"
#include "courier/net/session.hpp"
#include "courier/net/transport.hpp"
#include "courier/pool.hpp"
#include "courier/response_promise.hpp"

namespace courier::net::detail {

/// Readiness of the connection's socket, from whoever polls the reactor (at most one queued at a time).
struct io_ready {};
/// The engine's clock: handshake and close time-outs, keepalive pings, dead-peer detection. One
/// is on its way at a time, due at the connection's next deadline.
struct connection_tick {};
/// A connection whose receive blocks were all held looks again (one pending at a time).
struct read_retry {};
/// The node is stopping: close in order (calls received are still answered, new ones refused).
struct close_request {};
/// A pipe client's server process exited (its pidfd turned readable), or the wait for it is over.
struct child_exited {};

class node_core;

/// How the connecting side's handshake ended, told once by the connection: an empty error when
/// it was accepted, else why the connection was lost. `settled` turns 1 after `outcome` is set, so
/// a plain thread that drives the connection while it waits (drive_while_waiting) sees it between
/// turns; a thread that does not drive waits on `outcome`.
struct handshake_outcome {
  std::promise<courier::error> outcome;
  std::atomic<std::uint32_t> settled{0};

  void settle(courier::error why) {
    outcome.set_value(std::move(why));
    settled.store(1, std::memory_order_release);
  }
};

/// Queues `Msg` (index `type` of the actor's messages) on the normal lane without the capacity
/// check, as a timer's message: a connection with a bounded mailbox must never lose its
/// readiness, which edge-triggered epoll reports once, nor its node's request to close.
template <class Msg>
void post_turn_message(courier::detail::actor_base* actor, std::uint16_t type) {
  auto* slot = courier::detail::make_message<Msg>(type, nullptr, Msg{});
  if (!actor->enqueue(slot)) pool::destroy(slot);  // stopped: nothing left to do
}

/// A descriptor of the connection's in the reactor (its socket, a pipe server's pidfd), owned by
/// the connection, which frees it when it stops (after reactor::remove, which waits for an on_io
/// in progress on another thread). Readiness queues one message at a time to the actor.
class reactor_registration final : public owned_handler {
 public:
  using poster = void (*)(courier::detail::actor_base*, std::uint16_t);
  reactor_registration(courier::detail::actor_base* actor, std::uint16_t type, poster post) noexcept;
  ~reactor_registration() override;
  void on_io(std::uint32_t epoll_events) noexcept override;

  /// The readiness reported since the connection last took it (EPOLLIN, EPOLLOUT, EPOLLRDHUP...):
  /// or-ed in before a message is queued, so none is lost while one is on its way.
  std::atomic<std::uint32_t> events{0};
  std::atomic<bool> queued{false};
  std::atomic<bool> alive{true};
  int fd = -1;
  std::uint64_t tag = 0;  // the reactor's registration_tag, for changing its events without a lock

 private:
  courier::detail::actor_base* actor_;  // a reference of its own: the actor outlives its registrations
  std::uint16_t type_;
  poster post_;
};

class connection_core;

/// Who the typed shell is, told to the core once, at its start.
struct shell_binding {
  courier::detail::actor_base* actor = nullptr;
  /// The shell's type indices of the core's messages, and of context_calls (a context_ref to it).
  std::uint16_t io_ready = 0, connection_tick = 0, read_retry = 0, child_exited = 0;
  const std::uint16_t* context_map = nullptr;
  /// Queues a close_request to the actor (the node calls it when it stops).
  void (*close)(courier::detail::actor_base*) = nullptr;
  /// Posts a deferred dynamic reply to the actor (incoming::post_to<shell>).
  bool (*post_answer)(const courier::detail::actor_base*, deferred_answer&&) = nullptr;
  /// Reads what the socket holds with the shell as the frame handler (once per read, not per frame).
  void (*read)(connection_core&) = nullptr;
  /// Turns the actor's refusal of sends on or off (actor_base::refuse_sends is the actor's own).
  void (*refuse_sends)(courier::detail::actor_base*, bool) = nullptr;
  /// Writes the served interface's services into a `$SVC` reply (wire_interface<In>::describe).
  void (*describe)(wire::frame_writer&) = nullptr;
  bool calls_out = false;           // the shell implements an interface (typed calls out)
  bool serves = false;              // the shell serves an interface's calls
  std::size_t served_capacity = 0;  // the served actor's mailbox capacity (0: unbounded)
  std::uint32_t object_bytes = 0;   // sizeof the shell's actor: what a turn of it reads first
};

/// The reason a connection actor stops with when its connection ended with `why`: protocol_error
/// when the peer broke the protocol, else connection_lost, with why's text (monitors see it).
inline courier::error exit_reason_of(const courier::error& why) {
  return courier::error(why.code == errc::protocol_error ? errc::protocol_error : errc::connection_lost, why.text);
}

/// An error code for an ERROR frame and its text.
void write_error_frame(wire_stream& c, std::uint64_t tid, std::uint64_t ctx, courier::token tok,
                       const courier::error& e);

class connection_core {
 public:
  /// The connecting side (node::connect, adopt): `child` is a pipe server's process; `opened`, if
  /// given, is told once how the handshake ended; `services`, what it serves in the parent context.
  connection_core(std::shared_ptr<node_core> node, socket sock, std::optional<child_process> child,
                  const connection_config& cfg, std::shared_ptr<handshake_outcome> opened,
                  std::shared_ptr<const service_table> services);
  /// The accepting side (node::serve): `share` counts it among its listener's connections; the
  /// parent context is served by `services`, a context actor `context`, or a `session`'s services.
  connection_core(std::shared_ptr<node_core> node, socket sock, const connection_config& cfg,
                  std::shared_ptr<listener_share> share, std::shared_ptr<const service_table> services,
                  context_ref context, std::optional<session_start> session);
  connection_core(const connection_core&) = delete;
  connection_core& operator=(const connection_core&) = delete;
  ~connection_core();

  // The engine's questions and answers that do not depend on the interfaces (the shell's frame
  // handler forwards them).
  wire::context_verdict on_context_open(std::uint64_t id, courier::token kind, std::string_view name);
  void on_context_ended(std::uint64_t id) { child_ended(id); }
  void on_bad_reply(std::uint64_t tid, const wire::error& e);

  /// Our calls waiting for their reply.
  std::size_t in_flight() const noexcept { return calls_.in_flight(); }

 protected:
  /// The shell's on_start: registers with the reactor and the node, starts the session, reads.
  void start(const shell_binding& shell);
  /// The shell's on_stop: fails what waits, closes, leaves the reactor and the node, ends the session.
  void stop();
  /// The end of every turn: the idle clock, one write, back-pressure, the engine's clock.
  void turn_end();

  void on_io_ready();
  void on_read_retry();
  void on_tick();
  void on_close_request();
  void on_child_exited();
  void on_deferred_answer(const deferred_answer& a);
  void call_dynamic(const dynamic_call& c, response_promise<wire::items_ref> promise);
  void open_child(const detail::open_child& o, response_promise<opened_context> promise);
  void close_child(const detail::close_child& c, response_promise<unit> promise);

  /// A frame the typed shell did not take: a reply to our call, or a call or send routed by its
  /// context and token (context actor, child, reflection, dynamic services, no_such_service).
  void route_frame(const wire::frame_view& f);

  // A read, in two halves around the shell's stream_.receive(shell, budget): the budget (none
  // while back-pressure pauses the socket), then what the read's end calls for.
  std::optional<std::size_t> read_budget();
  void after_read(bool budget_spent);

  /// Whether a call or send must be refused at the call (gone, closing, or its output above the
  /// mark): a refused send is a dead letter named `what`, a refused call fails with the reason.
  template <class R>
  bool refused_at_call(response_promise<R>& promise, const char* what) {
    const refusal r = refusal_at_call();
    if (r == refusal::none) return false;
    if (!promise.pending())
      refuse_send(r, what);
    else
      promise.fail(refusal_error(r));
    return true;
  }

  /// A call the served actor answered (or `n` sends a marker covered): reading may resume.
  void settled(std::size_t n = 1);
  /// Sends between two markers (a send that travels as a request, see marker_every).
  std::uint32_t marker_every() const noexcept;
  std::size_t in_flight_limit() const noexcept;
  const wire::limits& limits() const noexcept { return stream_.send_limits(); }
  /// Reports a message of ours that goes nowhere as the actor's dead letter.
  void dead_letter(const char* what, dead_letter_reason why);

  std::shared_ptr<node_core> node_;
  std::shared_ptr<listener_share> share_;
  live_counters counters_;  // node::counters reads them
  wire_stream stream_;
  detail::call_table calls_;
  std::size_t in_flight_ = 0;  // the peer's calls and unmarked sends the served side has not answered
  bool call_seen_ = false;     // a call or send came in this turn

 private:
  enum class refusal : std::uint8_t { none, finished, closing, full };
  refusal refusal_at_call() const noexcept;
  void refuse_send(refusal r, const char* what);
  courier::error refusal_error(refusal r) const;

  // The turn protocol and back-pressure (connection_core.cpp).
  void read() { shell_.read(*this); }
  void rearm() noexcept;
  void flush();
  void update_registration();
  void detach() noexcept;
  void leave_share() noexcept;
  void arm_clock();
  std::chrono::steady_clock::time_point idle_due() noexcept;
  void retry_read_later();
  int driver_signal_fd() noexcept;
  bool reading() const noexcept { return !paused_ && !stream_.read_stalled(); }
  bool must_pause() const noexcept;
  bool may_resume() const noexcept;
  bool inbound() const noexcept { return shell_.serves || router_.serves_parent() || static_cast<bool>(context_); }
  void watch_outbound() noexcept;
  void withdraw_held();
  void fail_all(const courier::error& why);
  const courier::error& why() const noexcept { return lost_ ? lost_why_ : stream_.why(); }
  void lose();
  void finish_lose();
  void watch_child();
  void unwatch_child() noexcept;
  void reap_child();
  void start_open(const detail::open_child& o, response_promise<opened_context> promise);
  wire::result<std::size_t> append_frame(const wire::frame_header& header, std::span<const std::byte> items);

  // Routing (connection_routing.cpp).
  void route_inbound(const wire::frame_view& f);
  void answer_reflection(const wire::frame_view& f);
  void run_service(const service_handler& handler, const wire::frame_view& f, bool is_call);
  void forward_to_context(const context_ref& target, const wire::frame_view& f, bool is_call);
  void child_ended(std::uint64_t id);
  actor_ref<detail::context_calls> self_as_context();
  void answered(std::uint64_t id);

  // Sessions (connection_routing.cpp).
  void start_session();
  void log_session(log_level level, std::string_view what) noexcept;
  void end_session() noexcept;
  void release_now() noexcept;

 public:
  // The plain-thread driving hooks (courier::detail::drive_ops, through the shell): while a plain
  // thread holds the connection, the socket is out of the reactor (no worker wakes for what that
  // thread reads itself). The driver waits on the socket and on the eventfd that a push to the
  // held connection makes readable (the connecting side's is made with the connection, the
  // accepting side's on first use).
  courier::detail::drive_ops::descriptors hold_io() noexcept;
  void release_io() noexcept;
  /// How long EPOLLIN stays out at most after a driver let go, for its next call (release_io).
  static constexpr std::chrono::milliseconds redrive_window{1};
  /// The socket turned readable for the driver: an io_ready, as the reactor would have queued.
  void io_readable() noexcept {
    if (link_) link_->on_io(EPOLLIN);
  }
  void signal_driver() noexcept;

 private:
  struct waiting_open {
    detail::open_child request;
    response_promise<opened_context> promise;
  };

  shell_binding shell_;
  std::unique_ptr<reactor_registration> link_;
  timer_handle clock_;         // the connection_tick on its way
  timer_handle release_tick_;  // the connection_tick that ends a lazy release (release_io)
  std::chrono::steady_clock::time_point clock_due_ = std::chrono::steady_clock::time_point::max();
  bool retry_pending_ = false;      // a read_retry is on its way
  bool watching_writable_ = false;  // EPOLLOUT is in the registration: output waits
  bool held_ = false;               // a plain thread drives the connection: EPOLLIN is out
  // The driver let go and EPOLLIN is not back yet: the next worker turn puts it back, at the
  // latest the one release_tick_ brings (release_io says why it waits).
  bool release_pending_ = false;
  bool read_was_open_ = false;  // the handshake had ended when the current read began
  std::atomic<int> driver_signal_{-1};

  context_router router_;  // the dynamic services of the parent (may be none) and of open children
  context_ref context_;    // a context actor serving the parent's other calls (may be empty)
  std::unordered_map<std::uint64_t, context_ref> child_contexts_;  // open children served by actors of their own
  wire::out_buffer scratch_;  // where a one-way send's handler writes a reply nobody reads
  std::optional<child_process> child_;
  std::optional<int> exit_status_;
  std::unique_ptr<reactor_registration> child_link_;  // the pidfd's registration
  timer_handle child_wait_;
  std::shared_ptr<handshake_outcome> opened_;
  std::vector<waiting_open> opens_waiting_;            // child opens asked before the handshake ended
  std::vector<response_promise<unit>> parent_closes_;  // context_ref::close of the parent: settled at the end
  courier::error lost_why_;
  bool lost_ = false;
  bool stopped_ = false;  // the stop is queued (finish_lose)
  bool paused_ = false;   // back-pressure: the socket is left unread
  // The mailbox's capacity, read once: it sits on the producers' cache line, and reading it for
  // every message cost each sender's next push a cache miss (half of --send's sending thread).
  bool bounded_mailbox_ = false;
  std::optional<session_start> session_start_;  // until start() makes the session
  std::function<void(const courier::error&)> session_end_;
  std::uint64_t session_id_ = 0;
  std::vector<std::function<void()>> session_owned_;   // stops the session's actors
  std::chrono::steady_clock::time_point last_call_{};  // the peer's last call or send (idle_timeout)
  bool idle_ended_ = false;
};

// Inline: each runs once per call or send (the refusal at the call, the marker of sends).

// Whether a call or send is refused at the call: the connection is gone or closing, or (an
// unbounded mailbox) its output is above the mark. Above the mark a bounded mailbox refuses at the
// call (watch_outbound), so what it accepted goes on the wire; an unbounded one cannot refuse, so
// its messages are refused here.
inline connection_core::refusal connection_core::refusal_at_call() const noexcept {
  if (stream_.finished()) return refusal::finished;
  if (stream_.open() && !stream_.open_for_calls()) return refusal::closing;
  if (!bounded_mailbox_ && stream_.unwritten() > stream_.config().outbound_high_water) return refusal::full;
  return refusal::none;
}

// Calls and sends that may wait for the served actor: max_in_flight, and at most half a bounded
// mailbox's capacity, so that what the connection hands over always fits.
inline std::size_t connection_core::in_flight_limit() const noexcept {
  const std::size_t cap = shell_.served_capacity;
  const std::size_t own = stream_.config().max_in_flight;
  return cap != 0 && cap / 2 < own ? (cap / 2 == 0 ? 1 : cap / 2) : own;
}

// Every 256th one-way send travels as a request: its reply tells the connection that everything
// sent before it was handled (per-sender order), which bounds the sends in flight without a reply
// per message. A smaller max_in_flight marks more often (a quarter of it), so the sends not yet
// marked can never hold the connection paused (it resumes at half).
inline std::uint32_t connection_core::marker_every() const noexcept {
  constexpr std::uint32_t send_marker_every = 256;
  const std::size_t quarter = in_flight_limit() / 4;
  return quarter >= send_marker_every ? send_marker_every : quarter == 0 ? 1u : static_cast<std::uint32_t>(quarter);
}

}  // namespace courier::net::detail
