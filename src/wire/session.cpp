#include "courier/wire/session.hpp"

#include <algorithm>
#include <cstring>

#include "courier/wire/encoder.hpp"

namespace courier::wire {
namespace {

// Runtime error numbers (courier::errc), which the wire library does not include: the protocol fixes them.
constexpr std::uint32_t no_such_context = 258;
constexpr std::uint32_t system_shutdown = 260;
constexpr std::uint32_t connection_lost = 272;

// An ERROR frame with transaction id 0 ends the connection unless its code is a non-fatal protocol code
// (a report about one spoiled frame): docs/protocol.md section 9.
// 258 no_such_context is a report about one frame too (a send or context frame of ours for a context the
// peer has not open).
bool fatal_code(std::uint32_t code) noexcept {
  if (code == no_such_context) return false;
  if (code > 255) return true;
  if (code == 0) return false;
  const auto e = static_cast<errc>(code);
  return is_fatal(e) || e == errc::bad_handshake || e == errc::unexpected_frame;
}

limits first_frame_limits(limits lim) noexcept {
  lim.max_frame_size = std::min(lim.max_frame_size, max_first_frame_size);
  return lim;
}

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

std::string describe(const frame_header& h) {
  std::string s = to_string(h.kind);
  if (h.kind == kind::send || h.kind == kind::call) {
    s += ' ';
    for (char c : h.token.view()) s += (c >= 0x20 && c <= 0x7e) ? c : '?';
  }
  return s;
}

}  // namespace

const char* to_string(session_state s) noexcept {
  switch (s) {
    case session_state::handshaking: return "handshaking";
    case session_state::open: return "open";
    case session_state::closing: return "closing";
    case session_state::closed: return "closed";
    case session_state::failed: return "failed";
  }
  return "unknown";
}

session::session(role r, const session_config& cfg, buffer_hooks hooks)
    : role_(r), cfg_(cfg), decoder_(first_frame_limits(cfg.lim), hooks) {
  cfg_.local.max_frame_size = cfg.lim.max_frame_size;
  cfg_.local.max_items = cfg.lim.max_items;
  cfg_.local.max_depth = cfg.lim.max_depth;
  // peer_name views the caller's memory: keep a copy that lives as long as the session (start() points the
  // view at it, so a session that was moved still sends its name).
  local_name_.assign(cfg.local.peer_name);
  cfg_.local.peer_name = {};
}

void session::start(out_buffer& out, clock::time_point now) {
  if (started_) return;
  started_ = true;
  started_at_ = last_rx_ = last_ping_ = now;
  handshake_info mine = cfg_.local;
  mine.peer_name = local_name_;
  if (encode_handshake(out, mine)) ++counters_.frames_out;
}

session::step_result session::step(out_buffer& out) {
  if (!accepting_input()) return {};
  auto f = decoder_.next();
  if (f) {
    ++counters_.frames_in;
    return on_valid(*f, out);
  }
  if (f.code() == errc::need_more) return {};
  if (is_fatal(f.code())) {
    fail(&out, static_cast<std::uint32_t>(f.code()), f.err().message());
    return {};
  }
  return on_spoiled(f.err(), out);
}

session::step_result session::on_valid(const frame_view& f, out_buffer& out) {
  step_result again{step_result::again};
  if (state_ == session_state::handshaking) {
    if (f.kind() == kind::error && f.transaction_id() == 0) {
      // The peer refuses the connection (for example a server that is shutting down): nothing to answer.
      ++counters_.peer_errors;
      reader r = f.items();
      auto code = r.read<std::uint32_t>();
      auto text = r.read<std::string_view>();
      state_ = session_state::failed;
      failure_ = {code ? *code : static_cast<std::uint32_t>(errc::bad_handshake), text ? std::string(*text) : std::string(),
                  true};
      return {};
    }
    if (f.kind() != kind::handshake) {
      fail(&out, static_cast<std::uint32_t>(errc::bad_handshake),
           std::string("the first frame is a ") + to_string(f.kind()) + ", not a handshake");
      return {};
    }
    on_handshake(f, out);
    return again;
  }
  switch (f.kind()) {
    case kind::handshake:
      fail(&out, static_cast<std::uint32_t>(errc::unexpected_frame), "a second handshake");
      return {};
    case kind::ping: {
      // The pong is the ping's bytes with another kind: same transaction id, context id and body.
      const auto bytes = f.bytes();
      std::byte* p = out.extend(bytes.size());
      std::memcpy(p, bytes.data(), bytes.size());
      p[offset::kind] = static_cast<std::byte>(kind::pong);
      ++counters_.frames_out;
      return again;
    }
    case kind::pong:
      return again;  // liveness is any byte received; the id needs no matching
    case kind::close:
      on_peer_close(out);
      return again;
    case kind::error:
      if (f.transaction_id() != 0) break;
      {
        ++counters_.peer_errors;
        reader r = f.items();
        auto code = r.read<std::uint32_t>();
        auto text = r.read<std::string_view>();
        if (code && fatal_code(*code)) {
          state_ = session_state::failed;
          failure_ = {*code, text ? std::string(*text) : std::string(), true};
          return {};
        }
      }
      return again;  // a non-fatal connection-level error (a spoiled send of ours): nothing to do
    case kind::call:
      if (f.transaction_id() == 0) {
        ++counters_.spoiled_frames;
        write_error(out, f.header(), 0, static_cast<std::uint32_t>(errc::bad_transaction_id),
                    describe(f.header()) + ": transaction id 0");
        return again;
      }
      if (f.context_id() != 0) return refuse_unknown_context(f.header(), f.transaction_id(), out);
      if (we_closed_ || peer_closed_) {
        ++counters_.refused_calls;
        write_error(out, f.header(), f.transaction_id(), system_shutdown,
                    describe(f.header()) + ": the connection is closing");
        return again;
      }
      ++calls_unanswered_;
      break;
    case kind::send:
      if (f.context_id() != 0) return refuse_unknown_context(f.header(), 0, out);
      if (we_closed_ || peer_closed_) {
        ++counters_.dropped_sends;
        return again;
      }
      break;
    case kind::context_open:
    case kind::context_close:
      return refuse_unknown_context(f.header(), 0, out);
    default:
      break;  // reply, error with a transaction id (answers to our calls, whatever their context): the owner's
  }
  step_result r{step_result::deliver};
  r.frame = f;
  r.answer = f.kind() == kind::reply || f.kind() == kind::error;
  return r;
}

session::step_result session::refuse_unknown_context(const frame_header& h, std::uint64_t txn, out_buffer& out) {
  // Only the parent context (0) is open: child contexts are not built yet, so nothing can open one.
  ++counters_.unknown_context_frames;
  const std::string why = h.kind == kind::context_open || h.kind == kind::context_close
                              ? ": child contexts are not supported (context " + std::to_string(h.context_id) + ")"
                              : ": context " + std::to_string(h.context_id) + " is not open";
  frame_header about = h;
  if (h.kind != kind::send && h.kind != kind::call) about.token = {};
  if (txn == 0) about.context_id = 0;  // an ERROR with transaction id 0 is about the connection
  write_error(out, about, txn, no_such_context, describe(h) + why);
  return {step_result::again};
}

session::step_result session::on_spoiled(const error& e, out_buffer& out) {
  ++counters_.spoiled_frames;
  const frame_header& h = decoder_.last_header();
  const auto code = static_cast<std::uint32_t>(e.code);
  if (state_ == session_state::handshaking) {
    fail(&out, static_cast<std::uint32_t>(errc::bad_handshake), "spoiled first frame: " + e.message());
    return {};
  }
  if (h.kind == kind::handshake) {
    fail(&out, static_cast<std::uint32_t>(errc::unexpected_frame), "a second handshake (spoiled: " + e.message() + ")");
    return {};
  }
  if (h.kind == kind::call && h.transaction_id != 0) {
    write_error(out, h, h.transaction_id, code, describe(h) + ": " + e.message());
    return {step_result::again};
  }
  // Anything else gets an ERROR with transaction id 0 (section 9 allows it; C++ always sends one).
  frame_header about = h;
  if (h.kind != kind::send && h.kind != kind::call) about.token = {};
  about.context_id = 0;
  write_error(out, about, 0, code, describe(h) + ": " + e.message());
  if ((h.kind == kind::reply || h.kind == kind::error) && h.transaction_id != 0) {
    step_result r{step_result::bad_reply};
    r.header = h;
    r.fault = e;
    return r;
  }
  return {step_result::again};
}

void session::on_handshake(const frame_view& f, out_buffer& out) {
  auto info = decode_handshake(f);
  if (!info) {
    fail(&out, static_cast<std::uint32_t>(errc::bad_handshake), "the handshake's items do not follow the protocol");
    return;
  }
  if (info->nonce != 0 && info->nonce == cfg_.local.nonce) {
    fail(&out, static_cast<std::uint32_t>(errc::bad_handshake),
         "the peer's handshake is our own, reflected (the other end echoes what it reads)");
    return;
  }
  auto a = negotiate(cfg_.local, *info);
  if (!a) {
    if (a.code() == errc::unsupported_version) {
      fail(&out, static_cast<std::uint32_t>(errc::unsupported_version),
           "no common protocol version: we speak " + std::to_string(cfg_.local.min_version) + ".." +
               std::to_string(cfg_.local.max_version) + ", peer speaks " + std::to_string(info->min_version) +
               ".." + std::to_string(info->max_version));
    } else {
      fail(&out, static_cast<std::uint32_t>(errc::bad_handshake),
           "the peer's limits are below the protocol's minimums (frame " + std::to_string(info->max_frame_size) +
               ", items " + std::to_string(info->max_items) + ", depth " + std::to_string(info->max_depth) + ")");
    }
    return;
  }
  agreed_ = *a;
  peer_name_.assign(info->peer_name);
  decoder_.set_max_frame_size(cfg_.lim.max_frame_size);
  state_ = session_state::open;
}

void session::on_peer_close(out_buffer& out) {
  if (peer_closed_) return;  // a second close adds nothing
  peer_closed_ = true;
  if (!we_closed_ && calls_unanswered_ == 0) send_close(out, {});
  maybe_finish_close();
}

void session::answer_received() noexcept {
  if (calls_outstanding_ != 0) --calls_outstanding_;
  maybe_finish_close();
}

void session::maybe_finish_close() noexcept {
  // Each peer closes the transport once both closes are exchanged and every call is answered both ways:
  // nothing can be in flight any more, whoever closes first.
  if (we_closed_ && peer_closed_ && calls_unanswered_ == 0 && calls_outstanding_ == 0 &&
      state_ == session_state::closing)
    state_ = session_state::closed;
}

void session::reply_sent(out_buffer& out) {
  if (calls_unanswered_ != 0) --calls_unanswered_;
  if (calls_unanswered_ != 0) return;
  if (peer_closed_ && !we_closed_ && state_ == session_state::open) send_close(out, {});
  maybe_finish_close();
}

void session::close(out_buffer& out, std::string_view reason, clock::time_point now) {
  if (state_ == session_state::handshaking) {
    state_ = session_state::closed;
    return;
  }
  if (state_ != session_state::open || we_closed_) return;
  if (peer_closed_) return;  // ours goes out after the last reply (reply_sent())
  send_close(out, reason);
  close_sent_at_ = now;
}

void session::send_close(out_buffer& out, std::string_view reason) {
  {
    frame_writer w(out, frame_header{agreed_.version, kind::close, 0, 0, {}, 0, 0});
    if (!reason.empty()) w.add(reason);
    if (w.finish()) {
      ++counters_.frames_out;
    } else {
      frame_writer plain(out, frame_header{agreed_.version, kind::close, 0, 0, {}, 0, 0});
      if (plain.finish()) ++counters_.frames_out;
    }
  }
  we_closed_ = true;
  state_ = session_state::closing;
}

void session::write_error(out_buffer& out, const frame_header& about, std::uint64_t txn, std::uint32_t code,
                          std::string_view text) {
  const frame_header h{agreed_.version, kind::error, 0, 0, about.token, txn, about.context_id};
  frame_writer w(out, h);
  w.add(code).add(text.substr(0, 1024));
  if (w.finish()) {
    ++counters_.frames_out;
    return;
  }
  frame_writer plain(out, h);
  plain.add(code).add(std::string_view());
  if (plain.finish()) ++counters_.frames_out;
}

void session::fail(out_buffer* out, std::uint32_t code, std::string text) {
  if (out != nullptr && code != 0 && code < 256) write_error(*out, frame_header{}, 0, code, text);
  failure_ = {code, std::move(text), false};
  state_ = session_state::failed;
}

void session::time_out(out_buffer* out, std::uint32_t code, std::string text, std::string_view to_peer) {
  if (out != nullptr && !to_peer.empty()) write_error(*out, frame_header{}, 0, code, to_peer);
  failure_ = {code, std::move(text), false, true};
  state_ = session_state::failed;
}

session_state session::tick(clock::time_point now, out_buffer& out) {
  if (!accepting_input()) return state_;
  if (received_) {
    last_rx_ = now;
    received_ = false;
  }
  if (state_ == session_state::handshaking) {
    if (cfg_.handshake_timeout.count() > 0 && now - started_at_ >= cfg_.handshake_timeout)
      time_out(&out, static_cast<std::uint32_t>(errc::bad_handshake),
               "no handshake from the peer within " + ms(cfg_.handshake_timeout), "no handshake in time");
    return state_;
  }
  if (we_closed_) {
    if (close_sent_at_ == clock::time_point{}) close_sent_at_ = now;
    if (cfg_.close_timeout.count() > 0 && now - close_sent_at_ >= cfg_.close_timeout) {
      time_out(nullptr, connection_lost, "the close did not complete within " + ms(cfg_.close_timeout));
      return state_;
    }
  }
  if (cfg_.ping_interval.count() > 0) {
    const auto dead = cfg_.ping_interval * cfg_.dead_after_intervals;
    if (now - last_rx_ >= dead) {
      time_out(nullptr, connection_lost,
               "the peer was silent for " + ms(std::chrono::duration_cast<std::chrono::milliseconds>(dead)));
      return state_;
    }
    if (!we_closed_ && now >= next_ping_due()) {
      frame_writer w(out, frame_header{agreed_.version, kind::ping, 0, 0, {}, next_ping_id_++, 0});
      if (w.finish()) ++counters_.frames_out;
      last_ping_ = now;
    }
  }
  return state_;
}

session::clock::time_point session::next_ping_due() const noexcept {
  // Pings are due at whole intervals after the last byte received, not an interval after the last ping:
  // a timer that fires a little late then does not push every later ping (and the dead-peer time) back.
  if (last_ping_ < last_rx_) return last_rx_ + cfg_.ping_interval;
  const auto intervals_pinged = (last_ping_ - last_rx_) / cfg_.ping_interval;
  return last_rx_ + cfg_.ping_interval * (intervals_pinged + 1);
}

session::clock::time_point session::next_deadline() const noexcept {
  if (!accepting_input() || !started_) return clock::time_point::max();
  auto d = clock::time_point::max();
  if (state_ == session_state::handshaking) {
    if (cfg_.handshake_timeout.count() > 0) d = started_at_ + cfg_.handshake_timeout;
    return d;
  }
  if (we_closed_) {
    if (close_sent_at_ == clock::time_point{}) return clock::time_point::min();  // tick now to start the timer
    if (cfg_.close_timeout.count() > 0) d = std::min(d, close_sent_at_ + cfg_.close_timeout);
  }
  if (cfg_.ping_interval.count() > 0) {
    d = std::min(d, last_rx_ + cfg_.ping_interval * cfg_.dead_after_intervals);
    if (!we_closed_) d = std::min(d, next_ping_due());
  }
  return d;
}

session_state session::on_eof() {
  if (state_ == session_state::closed || state_ == session_state::failed) return state_;
  if (auto end = decoder_.finish(); !end) {
    fail(nullptr, static_cast<std::uint32_t>(errc::truncated), "the stream ended inside a frame");
  } else if (we_closed_ && peer_closed_) {
    state_ = session_state::closed;
  } else {
    fail(nullptr, connection_lost,
         state_ == session_state::handshaking ? "the peer closed the connection during the handshake"
                                              : "the peer closed the connection without close");
  }
  return state_;
}

}  // namespace courier::wire
