#pragma once
/// @file
/// One connection's byte work (private to the network layer), shared by the connection actors
/// (net/detail/connection.hpp): the
/// socket, the protocol engine (courier/wire/engine.hpp: handshake, ping, close, spoiled frames),
/// the receive blocks, and one output buffer that every frame queued during a turn goes into, so
/// that a burst leaves in one write. The actor that owns it calls it only from its own turns, so
/// nothing here locks.
///
/// Zero-copy receive: reads land in reference-counted blocks (courier/wire/shared_buffer.hpp) that
/// the connection recycles. Only whole frames are handed to the engine, each a view into the
/// block it was read into (`frame_owner()` during on_frame), so a message whose fields are
/// `string_ref`/`bytes_ref` shares the block across its mailbox hop instead of copying. A block is
/// written again only once nothing else holds it; a partial frame left at the end of a block moves
/// to the front of a free block (the only copy on the receive path).
///
/// Thread-safety: not thread-safe; owned by one connection actor (one thread at a time).

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "courier/detail/runtime.hpp"
#include "courier/error.hpp"
#include "courier/net/connection_config.hpp"
#include "courier/net/socket.hpp"
#include "courier/wire/buffer.hpp"
#include "courier/wire/engine.hpp"
#include "courier/wire/shared_buffer.hpp"

namespace courier::net::detail {

/// Receive memory shared by the connections of one endpoint, or of every node of a process
/// (connection_config::max_receive_memory): each connection adds the size of every receive block
/// it allocates beyond its first (the resident block of read_chunk bytes, which every connection
/// holds while it lives), and takes it back when it lets the block go; a frame that grows its
/// block counts at the block's size. Thread-safety: atomic; shared by connections on any threads.
struct receive_memory {
  explicit receive_memory(std::size_t cap) noexcept : limit(cap) {}
  const std::size_t limit;
  std::atomic<std::size_t> used{0};
};

/// A frame queued during the handshake that turned out larger than the peer accepts: it was not
/// sent, and its owner fails the call (or counts the send) it was.
struct withdrawn_frame {
  wire::kind kind{};
  std::uint64_t transaction_id = 0;
  std::size_t size = 0;
};

class wire_stream {
 public:
  /// `memory`, if given, is the budget this connection's receive blocks count against. `clock`
  /// is the system whose timers the connection's clock follows (see now(); null: the steady clock).
  wire_stream(socket sock, wire::role role, const connection_config& cfg, courier::detail::system_core* clock,
              std::shared_ptr<receive_memory> memory = nullptr);
  wire_stream(const wire_stream&) = delete;
  wire_stream& operator=(const wire_stream&) = delete;
  ~wire_stream();

  /// Queues our handshake (both peers send theirs at once).
  void start();

  /// Reads what the socket holds, up to the read budget, and feeds it to the engine;
  /// `handler.on_frame(const wire::frame_view&)` runs for each application frame (send, call,
  /// reply, error of a call) while its bytes are valid (and, shared through frame_owner(), for as
  /// long as a decoded message keeps them). Returns true when the budget ran out with more perhaps
  /// left to read (the caller reads again on a later turn). When every receive block is still in
  /// use it reads nothing and read_stalled() is true: call it again a little later.
  template <class Handler>
  bool receive(Handler& handler, std::size_t max_bytes = SIZE_MAX);

  /// Readiness the reactor reported (an epoll mask): after a hang-up or an error, receive()
  /// reads on to the end of file or the error, instead of stopping at a short read (the peer's
  /// close may be the last edge the socket ever reports).
  void note_readiness(std::uint32_t epoll_events) noexcept {
    if ((epoll_events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) hung_up_ = true;
  }

  /// The block the frame being handled lies in (during on_frame): decode with it as owner.
  wire::shared_block* frame_owner() const noexcept { return cur_; }
  /// The last receive() stopped because every receive block was held by messages.
  bool read_stalled() const noexcept { return stalled_; }

  /// Where application frames go. Until the handshake is accepted they are held back (the
  /// protocol forbids them before), then they follow the engine's own frames.
  wire::out_buffer& frames() noexcept { return engine_.state() == wire::engine_state::handshaking ? held_ : out_; }

  /// Writes what is queued, as far as the socket takes it (one write call for everything queued);
  /// false when the socket failed (finished() is then true).
  bool flush();

  /// Bytes queued and not yet taken by the socket.
  std::size_t unwritten() const noexcept { return out_.size() - written_ + held_.size(); }
  bool wants_write() const noexcept { return out_.size() != written_; }

  /// Starts the orderly close (docs/protocol.md, "Orderly close").
  void close(std::string_view reason = {});

  /// The owner appended the answer to a call it received. The engine completes a close after
  /// the last one, and the connection then ends now, not at its next time-out.
  void reply_sent() {
    engine_.reply_sent(out_);
    after_engine_step();
  }
  /// The same for a call received in child `context`; true when that answer completed the
  /// child's close (the child ended here).
  bool reply_sent(std::uint64_t context) {
    const bool child_ended = engine_.reply_sent(out_, context);
    after_engine_step();
    return child_ended;
  }

  /// Runs the time-outs: the engine's (handshake, keepalive ping, dead peer, close) while
  /// `reading` (a connection that leaves the socket unread learns nothing from silence), and,
  /// reading or not, output that made no progress for the dead-peer time (the peer reads nothing).
  /// Call it at next_deadline(reading) at the latest.
  void tick(bool reading = true);
  std::chrono::steady_clock::time_point next_deadline(bool reading = true) const noexcept;

  /// Frames queued during the handshake that the peer's announced frame size turned away; the
  /// owner takes them once (the list is cleared).
  std::vector<withdrawn_frame> take_withdrawn() { return std::exchange(withdrawn_, {}); }

  /// The peer's handshake was accepted (the connection may have finished since).
  bool open() const noexcept { return opened_; }
  /// New calls and sends may go out (open, and neither side has sent close).
  bool open_for_calls() const noexcept { return engine_.open_for_calls(); }
  /// Nothing more will come: closed in order, failed, or the peer went away. Close the socket.
  bool finished() const noexcept { return finished_; }
  /// Why it finished: connection_lost (end of stream, socket error, dead peer) or protocol_error.
  const courier::error& why() const noexcept { return why_; }
  /// Ends the connection from our side with `why` (the socket is closed by the destructor).
  void fail(courier::error why);
  /// Closes the socket now (the peer sees the end at once); the connection is finished.
  void close_socket() noexcept;

  /// The limits frames we send must keep: ours, with the frame size the peer announced.
  const wire::limits& send_limits() const noexcept { return send_limits_; }

  wire::engine& engine() noexcept { return engine_; }
  connection_stats& stats() noexcept { return stats_; }
  const connection_config& config() const noexcept { return cfg_; }
  int fd() const noexcept { return sock_.fd(); }
  std::chrono::steady_clock::time_point started() const noexcept { return started_; }
  /// The connection's clock: its system's timers' (a deterministic system's virtual clock, where
  /// the test moves time and the protocol's time-outs come due with the timers that check them),
  /// else the steady clock itself, read with no call in between.
  std::chrono::steady_clock::time_point now() const noexcept {
    if (!virtual_clock_) return std::chrono::steady_clock::now();
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(courier::detail::timer_now_ns(clock_)));
  }
  bool uses_virtual_clock() const noexcept { return virtual_clock_; }

 private:
  void after_engine_step();
  void release_held();
  void read_refusal();
  void finish(courier::error why);
  void compact() noexcept;
  enum class room : std::uint8_t { ready, stalled, failed };
  room make_room();
  template <class Handler>
  bool read_frames(Handler& handler, std::size_t max_bytes);
  wire::shared_block* take_idle_block() noexcept;
  void lend_idle_block() noexcept;
  wire::shared_block* free_block(std::size_t need);
  wire::shared_block* new_block(std::size_t capacity, std::size_t uncounted = 0);
  void drop_block(wire::shared_block* b, bool counted = true);
  std::size_t pending_frame_size() const noexcept;
  /// Our limits, with the frame size the engine accepts now (smaller before the handshake).
  wire::limits frame_limits() const noexcept {
    wire::limits l = cfg_.limits;
    l.max_frame_size = static_cast<std::uint32_t>(engine_.frame_limit());
    return l;
  }
  std::chrono::steady_clock::time_point output_deadline() const noexcept;
  // The peer's address and handshake name, for the log.
  const std::string& peer_address();
  const char* side_name() const noexcept;
  std::chrono::milliseconds dead_after() const noexcept { return cfg_.ping_interval * cfg_.dead_after_intervals; }
  template <class Handler>
  void deliver(Handler& handler);

  socket sock_;
  connection_config cfg_;
  wire::engine engine_;
  wire::out_buffer out_;
  wire::out_buffer held_;
  std::size_t written_ = 0;
  std::shared_ptr<receive_memory> memory_;
  std::size_t counted_ = 0;  // bytes of blocks_ counted against memory_
  std::vector<withdrawn_frame> withdrawn_;
  std::chrono::steady_clock::time_point blocked_since_{};  // output waiting with no progress since
  std::vector<wire::block_ref> blocks_;                    // the receive blocks we hold a reference to
  wire::shared_block* cur_ = nullptr;                      // the one being read into (one of blocks_; none while idle)
  std::size_t begin_ = 0;                                  // cur_[begin_, end_): read, not yet handed to the engine
  std::size_t end_ = 0;
  bool stalled_ = false;
  bool hung_up_ = false;                             // the reactor reported a hang-up or an error: read until the end
  std::chrono::steady_clock::time_point arrived_{};  // when the last read returned bytes
  connection_stats stats_;
  wire::limits send_limits_;
  bool opened_ = false;
  bool finished_ = false;
  courier::error why_;
  std::string peer_address_;  // for the log, made when first written
  courier::detail::system_core* clock_;
  bool virtual_clock_;
  std::chrono::steady_clock::time_point started_ = now();
};

template <class Handler>
bool wire_stream::receive(Handler& handler, std::size_t max_bytes) {
  const bool more = read_frames(handler, max_bytes);
  lend_idle_block();
  return more;
}

template <class Handler>
bool wire_stream::read_frames(Handler& handler, std::size_t max_bytes) {
  stalled_ = false;
  if (!sock_) return false;
  std::size_t taken = 0;
  // `max_bytes` caps what this call may read: a frame is at least a header long, so a caller that
  // has room for n more frames passes n headers' worth and never gets more than n.
  const std::size_t budget = max_bytes < cfg_.read_budget ? max_bytes : cfg_.read_budget;
  while (!finished_ && taken < budget) {
    const room ready = make_room();
    if (ready == room::failed) return false;
    if (ready == room::stalled) {
      stalled_ = true;
      ++stats_.read_stalls;
      return false;
    }
    const std::size_t space = cur_->capacity() - end_;
    const std::size_t want = budget - taken < space ? budget - taken : space;
    const io_result r = read_some(sock_, {cur_->data() + end_, want});
    if (r.status == io_result::would_block) return false;
    if (r.status == io_result::eof) {
      // A partial frame left over goes to the engine, which reports it as truncated.
      if (begin_ != end_) engine_.feed({cur_->data() + begin_, end_ - begin_}, out_, handler, now());
      begin_ = end_;
      engine_.on_eof();
      after_engine_step();
      if (!finished_) finish(courier::error(errc::connection_lost, "the peer closed the connection"));
      return false;
    }
    if (r.status == io_result::failed) {
      finish(courier::error(errc::connection_lost, std::string("read: ") + std::strerror(r.error)));
      return false;
    }
    ++stats_.reads;
    stats_.bytes_in += r.bytes;
    taken += r.bytes;
    end_ += r.bytes;
    // Every byte shows the peer alive, a frame still arriving too (docs/protocol.md section 12).
    arrived_ = now();
    engine_.note_received(arrived_);
    deliver(handler);
    // A stream socket's read comes back short only when it took everything there was, and each
    // later arrival is a new edge: a read that would only say EAGAIN is saved.
    if (r.bytes < want && !hung_up_) return false;
  }
  return !finished_;
}

// Hands the engine every whole frame read so far, each a view into cur_. Frames are stepped over
// by their length field alone: the engine's decoder checks each header it is given, and stops at
// the first bad one. The frame left incomplete is checked here, once the whole frames before it
// have been fed: a handshake among them changes the limits it is held to (before it, a frame may
// be no larger than a first frame). A bad header then goes to the engine (with everything after
// it) as soon as its 32 bytes have arrived (docs/protocol.md), rather than waiting for a body that
// its length may promise and never come; a good one waits in cur_, which grows for it against
// the endpoint's receive memory. The engine is never given part of a frame: it would gather the
// rest itself, outside that budget.
template <class Handler>
void wire_stream::deliver(Handler& handler) {
  std::size_t p = begin_;
  for (;;) {
    const std::size_t have = end_ - p;
    if (have < wire::header_size) break;
    // 64-bit arithmetic: a length near 2^32 must not wrap where size_t is 32 bits.
    const std::uint64_t size = std::uint64_t{wire::header_size} +
                               wire::detail::load_le<std::uint32_t>(cur_->data() + p + wire::offset::body_length);
    if (have < size) break;
    p += static_cast<std::size_t>(size);
  }
  if (p != begin_) {
    const std::size_t from = begin_;
    // Handed over before the handler runs: a handler that throws ends the connection actor's turn
    // (and the actor), so the frames after it in this chunk are not read again.
    begin_ = p;
    engine_.feed({cur_->data() + from, p - from}, out_, handler, arrived_);
    after_engine_step();
    if (finished_) return;
  }
  const std::size_t have = end_ - begin_;
  if (have == 0) return;
  const bool bad =
      have < wire::header_size
          ? !wire::magic_prefix_ok(cur_->data() + begin_, have)  // another protocol is told at once (bad_magic)
          : !wire::parse_header(std::span<const std::byte, wire::header_size>(cur_->data() + begin_, wire::header_size),
                                frame_limits());
  if (!bad) return;
  const std::size_t from = begin_;
  begin_ = end_;
  engine_.feed({cur_->data() + from, end_ - from}, out_, handler, arrived_);
  after_engine_step();
}

}  // namespace courier::net::detail
