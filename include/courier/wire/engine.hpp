#pragma once
/// @file
/// The connection state machine of docs/protocol.md (sections 6, 8, 11, 12, 13), sans I/O: engine.
/// Part of the wire codec (courier/wire.hpp).
///
/// A engine turns bytes received into application frames and answers everything the protocol answers
/// by itself (handshake, ping, close, ERROR frames for spoiled frames) by appending bytes to an
/// out_buffer the owner writes to the transport. It never reads, writes, sleeps or reads a clock: the
/// owner passes the time to tick(). So the same engine runs under the reactor, in a test that replays a
/// transcript (tests/vectors/transcripts/), and in the fuzzer.
///
/// States (engine_state):
///   handshaking  our handshake is written (start()); waiting for the peer's. Application frames the
///                owner wants to send must wait until open.
///   open         both handshakes accepted: agreed() is valid.
///   closing      we sent `close` (close(), or the answer to the peer's close): we send no new request
///                (send, call, ping); we wait for the peer's close, for the answers to our calls and for
///                the owner to answer the calls it received.
///   closed       the orderly close is complete: both closes exchanged, every call answered both ways.
///                Close the transport now (after writing what is in `out`).
///   failed       a fatal error: the ERROR frame (if any) is in `out`; write it and close the transport.
///                failure() says why.
///
/// The owner's part:
///   - reply_sent(out) after each answer to a call the handler received: when the peer is closing and
///     that was the last one, the engine appends our `close` there.
///   - call_sent() for each call it sends, so the close waits for the answers (calls_outstanding()).
///   - tick(now, out) at next_deadline() (a one-shot timer, re-armed after each tick) for the time-outs
///     (handshake, keepalive ping, dead peer, close); feed(..., now) and note_received(now) with the
///     arrival time of every read, whole frames or not.
///   - failure() says why an engine failed: the code as on the wire (a wire errc number 1..255, or a
///     runtime number such as 272 connection_lost), the text, whether the peer sent it and whether a
///     time-out ended it. It is not courier::error: the wire library does not depend on the runtime.
///   - the handler may also have on_bad_reply(std::uint64_t txn, const error&): a reply or error frame
///     for one of our calls arrived spoiled (non-fatal fault); the owner fails that call.
///   - peer_closing(): the peer sent close; open_for_calls(): we may still start calls and sends.
///   - child contexts (docs/protocol.md section 6): open_context() and close_context() write the
///     requests (the owner gives them a transaction id of its own and matches their answers like a
///     call's); context_usable(id) says whether calls and sends may go out in a context. A child the
///     peer opens is accepted or refused by the handler's optional `on_context_open`; the engine
///     answers every context request itself, and tells the handler's optional `on_context_closing`
///     (the peer's close arrived) and `on_context_ended` (the child ended at this peer). The owner
///     names the context of each call it answers (reply_sent(out, context)), which says when a
///     child's close may be answered.
///
/// Thread-safety: one engine is used by one thread at a time (the one that owns the connection);
/// distinct engines are independent.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "courier/wire/buffer.hpp"
#include "courier/wire/decoder.hpp"
#include "courier/wire/error.hpp"
#include "courier/wire/format.hpp"
#include "courier/wire/handshake.hpp"

namespace courier::wire {

/// Which end of the transport this is: the initiator connected, the acceptor accepted. The protocol
/// treats both alike (both send their handshake at once, either may close) except for context ids
/// (odd/even, section 6).
enum class role : std::uint8_t { initiator, acceptor };

enum class engine_state : std::uint8_t { handshaking, open, closing, closed, failed };

/// "handshaking", "open", "closing", "closed", "failed".
[[nodiscard]] const char* to_string(engine_state s) noexcept;

/// What an engine needs to know; the defaults are those of docs/protocol.md section 13.
///
/// Thread-safety: a value type.
struct engine_config {
  /// Versions, capabilities, name and nonce we announce. Its limit fields are ignored: lim is announced.
  /// Give each connection a random nonce: a handshake received with the same non-zero nonce is our own,
  /// reflected by a transport that echoes, and fails the engine (bad_handshake).
  handshake_info local{};
  /// Our receive limits: what the decoder enforces and the handshake announces. Before the peer's
  /// handshake is accepted the frame size is held to max_first_frame_size (frame_limit()).
  limits lim{};
  /// The peer must complete its handshake within this time after start() (0: no limit), or after
  /// handshake_from when that is set.
  std::chrono::milliseconds handshake_timeout{10000};
  /// When the transport was connected, if that was before start() (a server that accepted the
  /// connection on one thread or process and started its engine later): the handshake time-out
  /// counts from then, so what a silent peer costs is bounded from its accept. Default: start().
  std::chrono::steady_clock::time_point handshake_from{};
  /// We ping after this much silence from the peer (0: never ping, never declare the peer dead).
  std::chrono::milliseconds ping_interval{10000};
  /// The peer is dead after this many ping intervals without a byte from it, provided that the pings
  /// of all but the last interval were really sent (so a stall of ours is never counted against it).
  std::uint32_t dead_after_intervals = 3;
  /// After we sent close, the peer's close (or end of stream) must come within this time.
  std::chrono::milliseconds close_timeout{10000};
  /// The most child contexts the peer may have open at once (announced in the handshake, item 9;
  /// 0: the peer opens none, and its context_open is refused with 274 too_many_contexts).
  std::uint32_t max_child_contexts = 0;
};

/// The owner's answer to a child the peer opens: code 0 opens it; else the runtime code of the
/// refusal (256 no_such_service for a kind of child not served, 257 handler_failed...) and its text.
struct context_verdict {
  std::uint32_t code = 0;
  std::string text{};
};

/// Why an engine failed.
///
/// Thread-safety: a value type.
struct engine_failure {
  /// A wire errc number (1..255), or a runtime one (272 connection_lost), as it would travel in an
  /// ERROR frame; 0 while the engine has not failed.
  std::uint32_t code = 0;
  std::string text;
  /// True if the peer ended the connection with an ERROR frame of transaction id 0 (a fatal protocol code,
  /// or a runtime/application code such as 260 from a server that is stopping); false if we detected it.
  bool by_peer = false;
  /// True if a time-out ended the engine: the handshake's (code 22 bad_handshake), the dead peer's or
  /// the close's (code 272 connection_lost), so the owner can tell silence from a broken stream.
  bool timed_out = false;
};

/// What went through an engine.
struct engine_counters {
  std::uint64_t frames_in = 0;               // well-formed frames received, of every kind
  std::uint64_t frames_out = 0;              // frames the engine itself wrote (handshake, pong, ping, error, close)
  std::uint64_t spoiled_frames = 0;          // frames received with a non-fatal fault (skipped)
  std::uint64_t dropped_replies = 0;         // replies no caller waited for (count_dropped_reply())
  std::uint64_t refused_calls = 0;           // calls answered with 260 system_shutdown because we were closing
  std::uint64_t dropped_sends = 0;           // one-way sends received after a close, not delivered
  std::uint64_t peer_errors = 0;             // ERROR frames with transaction id 0 the peer sent (non-fatal ones too)
  std::uint64_t unknown_context_frames = 0;  // calls, sends and context requests for a context not open (258)
  std::uint64_t contexts_opened = 0;         // children the peer opened and the owner accepted
  std::uint64_t contexts_refused = 0;        // context_open requests of the peer's that were refused
};

/// The connection state machine, sans I/O.
///
/// Usage: start(out) once; feed(bytes, out, handler) with every chunk read; tick(now, out) when
/// next_deadline() is reached; on_eof() at end of stream; close(out) to end orderly. After each call,
/// write `out` to the transport (it may hold many frames: one writev), and look at state(): closed or
/// failed means close the transport once `out` is written.
///
/// The owner answers every call the handler received: it appends the reply (or ERROR) to an out_buffer
/// and calls reply_sent(out) once per call, so the engine knows when a close may complete.
///
/// Allocation: none per frame in steady state (the decoder's buffer and `out` keep their capacity);
/// ERROR texts and failure() allocate, on the error path only.
///
/// Thread-safety: one engine is used by one thread at a time.
class engine {
 public:
  using clock = std::chrono::steady_clock;

  explicit engine(role r, const engine_config& cfg = {}, buffer_hooks hooks = {});

  /// Appends our handshake and starts the handshake time-out from `now`. Call once, first.
  void start(out_buffer& out, clock::time_point now = clock::now());

  /// Feeds received bytes (any split). For each application frame (a send, or a call with a non-zero
  /// transaction id, in context 0 or in an open child; a reply or error with a non-zero transaction id,
  /// in any context) calls `handler.on_frame(const frame_view&)`; the view is valid during that call
  /// only. Answers ping with pong, writes ERROR frames for spoiled frames (a call's with its
  /// transaction id), answers calls, sends and context requests for a context that is not open with
  /// 258 no_such_context, answers every context_open and context_close (docs/protocol.md section 6),
  /// handles the handshake and close, all by appending to `out`. Bytes after a fatal error or the end
  /// of the engine are ignored. Returns state().
  ///
  /// The handler may also define:
  ///   - `void on_bad_reply(std::uint64_t txn, const error& e)`: a reply or error frame for transaction
  ///     `txn` arrived spoiled (e says how);
  ///   - `context_verdict on_context_open(std::uint64_t id, token kind, std::string_view name)`: the
  ///     peer opens child `id` (past the engine's own checks); without it every such child is opened;
  ///   - `void on_context_closing(std::uint64_t id)`: the peer's context_close for `id` arrived (its
  ///     answer goes out once every call received in the child is answered);
  ///   - `void on_context_ended(std::uint64_t id)`: child `id` ended at this peer (its close is
  ///     complete, or the peer refused our open); reply_sent(out, id) returns true instead when the
  ///     answer it records completes the close.
  template <class Handler>
  engine_state feed(std::span<const std::byte> bytes, out_buffer& out, Handler&& handler) {
    received_ = true;  // the next tick() takes its time as the time they arrived
    return feed_at(bytes, out, handler);
  }

  /// The same, with the time the bytes arrived (for the keepalive). The overload without it counts them
  /// as arrived at the next tick(), which is accurate only for an owner that ticks on a short fixed
  /// period; an owner whose timer fires at next_deadline() passes the time.
  template <class Handler>
  engine_state feed(std::span<const std::byte> bytes, out_buffer& out, Handler&& handler, clock::time_point now) {
    last_rx_ = now;
    pings_unanswered_ = 0;
    return feed_at(bytes, out, handler);
  }

  /// Bytes arrived at `now` that are not yet a whole frame (the owner holds them until the frame is
  /// complete and feeds it then): they count as liveness exactly like feed(..., now), so a peer that is
  /// sending a large frame slowly is neither pinged nor declared dead meanwhile.
  void note_received(clock::time_point now) noexcept {
    last_rx_ = std::max(last_rx_, now);
    pings_unanswered_ = 0;
  }

  /// The time has come (call it at next_deadline(), up to 100 ms late; any time earlier is harmless):
  /// sends a ping at each whole ping_interval of silence, fails the engine on a handshake, dead-peer
  /// or close time-out. Returns state().
  engine_state tick(clock::time_point now, out_buffer& out);

  /// When tick() next has something to do; clock::time_point::max() if never, clock::time_point::min()
  /// (call tick() now) when a close started without a time (reply_sent()) needs its timer started.
  [[nodiscard]] clock::time_point next_deadline() const noexcept;

  /// End of stream from the transport: closed if the close was orderly, else failed (truncated if it
  /// ended inside a frame, 272 connection_lost otherwise). Returns state().
  engine_state on_eof();

  /// Starts the orderly close: appends `close` (with the reason, if any; it must be UTF-8) and enters
  /// closing. From now on the owner starts no call or send. Harmless if already closing, closed or
  /// failed. Before the handshake is done nothing may be sent: the engine is closed at once (close
  /// the transport). If the peer closed first and calls are still unanswered, our close goes out by
  /// itself after the last reply (reply_sent()).
  void close(out_buffer& out, std::string_view reason = {}, clock::time_point now = clock::now());

  [[nodiscard]] engine_state state() const noexcept { return state_; }
  [[nodiscard]] role side() const noexcept { return role_; }
  /// What both peers agreed on; valid once open (and in closing/closed after an open).
  [[nodiscard]] const agreement& agreed() const noexcept { return agreed_; }
  /// The peer's handshake name (a copy, valid for the engine's life).
  [[nodiscard]] std::string_view peer_name() const noexcept { return peer_name_; }
  /// Why the engine failed; code 0 if it has not.
  [[nodiscard]] const engine_failure& failure() const noexcept { return failure_; }
  /// The peer sent close: start no new call or send.
  [[nodiscard]] bool peer_closing() const noexcept { return peer_closed_; }
  /// True while the owner may start calls and sends: open, and neither side has sent close.
  [[nodiscard]] bool open_for_calls() const noexcept { return state_ == engine_state::open && !peer_closed_; }
  [[nodiscard]] const engine_counters& counters() const noexcept { return counters_; }
  /// The largest frame (header and body) the engine accepts now: max_first_frame_size until the peer's
  /// handshake is accepted, then lim.max_frame_size. A header announcing more is frame_too_large.
  [[nodiscard]] std::size_t frame_limit() const noexcept { return decoder_.frame_limits().max_frame_size; }

  /// The owner found no caller for a reply (its call had timed out, or the id is unknown).
  void count_dropped_reply() noexcept { ++counters_.dropped_replies; }
  /// The owner appended the reply (or ERROR) to a call the handler received. When the peer has sent
  /// close and this was the last unanswered call, appends our close (or completes ours).
  void reply_sent(out_buffer& out);
  /// Calls the handler received that the owner has not answered yet.
  [[nodiscard]] std::size_t calls_unanswered() const noexcept { return calls_unanswered_; }
  /// The owner appended a call (with a non-zero transaction id) to its out_buffer. A close completes only
  /// when every call sent has been answered (a reply or error frame with a transaction id, delivered or
  /// spoiled), even calls the owner gave up on (time-out), or when the close time-out expires.
  void call_sent() noexcept { ++calls_outstanding_; }
  /// A call the owner counted with call_sent() never left (it was withdrawn before it was written):
  /// no answer will come for it.
  void call_withdrawn() noexcept {
    if (calls_outstanding_ != 0) --calls_outstanding_;
  }
  /// Calls sent and not answered yet (as far as the engine can tell: it counts answers, not ids).
  [[nodiscard]] std::size_t calls_outstanding() const noexcept { return calls_outstanding_; }

  /// The owner answered a call it received in `context`: reply_sent(out) for that child. Returns
  /// true when that answer completed the child's close (the child ended at this peer).
  bool reply_sent(out_buffer& out, std::uint64_t context);

  /// Opens a child context: appends a context_open with transaction id `txn` (non-zero, the owner's,
  /// answered like a call), the kind `kind` (zero for the peer's default) and `name` (may be
  /// empty), and returns the child's id (odd for the initiator, even for the acceptor). The child is
  /// usable at once. Returns 0 and appends nothing when calls may not start (open_for_calls()) or
  /// when the peer's limit of children (agreed().max_child_contexts) is reached.
  std::uint64_t open_context(out_buffer& out, std::uint64_t txn, token kind, std::string_view name = {});
  /// Closes a child in order: appends a context_close with transaction id `txn` (answered like a
  /// call) and sends nothing more in it. False, and nothing appended, when the child is not open
  /// here, we closed it already, the peer is closing it, or calls may not start.
  bool close_context(out_buffer& out, std::uint64_t context, std::uint64_t txn);
  /// Whether calls and sends may go out in `context` now: 0 while open_for_calls(), a child while it
  /// is open and neither side has sent its context_close.
  [[nodiscard]] bool context_usable(std::uint64_t context) const noexcept;
  /// Whether `context` names a child that has not ended at this peer (open, or closing).
  [[nodiscard]] bool has_child(std::uint64_t context) const noexcept { return children_.contains(context); }
  /// Children that have not ended at this peer, opened by either side.
  [[nodiscard]] std::size_t children() const noexcept { return children_.size(); }

 private:
  template <class Handler>
  engine_state feed_at(std::span<const std::byte> bytes, out_buffer& out, Handler& handler) {
    if (!accepting_input()) return state_;
    decoder_.feed(bytes);
    for (;;) {
      step_result s = step(out);
      if (s.what == step_result::deliver) {
        handler.on_frame(s.frame);
        if (s.answer) answer_received();
      } else if (s.what == step_result::open_child) {
        context_verdict verdict{};
        if constexpr (requires { handler.on_context_open(std::uint64_t{}, token{}, std::string_view{}); })
          verdict = handler.on_context_open(s.frame.context_id(), s.frame.token(), s.name);
        answer_open(s.frame.header(), verdict, out);
      } else if (s.what == step_result::child_closing) {
        if constexpr (requires { handler.on_context_closing(std::uint64_t{}); })
          handler.on_context_closing(s.frame.context_id());
        if (maybe_answer_close(s.frame.context_id(), out)) notify_ended(handler, s.frame.context_id());
      } else if (s.what == step_result::bad_reply) {
        if constexpr (requires { handler.on_bad_reply(std::uint64_t{}, bad_reply_fault_); })
          handler.on_bad_reply(s.frame.transaction_id(), bad_reply_fault_);
        answer_received();
      } else if (s.what == step_result::done) {
        break;
      }
      if (s.ended != 0) notify_ended(handler, s.ended);
    }
    return state_;
  }

  /// What one frame asks of feed_at. Trivially copyable and small, so the per-frame return costs a
  /// few register moves: a bad reply's error waits in bad_reply_fault_ instead.
  struct step_result {
    enum what_t : std::uint8_t { done, deliver, bad_reply, again, open_child, child_closing } what = done;
    bool answer = false;      // a reply or error frame with a transaction id
    frame_view frame{};       // deliver: the frame; open_child, child_closing, bad_reply: its header
    std::string_view name{};  // open_child: the child's name, viewing the frame
    std::uint64_t ended = 0;  // a child whose close this frame completed (or whose open it refused)
  };
  static_assert(std::is_trivially_copyable_v<step_result>, "a step result is returned for every frame");

  /// A child context as this peer sees it, from its open until its close is complete here.
  struct child_context {
    bool opened_by_us = false;
    bool we_closed = false;  // our context_close went out
    bool our_close_answered = false;
    bool peer_closed = false;  // the peer's context_close arrived
    bool peer_close_answered = false;
    std::uint64_t open_txn = 0;        // our context_open, until its answer
    std::uint64_t close_txn = 0;       // our context_close, until its answer
    std::uint64_t peer_close_txn = 0;  // the peer's context_close, until we answer it
    std::size_t calls_unanswered = 0;  // calls the owner received in it and has not answered
  };

  template <class Handler>
  static void notify_ended(Handler& handler, std::uint64_t context) {
    if constexpr (requires { handler.on_context_ended(std::uint64_t{}); }) handler.on_context_ended(context);
  }

  [[nodiscard]] bool accepting_input() const noexcept {
    return state_ == engine_state::handshaking || state_ == engine_state::open || state_ == engine_state::closing;
  }
  step_result step(out_buffer& out);
  step_result on_valid(const frame_view& f, out_buffer& out);
  step_result on_spoiled(const error& e, out_buffer& out);
  step_result refuse_unknown_context(const frame_header& h, std::uint64_t txn, out_buffer& out);
  step_result on_context_open(const frame_view& f, out_buffer& out);
  step_result on_context_close(const frame_view& f, out_buffer& out);
  /// An answer to a call or request of ours in child `context`: one to our open or close moves the
  /// child on. Returns the child if that ended it.
  std::uint64_t on_answer_in_child(std::uint64_t context, std::uint64_t txn, bool is_error);
  void answer_open(const frame_header& h, const context_verdict& verdict, out_buffer& out);
  /// Answers the peer's context_close once every call in the child is answered; true if the child ended.
  bool maybe_answer_close(std::uint64_t context, out_buffer& out);
  /// Forgets a child whose close is complete here; true if it ended.
  bool maybe_end_child(std::uint64_t context);
  void write_reply(out_buffer& out, const frame_header& about);
  [[nodiscard]] bool peer_parity(std::uint64_t context) const noexcept;
  void on_handshake(const frame_view& f, out_buffer& out);
  void on_peer_close(out_buffer& out);
  void maybe_finish_close() noexcept;
  [[nodiscard]] clock::time_point next_ping_due() const noexcept;
  // Whether a keepalive ping may go out: not in closing, and not once enough are unanswered.
  [[nodiscard]] bool pinging() const noexcept { return !we_closed_ && pings_unanswered_ < pings_before_dead(); }
  // When a silent peer is dead: max() until enough pings went unanswered.
  [[nodiscard]] clock::time_point dead_peer_due() const noexcept;
  void answer_received() noexcept;
  /// One answer the owner or the engine owed the peer went out.
  void owed_answer_sent(out_buffer& out);
  void send_close(out_buffer& out, std::string_view reason);
  void write_error(out_buffer& out, const frame_header& about, std::uint64_t txn, std::uint32_t code,
                   std::string_view text);
  void fail(out_buffer* out, std::uint32_t code, std::string text);
  /// A time-out: failure() says timed_out; `to_peer` is the ERROR frame's text (none if empty).
  void time_out(out_buffer* out, std::uint32_t code, std::string text, std::string_view to_peer = {});

  role role_;
  engine_config cfg_;
  decoder decoder_;
  engine_state state_ = engine_state::handshaking;
  agreement agreed_{};
  std::string peer_name_;
  std::string local_name_;
  engine_failure failure_{};
  error bad_reply_fault_{};  // why the frame of the last bad_reply step was spoiled
  engine_counters counters_{};
  std::size_t calls_unanswered_ = 0;
  std::size_t calls_outstanding_ = 0;
  bool started_ = false;
  bool peer_closed_ = false;  // the peer's close arrived
  bool we_closed_ = false;    // we sent close
  bool received_ = false;     // bytes arrived since the last tick
  std::uint64_t next_ping_id_ = 1;
  std::uint32_t pings_unanswered_ = 0;  // keepalive pings sent since the last byte received
  std::unordered_map<std::uint64_t, child_context> children_;
  std::size_t children_by_peer_ = 0;  // open children the peer opened (its limit: cfg_.max_child_contexts)
  std::size_t children_by_us_ = 0;    // open children we opened (our limit: agreed_.max_child_contexts)
  std::uint64_t next_child_id_ = 0;   // the last id we opened (0: none yet)
  clock::time_point started_at_{};
  clock::time_point handshake_from() const noexcept {
    return cfg_.handshake_from != clock::time_point{} ? std::min(cfg_.handshake_from, started_at_) : started_at_;
  }
  clock::time_point last_rx_{};
  clock::time_point last_ping_{};
  clock::time_point last_ping_counted_{};  // when the peer's time to answer the last ping began
  clock::time_point close_sent_at_{};
  // How late a timer may fire and still be on time (docs/protocol.md section 12).
  static constexpr std::chrono::milliseconds timer_tolerance{100};

  // How many unanswered pings make a silent peer dead: those of every interval but the last.
  [[nodiscard]] std::uint32_t pings_before_dead() const noexcept {
    return cfg_.dead_after_intervals > 1 ? cfg_.dead_after_intervals - 1 : 0;
  }
};

}  // namespace courier::wire
