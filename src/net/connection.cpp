// One connection's byte work: the session engine between a socket and the connection actor.
#include "courier/net/connection.hpp"

#include <sys/uio.h>

#include <algorithm>
#include <utility>

namespace courier::net {

namespace {

wire::session_config session_config_of(const connection_config& cfg) {
  wire::session_config s;
  s.local.peer_name = cfg.name;
  s.local.max_frame_size = cfg.limits.max_frame_size;
  s.lim = cfg.limits;
  s.handshake_timeout = cfg.handshake_timeout;
  s.ping_interval = cfg.ping_interval;
  s.dead_after_intervals = cfg.dead_after_intervals;
  s.close_timeout = cfg.close_timeout;
  return s;
}

}  // namespace

connection::connection(socket sock, wire::role role, const connection_config& cfg)
    : sock_(std::move(sock)),
      cfg_(cfg),
      session_(role, session_config_of(cfg_)),
      send_limits_(cfg_.limits) {
  blocks_.push_back(wire::block_ref::adopt(wire::shared_block::make(cfg_.read_chunk)));
  cur_ = blocks_.back().get();
  ++stats_.read_blocks;
}

connection::~connection() = default;

void connection::start() {
  session_.start(out_);
  after_session_step();
}

void connection::close(std::string_view reason) {
  if (finished_) return;
  session_.close(out_, reason);
  after_session_step();
}

void connection::tick() {
  if (finished_) return;
  session_.tick(std::chrono::steady_clock::now(), out_);
  after_session_step();
}

void connection::fail(courier::error why) { finish(std::move(why)); }

void connection::finish(courier::error why) {
  if (finished_) return;
  finished_ = true;
  why_ = std::move(why);
}

// What the session's last step changed: frames held back during the handshake follow it once it
// is accepted, and a closed or failed session ends the connection (after `out_` is written).
void connection::after_session_step() {
  const wire::session_state st = session_.state();
  if (st == wire::session_state::open && !opened_) {
    opened_ = true;
    send_limits_ = session_.agreed().peer_limits();  // what the peer announced it accepts
  }
  // Frames held back during the handshake follow it once it is accepted; after a failed
  // handshake they never leave (their calls fail with the connection).
  if (held_.size() != 0 && st != wire::session_state::handshaking) {
    if (opened_) {
      std::byte* p = out_.extend(held_.size());
      std::memcpy(p, held_.data(), held_.size());
    }
    held_.clear();
  }
  if (st == wire::session_state::closed) {
    flush();
    finish(courier::error(errc::connection_lost, "the connection was closed in order"));
  } else if (st == wire::session_state::failed) {
    flush();
    // A protocol code (below 256) means one side broke the protocol; a runtime code (272 for end of
    // stream or silence, 260 from a server that refuses us while shutting down) means the
    // connection is gone for a reason that is nobody's fault.
    const wire::session_failure& f = session_.failure();
    if (f.code != 0 && f.code < 256)
      finish(courier::error(errc::protocol_error, (f.by_peer ? "the peer reported: " : "the peer sent bad input: ") + f.text));
    else
      finish(courier::error(errc::connection_lost, f.by_peer ? "the peer ended the connection: " + f.text : f.text));
  }
}

// Moves what the socket has not taken to the front once the written part is at least as large,
// so a peer that always lags (the buffer never empties) does not grow it by everything ever sent:
// the buffer stays within twice what is unwritten, and each byte moves at most once per halving.
void connection::compact() noexcept {
  const std::size_t left = out_.size() - written_;
  if (written_ == 0 || written_ < left) return;
  std::memmove(out_.data(), out_.data() + written_, left);
  out_.truncate(left);
  written_ = 0;
}

// The size of the frame whose first bytes wait at cur_[begin_, end_), as far as it is known: its
// header's length once 32 bytes are there, else one byte more than is there.
std::size_t connection::pending_frame_size() const noexcept {
  const std::size_t have = end_ - begin_;
  if (have >= wire::header_size) {
    auto h = wire::parse_header(std::span<const std::byte, wire::header_size>(cur_->data() + begin_, wire::header_size), cfg_.limits);
    if (h) return wire::header_size + h->body_length;
  }
  return have + 1;
}

// A block we hold that nothing else does and that has `need` bytes, other than cur_; else a new
// one while we are under max_read_blocks (a frame larger than read_chunk always gets one of its
// own size, dropped once it is used); null when every block is still in use.
wire::shared_block* connection::free_block(std::size_t need) {
  for (wire::block_ref& b : blocks_) {
    if (b.get() != cur_ && b->use_count() == 1 && b->capacity() >= need) return b.get();
  }
  const bool large = need > cfg_.read_chunk;
  std::size_t standard = 0;
  for (const wire::block_ref& b : blocks_) standard += b->capacity() <= cfg_.read_chunk ? 1 : 0;
  if (!large && standard >= cfg_.max_read_blocks) return nullptr;
  blocks_.push_back(wire::block_ref::adopt(wire::shared_block::make(large ? need : cfg_.read_chunk)));
  ++stats_.read_blocks;
  return blocks_.back().get();
}

// Makes room in cur_ for the next read: the frame begun at begin_ must fit in the block from
// where it starts, and there must be space after end_. A block still viewed by messages is never
// written; the partial frame then moves to a free block.
bool connection::make_room() {
  if (begin_ == end_ && cur_->capacity() > cfg_.read_chunk) {
    // A large frame's block, handed over: back to a standard one, so small frames (and views kept
    // of them) never hold the large block, which goes once the large frame's fields let it go.
    if (wire::shared_block* next = free_block(1)) {
      wire::shared_block* old = std::exchange(cur_, next);
      std::erase_if(blocks_, [old](const wire::block_ref& b) { return b.get() == old; });
      begin_ = end_ = 0;
    }
  }
  if (begin_ == end_ && cur_->use_count() == 1) begin_ = end_ = 0;  // all handed over, nobody holds it
  const std::size_t need = pending_frame_size();
  if (end_ < cur_->capacity() && cur_->capacity() - begin_ >= need) return true;
  const std::size_t have = end_ - begin_;
  if (cur_->use_count() == 1 && cur_->capacity() >= need) {
    std::memmove(cur_->data(), cur_->data() + begin_, have);
    stats_.bytes_moved += have;
  } else {
    wire::shared_block* next = free_block(need);
    if (next == nullptr) return false;
    std::memcpy(next->data(), cur_->data() + begin_, have);
    stats_.bytes_moved += have;
    wire::shared_block* old = std::exchange(cur_, next);
    if (old->capacity() > cfg_.read_chunk) {  // a large frame's block: not kept for reuse
      std::erase_if(blocks_, [old](const wire::block_ref& b) { return b.get() == old; });
    }
  }
  begin_ = 0;
  end_ = have;
  return true;
}

bool connection::flush() {
  if (!sock_) return false;
  while (written_ < out_.size()) {
    const iovec piece{out_.data() + written_, out_.size() - written_};
    const io_result r = write_some(sock_, {&piece, 1});
    if (r.status == io_result::would_block) {  // the reactor reports writability
      compact();
      return true;
    }
    if (r.status != io_result::ok) {
      out_.clear();
      written_ = 0;
      finish(courier::error(errc::connection_lost, std::string("write: ") + std::strerror(r.error)));
      return false;
    }
    ++stats_.writes;
    stats_.bytes_out += r.bytes;
    written_ += r.bytes;
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

void connection::close_socket() noexcept {
  sock_.close();
  if (!finished_) finish(courier::error(errc::connection_lost, "the connection was closed"));
}

}  // namespace courier::net
