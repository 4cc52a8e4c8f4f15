#pragma once
/// @file
/// One connection's byte work, shared by the client and server connection actors (remote.hpp): the
/// socket, the protocol session (courier/wire/session.hpp: handshake, ping, close, spoiled frames),
/// the receive blocks, and one output buffer that every frame queued during a turn goes into, so
/// that a burst leaves in one write. The actor that owns it calls it only from its own turns, so
/// nothing here locks.
///
/// Zero-copy receive: reads land in reference-counted blocks (courier/wire/shared_buffer.hpp) that
/// the connection recycles. Only whole frames are handed to the session, each a view into the
/// block it was read into (`frame_owner()` during on_frame), so a message whose fields are
/// `string_ref`/`bytes_ref` shares the block across its mailbox hop instead of copying. A block is
/// written again only once nothing else holds it; a partial frame left at the end of a block moves
/// to the front of a free block (the only copy on the receive path).
///
/// Thread-safety: not thread-safe; owned by one connection actor (one thread at a time).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "courier/error.hpp"
#include "courier/net/socket.hpp"
#include "courier/wire/buffer.hpp"
#include "courier/wire/shared_buffer.hpp"
#include "courier/wire/session.hpp"

namespace courier::net {

/// What a connection may use and how far it lets the other side run ahead.
struct connection_config {
  /// Our name in the handshake (for the peer's logs).
  std::string name = "courier";
  /// Frame size, item count and depth we accept (announced in the handshake).
  wire::limits limits{};
  /// The size of a receive block (a frame larger than this gets a block of its own size), and
  /// the most a turn reads before it lets other actors run.
  std::size_t read_chunk = 64 * 1024;
  std::size_t read_budget = 256 * 1024;
  /// Receive blocks of read_chunk bytes a connection may hold while messages still view them
  /// (string_ref fields handed to actors): beyond it the connection stops reading until one is
  /// free, so handlers that keep views bound its memory (read_chunk * max_read_blocks).
  std::size_t max_read_blocks = 64;
  /// Server: stop reading the socket while this many calls (and one-way sends, counted in
  /// batches) wait for the served actor, so TCP flow control reaches the client. Client: the most
  /// calls in flight; a request beyond it fails at once with errc::mailbox_full.
  std::size_t max_in_flight = 4096;
  /// Client: while more than this many bytes wait for the socket (the peer reads too slowly), the
  /// connection's mailbox refuses new sends and requests at the call, as a full bounded mailbox
  /// does: `send` returns false (a dead letter with reason mailbox_full), `try_send` returns
  /// send_result::full, a request fails at once with errc::mailbox_full. It takes them again once
  /// a write brings the bytes waiting down to half this mark. What it accepted before goes on the
  /// wire. Server: stop reading while this many bytes of replies wait for the socket.
  std::size_t outbound_high_water = 8 * 1024 * 1024;
  /// Client: bounds the connection actor's mailbox. A sender faster than the connection is then
  /// refused at the call as above, and the client holds at most this many messages plus
  /// outbound_high_water bytes (plus one turn's messages, the connection's own overshoot: what the
  /// mailbox accepted before the mark was passed is still written). 16,384: more than a hundred
  /// turns (config::throughput) of slack, so a sender the connection keeps up with is never
  /// refused, and for messages up to 512 bytes what it may hold is at most the mark again (8 MiB).
  /// 0: unbounded, which cannot refuse at the call: a one-way send taken from the mailbox above
  /// the mark is then dropped (a dead letter, counted in client_connection::refused_sends) and a
  /// request fails with errc::mailbox_full.
  std::size_t mailbox_capacity = 16 * 1024;
  /// A peer that has not completed the handshake by then is disconnected.
  std::chrono::milliseconds handshake_timeout{10'000};
  /// Client: whether connect() and adopt(), called from a plain thread of a threaded system, wait
  /// for the handshake (so a refused or mismatched server is their error). false: they return
  /// the ref at once, and the first call fails with the handshake's error if it fails; calls made
  /// meanwhile are sent once it is accepted.
  bool wait_for_handshake = true;
  /// Client: how long connect() may take to reach the server (the handshake then has its own time).
  std::chrono::milliseconds connect_timeout{10'000};
  /// SO_SNDBUF and SO_RCVBUF of the connection's socket, in bytes (0: the kernel's defaults).
  std::size_t socket_buffer_size = 0;
  /// Server (serve()): connections served at once on this endpoint; one more gets ERROR 260
  /// ("too many connections") as its first frame and is closed. 0: no limit.
  std::size_t max_connections = 0;
  /// Server (serve()): receive memory in bytes that all connections of this endpoint together may
  /// hold for frames still arriving (a frame's block grows with the bytes received, never ahead of
  /// them); a connection whose frame would pass it is ended with a fatal ERROR. 0: no limit.
  std::size_t max_receive_memory = 0;
  /// Diagnostics on stderr: 1 a line when the connection opens and when it ends (with why).
  int debug = 0;
  /// Keepalive: a ping after this much silence; the peer is dead after `dead_after_intervals`
  /// intervals without a byte (docs/protocol.md). 0 turns keepalive off.
  std::chrono::milliseconds ping_interval{10'000};
  std::uint32_t dead_after_intervals = 3;
  /// After our close, the peer's close must come within this time.
  std::chrono::milliseconds close_timeout{10'000};
};

/// Receive memory shared by the connections of one endpoint (connection_config::max_receive_memory):
/// each connection adds the size of every receive block it allocates and takes it back when it
/// lets the block go. Thread-safety: atomic; shared by connections on any threads.
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

/// Counters a connection keeps (read by its actor; tests and the benchmark print them).
struct connection_stats {
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t reads = 0;
  std::uint64_t writes = 0;
  std::uint64_t dropped_replies = 0;  // replies (or errors) for no call waiting: late or unknown
  std::uint64_t refused_sends = 0;    // one-way sends accepted and then refused: closing or lost (or above the
                                      // outbound mark with an unbounded mailbox); each also a dead letter
  std::uint64_t bytes_moved = 0;      // bytes of partial frames moved to another block or its front
  std::uint64_t read_blocks = 0;      // receive blocks allocated (steady state: no growth)
  std::uint64_t read_stalls = 0;      // reads put off because every block was still in use
};

class connection {
 public:
  /// `memory`, if given, is the budget this connection's receive blocks count against.
  connection(socket sock, wire::role role, const connection_config& cfg, std::shared_ptr<receive_memory> memory = nullptr);
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection();

  /// Queues our handshake (both peers send theirs at once).
  void start();

  /// Reads what the socket holds, up to the read budget, and feeds it to the session;
  /// `handler.on_frame(const wire::frame_view&)` runs for each application frame (send, call,
  /// reply, error of a call) while its bytes are valid (and, shared through frame_owner(), for as
  /// long as a decoded message keeps them). Returns true when the budget ran out with more perhaps
  /// left to read (the caller reads again on a later turn). When every receive block is still in
  /// use it reads nothing and read_stalled() is true: call it again a little later.
  template <class Handler>
  bool receive(Handler& handler, std::size_t max_bytes = SIZE_MAX);

  /// The block the frame being handled lies in (during on_frame): decode with it as owner.
  wire::shared_block* frame_owner() const noexcept { return cur_; }
  /// The last receive() stopped because every receive block was held by messages.
  bool read_stalled() const noexcept { return stalled_; }

  /// Where application frames go. Until the handshake is accepted they are held back (the
  /// protocol forbids them before), then they follow the session's own frames.
  wire::out_buffer& frames() noexcept { return session_.state() == wire::session_state::handshaking ? held_ : out_; }

  /// Writes what is queued, as far as the socket takes it (one write call for everything queued);
  /// false when the socket failed (finished() is then true).
  bool flush();

  /// Bytes queued and not yet taken by the socket.
  std::size_t unwritten() const noexcept { return out_.size() - written_ + held_.size(); }
  bool wants_write() const noexcept { return out_.size() != written_; }

  /// Starts the orderly close (docs/protocol.md, "Orderly close").
  void close(std::string_view reason = {});

  /// The owner appended the answer to a call it received (the session completes a close after
  /// the last one).
  void reply_sent() { session_.reply_sent(out_); }

  /// Runs the time-outs: the session's (handshake, keepalive ping, dead peer, close) while
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
  bool open_for_calls() const noexcept { return session_.open_for_calls(); }
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

  wire::session& session() noexcept { return session_; }
  connection_stats& stats() noexcept { return stats_; }
  const connection_config& config() const noexcept { return cfg_; }
  int fd() const noexcept { return sock_.fd(); }
  std::chrono::steady_clock::time_point started() const noexcept { return started_; }

 private:
  void after_session_step();
  void release_held();
  void read_refusal();
  void finish(courier::error why);
  void compact() noexcept;
  enum class room : std::uint8_t { ready, stalled, failed };
  room make_room();
  wire::shared_block* free_block(std::size_t need);
  wire::shared_block* new_block(std::size_t capacity);
  void drop_block(wire::shared_block* b);
  std::size_t pending_frame_size() const noexcept;
  /// Our limits, with the frame size the session accepts now (smaller before the handshake).
  wire::limits frame_limits() const noexcept {
    wire::limits l = cfg_.limits;
    l.max_frame_size = static_cast<std::uint32_t>(session_.frame_limit());
    return l;
  }
  std::chrono::steady_clock::time_point output_deadline() const noexcept;
  const char* side_name() const noexcept;
  std::chrono::milliseconds dead_after() const noexcept { return cfg_.ping_interval * cfg_.dead_after_intervals; }
  template <class Handler>
  void deliver(Handler& handler);

  socket sock_;
  connection_config cfg_;
  wire::session session_;
  wire::out_buffer out_;
  wire::out_buffer held_;
  std::size_t written_ = 0;
  std::shared_ptr<receive_memory> memory_;
  std::size_t counted_ = 0;              // bytes of blocks_ counted against memory_
  std::vector<withdrawn_frame> withdrawn_;
  std::chrono::steady_clock::time_point blocked_since_{};  // output waiting with no progress since
  std::vector<wire::block_ref> blocks_;  // the receive blocks we hold a reference to
  wire::shared_block* cur_ = nullptr;    // the one being read into (one of blocks_)
  std::size_t begin_ = 0;                // cur_[begin_, end_): read, not yet handed to the session
  std::size_t end_ = 0;
  bool stalled_ = false;
  std::chrono::steady_clock::time_point arrived_{};  // when the last read returned bytes
  connection_stats stats_;
  wire::limits send_limits_;
  bool opened_ = false;
  bool finished_ = false;
  courier::error why_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

template <class Handler>
bool connection::receive(Handler& handler, std::size_t max_bytes) {
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
      // A partial frame left over goes to the session, which reports it as truncated.
      if (begin_ != end_) session_.feed({cur_->data() + begin_, end_ - begin_}, out_, handler, std::chrono::steady_clock::now());
      begin_ = end_;
      session_.on_eof();
      after_session_step();
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
    arrived_ = std::chrono::steady_clock::now();
    session_.note_received(arrived_);
    deliver(handler);
  }
  return !finished_;
}

// Hands the session every whole frame read so far, each a view into cur_. Frames are stepped over
// by their length field alone: the session's decoder checks each header it is given, and stops at
// the first bad one. Only the frame left incomplete is checked here, so that a bad header goes to
// the session (with everything after it) as soon as its 32 bytes have arrived (docs/protocol.md),
// rather than waiting for a body that its length may promise and never come.
template <class Handler>
void connection::deliver(Handler& handler) {
  std::size_t p = begin_;
  for (;;) {
    const std::size_t have = end_ - p;
    if (have < wire::header_size) {
      // Not a header yet: a peer that speaks another protocol is still told at once (bad_magic).
      if (!wire::magic_prefix_ok(cur_->data() + p, have)) p = end_;
      break;
    }
    // 64-bit arithmetic: a length near 2^32 must not wrap where size_t is 32 bits.
    const std::uint64_t size =
        std::uint64_t{wire::header_size} + wire::detail::load_le<std::uint32_t>(cur_->data() + p + wire::offset::body_length);
    if (have < size) {
      if (!wire::parse_header(std::span<const std::byte, wire::header_size>(cur_->data() + p, wire::header_size),
                              frame_limits()))
        p = end_;
      break;
    }
    p += static_cast<std::size_t>(size);
  }
  if (p == begin_) return;
  const std::size_t from = begin_;
  // Handed over before the handler runs: a handler that throws ends the connection actor's turn
  // (and the actor), so the frames after it in this chunk are not read again.
  begin_ = p;
  session_.feed({cur_->data() + from, p - from}, out_, handler, arrived_);
  after_session_step();
}

}  // namespace courier::net
