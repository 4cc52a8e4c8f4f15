// One connection's byte work: the protocol engine between a socket and the connection actor.
#include "courier/net/detail/wire_stream.hpp"

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <random>
#include <utility>

#include "courier/net/peer.hpp"
#include "courier/wire/encoder.hpp"

namespace courier::net::detail {

namespace {

// Each handshake carries a fresh nonce, so that a transport that echoes our bytes back (a pipe
// "server" such as cat) shows our own handshake and is refused instead of answered.
std::uint64_t handshake_nonce() {
  thread_local std::mt19937_64 bits{std::random_device{}()};
  std::uint64_t n = 0;
  while (n == 0) n = bits();
  return n;
}

wire::engine_config engine_config_of(const connection_config& cfg) {
  wire::engine_config s;
  s.local.peer_name = cfg.name;
  s.local.nonce = handshake_nonce();
  s.local.max_frame_size = cfg.limits.max_frame_size;
  s.lim = cfg.limits;
  s.handshake_timeout = cfg.handshake_timeout;
  s.handshake_from = cfg.accepted_at;
  s.ping_interval = cfg.ping_interval;
  s.dead_after_intervals = cfg.dead_after_intervals;
  s.close_timeout = cfg.close_timeout;
  s.max_child_contexts = cfg.max_child_contexts;
  return s;
}

// The receive blocks that connections left idle on this thread, for the next connection that reads
// here. A connection holds a block only while it has bytes in it or views of them are kept: with
// thousands of connections, each with a block of its own, every read went to memory that had gone
// cold since that connection's last call (a cache miss for the block and another for the kernel's
// copy into it), where one block passed from connection to connection stays warm.
struct idle_blocks {
  static constexpr std::size_t most = 4;  // more than one turn's worth: a turn lends what it took
  std::array<wire::block_ref, most> kept;
  std::size_t count = 0;
};
thread_local idle_blocks idle_here;

}  // namespace

wire_stream::wire_stream(socket sock, wire::role role, const connection_config& cfg,
                         courier::detail::system_core* clock, std::shared_ptr<receive_memory> memory)
    : sock_(std::move(sock)),
      cfg_(cfg),
      engine_(role, engine_config_of(cfg_)),
      memory_(std::move(memory)),
      send_limits_(cfg_.limits),
      clock_(clock),
      virtual_clock_(clock != nullptr && courier::detail::uses_virtual_clock(clock)) {
  if (cfg_.socket_buffer_size != 0 && sock_) {
    if (auto ok = set_buffer_size(sock_, cfg_.socket_buffer_size); !ok) finish(ok.err());
  }
}

wire_stream::~wire_stream() {
  if (memory_ && counted_ != 0) memory_->used.fetch_sub(counted_, std::memory_order_relaxed);
}

void wire_stream::start() {
  engine_.start(out_, now());
  after_engine_step();
}

void wire_stream::close(std::string_view reason) {
  if (finished_) return;
  engine_.close(out_, reason, now());
  after_engine_step();
}

void wire_stream::tick(bool reading) {
  if (finished_) return;
  const auto now = this->now();
  // Before the peer is judged, what was due from us is done: output the peer may have made room for
  // while we were not running is written (a stall of ours is not the peer's failure to read).
  if (now >= output_deadline()) flush();
  if (now >= output_deadline()) {
    finish(courier::error(errc::connection_lost, "the peer read nothing for " + std::to_string(dead_after().count()) +
                                                     " ms while " + std::to_string(unwritten()) +
                                                     " bytes waited for it"));
    return;
  }
  if (!reading) return;
  engine_.tick(now, out_);
  after_engine_step();
}

std::chrono::steady_clock::time_point wire_stream::next_deadline(bool reading) const noexcept {
  const auto engine_due = reading ? engine_.next_deadline() : std::chrono::steady_clock::time_point::max();
  return std::min(engine_due, output_deadline());
}

// When output that has made no progress since blocked_since_ shows the peer reads nothing: the
// dead-peer time after it (never, while nothing waits or keepalive is off).
std::chrono::steady_clock::time_point wire_stream::output_deadline() const noexcept {
  if (blocked_since_ == std::chrono::steady_clock::time_point{} || cfg_.ping_interval.count() == 0)
    return std::chrono::steady_clock::time_point::max();
  return blocked_since_ + dead_after();
}

const char* wire_stream::side_name() const noexcept {
  return engine_.side() == wire::role::initiator ? "client" : "server";
}

void wire_stream::fail(courier::error why) { finish(std::move(why)); }

void wire_stream::finish(courier::error why) {
  if (finished_) return;
  finished_ = true;
  why_ = std::move(why);
  // A peer that broke the protocol is worth a warning with its address; an ordinary end is info.
  const auto& log = cfg_.log;
  const log_level level = why_.code == errc::protocol_error ? log_level::warning : log_level::info;
  if (logs(log, level)) {
    std::string line(side_name());
    line.append(" connection with ").append(peer_address()).append(" ended: ").append(why_.describe());
    log->write(level, line);
  }
}

const std::string& wire_stream::peer_address() {
  if (peer_address_.empty()) {
    peer_address_ = detail::describe_peer(sock_);
    if (!engine_.peer_name().empty()) peer_address_.append(" ('").append(engine_.peer_name()).append("')");
  }
  return peer_address_;
}

// What the engine's last step changed: frames held back during the handshake follow it once it
// is accepted, and a closed or failed engine ends the connection (after `out_` is written).
void wire_stream::after_engine_step() {
  const wire::engine_state st = engine_.state();
  if (st == wire::engine_state::open && !opened_) {
    opened_ = true;
    send_limits_ = engine_.agreed().peer_limits();  // what the peer announced it accepts
    if (logs(cfg_.log, log_level::info)) {
      std::string line(side_name());
      line.append(" connection with ").append(peer_address()).append(" open");
      if (logs(cfg_.log, log_level::debug))
        line.append(" (fd ")
            .append(std::to_string(sock_.fd()))
            .append(", version ")
            .append(std::to_string(engine_.agreed().version))
            .append(", frames up to ")
            .append(std::to_string(send_limits_.max_frame_size))
            .append(" bytes)");
      cfg_.log->write(log_level::info, line);
    }
  }
  if (held_.size() != 0 && st != wire::engine_state::handshaking) release_held();
  // The reason is decided before the last write: a peer that refused us and closed makes that
  // write fail, and its reason, not the broken pipe, is why the connection ended.
  if (st == wire::engine_state::closed) {
    finish(courier::error(errc::connection_lost, "the connection was closed in order"));
    flush();
  } else if (st == wire::engine_state::failed) {
    // A protocol code (below 256) means one side broke the protocol; a runtime code (272 for end of
    // stream or silence, 260 from a server that refuses us while shutting down) means the
    // connection is gone for a reason that is nobody's fault.
    const wire::engine_failure& f = engine_.failure();
    if (f.timed_out)  // ours: the peer sent nothing wrong, it sent nothing (in time)
      finish(courier::error(opened_ ? errc::connection_lost : errc::request_timeout, f.text));
    else if (f.code != 0 && f.code < 256)
      finish(courier::error(errc::protocol_error,
                            (f.by_peer ? "the peer reported: " : "the peer sent bad input: ") + f.text));
    else
      finish(courier::error(errc::connection_lost, f.by_peer ? "the peer ended the connection: " + f.text : f.text));
    flush();
  }
}

// Frames held back during the handshake follow it once it is accepted, except those larger than
// the frame size the peer announced (they were encoded before it was known): those are withdrawn
// for the owner to fail. After a failed handshake none leave (their calls fail with the connection).
void wire_stream::release_held() {
  if (opened_) {
    const std::size_t most = send_limits_.max_frame_size;
    std::size_t at = 0;
    while (at + wire::header_size <= held_.size()) {
      const std::byte* f = held_.data() + at;
      const std::size_t size = wire::header_size + wire::detail::load_le<std::uint32_t>(f + wire::offset::body_length);
      if (size <= most) {
        std::byte* p = out_.extend(size);
        std::memcpy(p, f, size);
      } else {
        withdrawn_.push_back({static_cast<wire::kind>(f[wire::offset::kind]),
                              wire::detail::load_le<std::uint64_t>(f + wire::offset::transaction_id), size});
      }
      at += size;
    }
  }
  held_.clear();
}

// Moves what the socket has not taken to the front once the written part is at least as large,
// so a peer that always lags (the buffer never empties) does not grow it by everything ever sent:
// the buffer stays within twice what is unwritten, and each byte moves at most once per halving.
void wire_stream::compact() noexcept {
  const std::size_t left = out_.size() - written_;
  if (written_ == 0 || written_ < left) return;
  std::memmove(out_.data(), out_.data() + written_, left);
  out_.truncate(left);
  written_ = 0;
}

// The size of the frame whose first bytes wait at cur_[begin_, end_), as far as it is known: its
// header's length once 32 bytes are there, else one byte more than is there.
std::size_t wire_stream::pending_frame_size() const noexcept {
  const std::size_t have = end_ - begin_;
  if (have >= wire::header_size) {
    auto h = wire::parse_header(std::span<const std::byte, wire::header_size>(cur_->data() + begin_, wire::header_size),
                                frame_limits());
    if (h) return wire::header_size + h->body_length;
  }
  return have + 1;
}

// A block an idle connection on this thread left, if one is the size this connection reads into.
wire::shared_block* wire_stream::take_idle_block() noexcept {
  idle_blocks& idle = idle_here;
  for (std::size_t i = idle.count; i-- > 0;) {
    if (idle.kept[i]->capacity() != cfg_.read_chunk) continue;
    blocks_.push_back(std::move(idle.kept[i]));  // within the capacity the last block left
    idle.kept[i] = std::move(idle.kept[--idle.count]);
    return blocks_.back().get();
  }
  return nullptr;
}

// The read is over and the block it went to holds nothing anyone views: the connection lets it
// go, to this thread's idle blocks (or back to the allocator when there are enough). Only the one
// uncounted block of a connection that holds no other goes: a counted one (after a large frame)
// stays with its connection, as blocks that frames still view do.
void wire_stream::lend_idle_block() noexcept {
  if (cur_ == nullptr || begin_ != end_ || counted_ != 0 || blocks_.size() != 1) return;
  if (cur_->capacity() != cfg_.read_chunk || cur_->use_count() != 1) return;
  idle_blocks& idle = idle_here;
  if (idle.count < idle_blocks::most) {
    idle.kept[idle.count++] = std::move(blocks_.back());
  } else if (std::none_of(idle.kept.begin(), idle.kept.end(),
                          [&](const wire::block_ref& b) { return b->capacity() == cfg_.read_chunk; })) {
    // Full of another size (connections of another read_chunk read here too): this size takes the
    // place of one of them, or every call of this connection would allocate its block anew.
    idle.kept[0] = std::move(blocks_.back());
  }
  blocks_.pop_back();
  cur_ = nullptr;
  begin_ = end_ = 0;
}

// A block we hold that nothing else does and that has `need` bytes, other than cur_; else a new
// one while we are under max_read_blocks (a frame larger than read_chunk always gets one of its
// own size, dropped once it is used); null when every block is still in use, or when no memory
// could be had (the connection has then finished).
wire::shared_block* wire_stream::free_block(std::size_t need) {
  for (wire::block_ref& b : blocks_) {
    if (b.get() != cur_ && b->use_count() == 1 && b->capacity() >= need) return b.get();
  }
  const bool large = need > cfg_.read_chunk;
  std::size_t standard = 0;
  for (const wire::block_ref& b : blocks_) standard += b->capacity() <= cfg_.read_chunk ? 1 : 0;
  if (!large && standard >= cfg_.max_read_blocks) return nullptr;
  return new_block(large ? need : cfg_.read_chunk);
}

// A new receive block, counted against the endpoint's receive memory but for `uncounted` bytes of
// it: those of a counted block it takes the place of (dropped uncounted once its bytes are
// copied), so that a frame that grows its block is counted at its block's size, not at the old and
// the new block together; or all of it, for the resident block. Past that budget, or when the allocation fails, the
// connection ends (a fatal ERROR 260 tells the peer why): a peer must not be able to take the process down by the sizes
// it announces.
wire::shared_block* wire_stream::new_block(std::size_t capacity, std::size_t uncounted) {
  const std::size_t reserve = capacity > uncounted ? capacity - uncounted : 0;
  if (memory_ && reserve != 0) {
    const std::size_t before = memory_->used.fetch_add(reserve, std::memory_order_relaxed);
    if (before + reserve > memory_->limit) {
      memory_->used.fetch_sub(reserve, std::memory_order_relaxed);
      const std::size_t frame = pending_frame_size();
      const std::string limit = std::to_string(memory_->limit);
      const std::string why =
          frame > memory_->limit
              ? "a frame of " + std::to_string(frame) +
                    " bytes does not fit the receiver's memory for frames in transit (" + limit + " bytes in all)"
              : "the receiver's memory for frames in transit (" + limit +
                    " bytes) is spent: " + std::to_string(before > counted_ ? before - counted_ : 0) +
                    " bytes are held by other connections, a block of " + std::to_string(capacity) +
                    " bytes was refused";
      (void)wire::encode_error(out_, 0, 0, static_cast<std::uint32_t>(errc::system_shutdown), why, {});
      flush();
      finish(courier::error(errc::connection_lost, why));
      return nullptr;
    }
  }
  wire::shared_block* b = wire::shared_block::try_make(capacity);
  if (b == nullptr) {
    if (memory_) memory_->used.fetch_sub(reserve, std::memory_order_relaxed);
    finish(courier::error(errc::connection_lost,
                          "no memory for a receive block of " + std::to_string(capacity) + " bytes"));
    return nullptr;
  }
  if (memory_) counted_ += reserve;
  blocks_.push_back(wire::block_ref::adopt(b));
  ++stats_.read_blocks;
  return b;
}

void wire_stream::drop_block(wire::shared_block* old, bool counted) {
  if (memory_ && counted) {
    memory_->used.fetch_sub(old->capacity(), std::memory_order_relaxed);
    counted_ -= old->capacity();
  }
  std::erase_if(blocks_, [old](const wire::block_ref& b) { return b.get() == old; });
}

// Makes room in cur_ for the next read: the bytes of the frame begun at begin_ must stay in one
// block, and there must be space after end_. A frame larger than read_chunk is given room ahead of
// its bytes by doubling (at most twice what has arrived), never by the length its header announces:
// what a connection commits follows what the peer really sent. A block still viewed by messages
// is never written; the partial frame then moves to a free block.
wire_stream::room wire_stream::make_room() {
  if (finished_) return room::failed;
  if (cur_ == nullptr) {
    // The block a read goes to when none holds bytes is left out of the endpoint's receive memory:
    // an idle connection holds none of the budget (--max-connections bounds what the connections
    // reading at once take together).
    cur_ = take_idle_block();
    if (cur_ == nullptr) cur_ = new_block(cfg_.read_chunk, cfg_.read_chunk);
    if (cur_ == nullptr) return room::failed;
    begin_ = end_ = 0;
  }
  if (begin_ == end_ && cur_->capacity() > cfg_.read_chunk) {
    // A large frame's block, handed over: back to a standard one, so small frames (and views kept
    // of them) never hold the large block, which goes once the large frame's fields let it go.
    if (wire::shared_block* next = free_block(1)) {
      drop_block(std::exchange(cur_, next));
      begin_ = end_ = 0;
    } else if (finished_) {
      return room::failed;
    }
  }
  if (begin_ == end_ && cur_->use_count() == 1) begin_ = end_ = 0;  // all handed over, nobody holds it
  const std::size_t have = end_ - begin_;
  const std::size_t need = pending_frame_size();
  const std::size_t want = need <= cfg_.read_chunk ? need : std::min(need, std::max(2 * have, cfg_.read_chunk));
  if (end_ < cur_->capacity() && cur_->capacity() - begin_ >= want) return room::ready;
  if (cur_->use_count() == 1 && cur_->capacity() >= want) {
    std::memmove(cur_->data(), cur_->data() + begin_, have);
    stats_.bytes_moved += have;
  } else if (cur_->use_count() == 1 && cur_->capacity() > cfg_.read_chunk) {
    // A large frame outgrew its block, which nothing else views: the next takes its place and its count.
    wire::shared_block* next = new_block(want, cur_->capacity());
    if (next == nullptr) return room::failed;
    std::memcpy(next->data(), cur_->data() + begin_, have);
    stats_.bytes_moved += have;
    drop_block(std::exchange(cur_, next), false);
  } else {
    wire::shared_block* next = free_block(want);
    if (next == nullptr) return finished_ ? room::failed : room::stalled;
    std::memcpy(next->data(), cur_->data() + begin_, have);
    stats_.bytes_moved += have;
    wire::shared_block* old = std::exchange(cur_, next);
    if (old->capacity() > cfg_.read_chunk) drop_block(old);  // a large frame's block: not kept for reuse
  }
  begin_ = 0;
  end_ = have;
  return room::ready;
}

bool wire_stream::flush() {
  if (!sock_) return false;
  while (written_ < out_.size()) {
    const iovec piece{out_.data() + written_, out_.size() - written_};
    const io_result r = write_some(sock_, {&piece, 1});
    if (r.status == io_result::would_block) {  // the reactor reports writability
      if (blocked_since_ == std::chrono::steady_clock::time_point{}) blocked_since_ = now();
      compact();
      return true;
    }
    if (r.status != io_result::ok) {
      out_.clear();
      written_ = 0;
      if (!opened_) read_refusal();  // a server that refused us may have said why before it closed
      finish(courier::error(errc::connection_lost, std::string("write: ") + std::strerror(r.error)));
      return false;
    }
    ++stats_.writes;
    stats_.bytes_out += r.bytes;
    written_ += r.bytes;
    blocked_since_ = {};  // progress: the peer reads
  }
  if (written_ == out_.size()) {
    out_.clear();
    written_ = 0;
  } else if (written_ >= out_.size() / 2) {
    // The socket took part of it: move the rest to the front, so a peer that keeps just behind
    // never makes the buffer grow without bound (unwritten() stays what it really holds).
    const std::size_t rest = out_.size() - written_;
    std::memmove(out_.data(), out_.data() + written_, rest);
    out_.truncate(rest);
    written_ = 0;
  }
  return true;
}

// Before the handshake the only frame a peer may send instead of its own is an ERROR that refuses
// the connection (too many connections, out of descriptors, shutting down); when our write fails
// because it closed, that refusal is waiting in the socket: read it, so the reason is its text.
void wire_stream::read_refusal() {
  struct no_frames {  // nothing but the engine's own frames can come before the handshake
    void on_frame(const wire::frame_view&) {}
  } ignore;
  std::byte first[wire::max_first_frame_size];
  const io_result r = read_some(sock_, first);
  if (r.status != io_result::ok) return;
  engine_.feed({first, r.bytes}, out_, ignore, now());
  out_.clear();  // nothing can be written any more
  after_engine_step();
}

void wire_stream::close_socket() noexcept {
  sock_.close();
  if (!finished_) finish(courier::error(errc::connection_lost, "the connection was closed"));
}

}  // namespace courier::net::detail
