#include "courier/wire/engine.hpp"

#include <algorithm>
#include <cstring>

#include "courier/wire/encoder.hpp"

namespace courier::wire {
namespace {

// Runtime error numbers (courier::errc), which the wire library does not include: the protocol fixes them.
constexpr std::uint32_t no_such_context = 258;
constexpr std::uint32_t system_shutdown = 260;
constexpr std::uint32_t connection_lost = 272;
constexpr std::uint32_t invalid_argument = 270;
constexpr std::uint32_t too_many_contexts = 274;
// The longest child name a context_open may carry: the owner keeps names, so a peer must not be
// able to make it keep a frame's worth per child.
constexpr std::size_t max_context_name = 255;

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

// An ERROR with transaction id 0 is about the connection: context id 0, and the token only of a send or call.
frame_header about_connection(frame_header h) {
  if (h.kind != kind::send && h.kind != kind::call) h.token = {};
  h.context_id = 0;
  return h;
}

std::string describe(const frame_header& h) {
  std::string s = to_string(h.kind);
  if (h.kind == kind::send || h.kind == kind::call) {
    s += ' ';
    for (char c : h.token.view()) s += (c >= 0x20 && c <= 0x7e) ? c : '?';
  }
  return s;
}

}  // namespace

const char* to_string(engine_state s) noexcept {
  switch (s) {
    case engine_state::handshaking: return "handshaking";
    case engine_state::open: return "open";
    case engine_state::closing: return "closing";
    case engine_state::closed: return "closed";
    case engine_state::failed: return "failed";
  }
  return "unknown";
}

engine::engine(role r, const engine_config& cfg, buffer_hooks hooks)
    : role_(r), cfg_(cfg), decoder_(first_frame_limits(cfg.lim), hooks) {
  cfg_.local.max_frame_size = cfg.lim.max_frame_size;
  cfg_.local.max_items = cfg.lim.max_items;
  cfg_.local.max_depth = cfg.lim.max_depth;
  cfg_.local.max_child_contexts = cfg.max_child_contexts;
  // peer_name views the caller's memory: keep a copy that lives as long as the engine (start() points the
  // view at it, so an engine that was moved still sends its name).
  local_name_.assign(cfg.local.peer_name);
  cfg_.local.peer_name = {};
}

void engine::start(out_buffer& out, clock::time_point now) {
  if (started_) return;
  started_ = true;
  started_at_ = last_rx_ = last_ping_ = last_ping_counted_ = now;
  handshake_info mine = cfg_.local;
  mine.peer_name = local_name_;
  if (encode_handshake(out, mine)) ++counters_.frames_out;
}

engine::step_result engine::step(out_buffer& out) {
  if (!accepting_input()) return {};
  auto f = decoder_.next();
  if (f) {
    ++counters_.frames_in;
    return on_valid(*f, out);
  }
  if (f.code() == errc::need_more) return {};
  if (is_fatal(f.code())) {
    std::string text = f.err().message();
    // Bytes that are no frame at all, from the start: most likely another protocol's peer.
    if (f.code() == errc::bad_magic && counters_.frames_in == 0)
      text += std::string(": the peer is not a Courier ") + (role_ == role::initiator ? "server" : "client");
    fail(&out, static_cast<std::uint32_t>(f.code()), text);
    return {};
  }
  return on_spoiled(f.err(), out);
}

engine::step_result engine::on_valid(const frame_view& f, out_buffer& out) {
  step_result again{step_result::again};
  if (state_ == engine_state::handshaking) {
    if (f.kind() == kind::error && f.transaction_id() == 0) {
      // The peer refuses the connection (for example a server that is shutting down): nothing to answer.
      ++counters_.peer_errors;
      reader r = f.items();
      auto code = r.read<std::uint32_t>();
      auto text = r.read<std::string_view>();
      state_ = engine_state::failed;
      failure_ = {code ? *code : static_cast<std::uint32_t>(errc::bad_handshake),
                  text ? std::string(*text) : std::string(), true};
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
    case kind::pong: return again;  // liveness is any byte received; the id needs no matching
    case kind::close: on_peer_close(out); return again;
    case kind::error:
      if (f.transaction_id() != 0) break;
      {
        ++counters_.peer_errors;
        reader r = f.items();
        auto code = r.read<std::uint32_t>();
        auto text = r.read<std::string_view>();
        if (code && fatal_code(*code)) {
          state_ = engine_state::failed;
          failure_ = {*code, text ? std::string(*text) : std::string(), true};
          return {};
        }
      }
      return again;  // a non-fatal connection-level error (a spoiled send of ours): nothing to do
    case kind::call: {
      if (f.transaction_id() == 0) {
        ++counters_.spoiled_frames;
        write_error(out, about_connection(f.header()), 0, static_cast<std::uint32_t>(errc::bad_transaction_id),
                    describe(f.header()) + ": transaction id 0");
        return again;
      }
      child_context* child = nullptr;
      if (f.context_id() != 0) {
        auto it = children_.find(f.context_id());
        if (it == children_.end() || it->second.peer_closed)
          return refuse_unknown_context(f.header(), f.transaction_id(), out);
        child = &it->second;
      }
      if (we_closed_ || peer_closed_ || (child != nullptr && child->we_closed)) {
        ++counters_.refused_calls;
        write_error(out, f.header(), f.transaction_id(), system_shutdown,
                    describe(f.header()) + (child != nullptr && child->we_closed && !we_closed_ && !peer_closed_
                                                ? ": context " + std::to_string(f.context_id()) + " is closing"
                                                : std::string(": the connection is closing")));
        return again;
      }
      if (child != nullptr) ++child->calls_unanswered;
      ++calls_unanswered_;
      break;
    }
    case kind::send: {
      const child_context* child = nullptr;
      if (f.context_id() != 0) {
        auto it = children_.find(f.context_id());
        if (it == children_.end() || it->second.peer_closed) return refuse_unknown_context(f.header(), 0, out);
        child = &it->second;
      }
      if (we_closed_ || peer_closed_ || (child != nullptr && child->we_closed)) {
        ++counters_.dropped_sends;
        return again;
      }
      break;
    }
    case kind::context_open: return on_context_open(f, out);
    case kind::context_close: return on_context_close(f, out);
    default: break;  // reply, error with a transaction id (answers to our calls, whatever their context): the owner's
  }
  const bool answer = f.kind() == kind::reply || f.kind() == kind::error;
  const std::uint64_t ended = answer && f.context_id() != 0
                                  ? on_answer_in_child(f.context_id(), f.transaction_id(), f.kind() == kind::error)
                                  : 0;
  return {step_result::deliver, answer, f, {}, ended};
}

bool engine::peer_parity(std::uint64_t context) const noexcept {
  // The initiator opens odd ids, the acceptor even ones.
  const bool odd = (context & 1) != 0;
  return role_ == role::acceptor ? odd : !odd;
}

engine::step_result engine::on_context_open(const frame_view& f, out_buffer& out) {
  const frame_header& h = f.header();
  const step_result again{step_result::again};
  if (h.transaction_id == 0) {
    ++counters_.spoiled_frames;
    write_error(out, about_connection(h), 0, static_cast<std::uint32_t>(errc::bad_transaction_id),
                "context_open: transaction id 0");
    return again;
  }
  auto refuse = [&](std::uint32_t code, const std::string& why) {
    ++counters_.contexts_refused;
    write_error(out, h, h.transaction_id, code, "context_open " + std::to_string(h.context_id) + ": " + why);
    return again;
  };
  reader r = f.items();
  std::string_view name;
  if (r.has_more()) {
    auto n = r.read<std::string_view>();
    if (!n) return refuse(static_cast<std::uint32_t>(errc::type_mismatch), "the name must be a string");
    name = *n;
  }
  if (r.has_more()) return refuse(static_cast<std::uint32_t>(errc::trailing_items), "items after the name");
  if (name.size() > max_context_name) return refuse(invalid_argument, "a name longer than 255 bytes");
  if (h.context_id == 0)
    return refuse(static_cast<std::uint32_t>(errc::bad_context_id), "context 0 is the parent context");
  if (!peer_parity(h.context_id))
    return refuse(
        static_cast<std::uint32_t>(errc::bad_context_id),
        std::string("the ") + (role_ == role::acceptor ? "initiator opens odd" : "acceptor opens even") + " ids");
  if (children_.contains(h.context_id)) return refuse(static_cast<std::uint32_t>(errc::bad_context_id), "already open");
  if (we_closed_ || peer_closed_) return refuse(system_shutdown, "the connection is closing");
  if (children_by_peer_ >= cfg_.max_child_contexts)
    return refuse(too_many_contexts, cfg_.max_child_contexts == 0
                                         ? std::string("this peer accepts no child contexts")
                                         : "this peer's limit of open child contexts (" +
                                               std::to_string(cfg_.max_child_contexts) + ") is reached");
  return {step_result::open_child, false, frame_view(h, nullptr), name};
}

void engine::answer_open(const frame_header& h, const context_verdict& verdict, out_buffer& out) {
  if (verdict.code != 0) {
    ++counters_.contexts_refused;
    write_error(out, h, h.transaction_id, verdict.code,
                "context_open " + std::to_string(h.context_id) + ": " + verdict.text);
    return;
  }
  children_.emplace(h.context_id, child_context{});
  ++children_by_peer_;
  ++counters_.contexts_opened;
  write_reply(out, h);
}

engine::step_result engine::on_context_close(const frame_view& f, out_buffer& out) {
  const frame_header& h = f.header();
  const step_result again{step_result::again};
  if (h.transaction_id == 0) {
    ++counters_.spoiled_frames;
    write_error(out, about_connection(h), 0, static_cast<std::uint32_t>(errc::bad_transaction_id),
                "context_close: transaction id 0");
    return again;
  }
  if (h.context_id == 0) {
    write_error(out, h, h.transaction_id, static_cast<std::uint32_t>(errc::bad_context_id),
                "context_close 0: the parent context ends with close");
    return again;
  }
  auto it = children_.find(h.context_id);
  if (it == children_.end() || it->second.peer_closed) return refuse_unknown_context(h, h.transaction_id, out);
  if (we_closed_ || peer_closed_) {
    ++counters_.refused_calls;
    write_error(out, h, h.transaction_id, system_shutdown,
                "context_close " + std::to_string(h.context_id) + ": the connection is closing");
    return again;
  }
  it->second.peer_closed = true;
  it->second.peer_close_txn = h.transaction_id;
  ++calls_unanswered_;  // an answer we owe, as for a call: the connection's close waits for it
  return {step_result::child_closing, false, frame_view(h, nullptr)};
}

std::uint64_t engine::on_answer_in_child(std::uint64_t context, std::uint64_t txn, bool is_error) {
  auto it = children_.find(context);
  if (it == children_.end()) return 0;
  child_context& c = it->second;
  if (c.open_txn != 0 && txn == c.open_txn) {
    c.open_txn = 0;
    if (!is_error) return 0;
    // Refused: the child was never open at the peer.
    --children_by_us_;
    children_.erase(it);
    return context;
  }
  if (c.close_txn != 0 && txn == c.close_txn) {
    c.close_txn = 0;
    c.our_close_answered = true;  // a reply, or an error (the peer had ended it already): over either way
    if (maybe_end_child(context)) return context;
  }
  return 0;
}

bool engine::maybe_answer_close(std::uint64_t context, out_buffer& out) {
  auto it = children_.find(context);
  if (it == children_.end()) return false;
  child_context& c = it->second;
  if (!c.peer_closed || c.peer_close_answered || c.calls_unanswered != 0) return false;
  write_reply(out, frame_header{agreed_.version, kind::context_close, 0, 0, {}, c.peer_close_txn, context});
  c.peer_close_answered = true;
  c.peer_close_txn = 0;
  const bool ended = maybe_end_child(context);
  owed_answer_sent(out);
  return ended;
}

bool engine::maybe_end_child(std::uint64_t context) {
  auto it = children_.find(context);
  if (it == children_.end()) return false;
  const child_context& c = it->second;
  if (!c.we_closed && !c.peer_closed) return false;
  if ((c.we_closed && !c.our_close_answered) || (c.peer_closed && !c.peer_close_answered) || c.calls_unanswered != 0)
    return false;
  if (c.opened_by_us)
    --children_by_us_;
  else
    --children_by_peer_;
  children_.erase(it);
  return true;
}

void engine::write_reply(out_buffer& out, const frame_header& about) {
  frame_writer w(out,
                 frame_header{agreed_.version, kind::reply, 0, 0, about.token, about.transaction_id, about.context_id});
  if (w.finish()) ++counters_.frames_out;
}

std::uint64_t engine::open_context(out_buffer& out, std::uint64_t txn, token child_kind, std::string_view name) {
  if (!open_for_calls() || txn == 0 || children_by_us_ >= agreed_.max_child_contexts) return 0;
  std::uint64_t id = next_child_id_ == 0 ? (role_ == role::initiator ? 1 : 2) : next_child_id_ + 2;
  while (children_.contains(id)) id += 2;
  frame_writer w(out, frame_header{agreed_.version, kind::context_open, 0, 0, child_kind, txn, id});
  if (!name.empty()) w.add(name);
  if (!w.finish()) return 0;
  ++counters_.frames_out;
  next_child_id_ = id;
  child_context c;
  c.opened_by_us = true;
  c.open_txn = txn;
  children_.emplace(id, c);
  ++children_by_us_;
  ++calls_outstanding_;
  return id;
}

bool engine::close_context(out_buffer& out, std::uint64_t context, std::uint64_t txn) {
  if (!open_for_calls() || txn == 0 || context == 0) return false;
  auto it = children_.find(context);
  if (it == children_.end() || it->second.we_closed || it->second.peer_closed) return false;
  frame_writer w(out, frame_header{agreed_.version, kind::context_close, 0, 0, {}, txn, context});
  if (!w.finish()) return false;
  ++counters_.frames_out;
  it->second.we_closed = true;
  it->second.close_txn = txn;
  ++calls_outstanding_;
  return true;
}

bool engine::context_usable(std::uint64_t context) const noexcept {
  if (!open_for_calls()) return false;
  if (context == 0) return true;
  auto it = children_.find(context);
  return it != children_.end() && !it->second.we_closed && !it->second.peer_closed;
}

engine::step_result engine::refuse_unknown_context(const frame_header& h, std::uint64_t txn, out_buffer& out) {
  ++counters_.unknown_context_frames;
  const std::string why = ": context " + std::to_string(h.context_id) + " is not open";
  write_error(out, txn == 0 ? about_connection(h) : h, txn, no_such_context, describe(h) + why);
  return {step_result::again};
}

engine::step_result engine::on_spoiled(const error& e, out_buffer& out) {
  ++counters_.spoiled_frames;
  const frame_header& h = decoder_.last_header();
  const auto code = static_cast<std::uint32_t>(e.code);
  if (state_ == engine_state::handshaking) {
    fail(&out, static_cast<std::uint32_t>(errc::bad_handshake), "spoiled first frame: " + e.message());
    return {};
  }
  if (h.kind == kind::handshake) {
    fail(&out, static_cast<std::uint32_t>(errc::unexpected_frame), "a second handshake (spoiled: " + e.message() + ")");
    return {};
  }
  const bool request = h.kind == kind::call || h.kind == kind::context_open || h.kind == kind::context_close;
  if (request && h.transaction_id != 0) {
    if (h.kind == kind::context_open) ++counters_.contexts_refused;
    write_error(out, h, h.transaction_id, code, describe(h) + ": " + e.message());
    return {step_result::again};
  }
  // Anything else gets an ERROR with transaction id 0 (section 9 allows it; C++ always sends one).
  write_error(out, about_connection(h), 0, code, describe(h) + ": " + e.message());
  if ((h.kind == kind::reply || h.kind == kind::error) && h.transaction_id != 0) {
    bad_reply_fault_ = e;
    // The real answer is lost: taken as a reply (the child stays open, the close is answered).
    const std::uint64_t ended = h.context_id != 0 ? on_answer_in_child(h.context_id, h.transaction_id, false) : 0;
    return {step_result::bad_reply, false, frame_view(h, nullptr), {}, ended};
  }
  return {step_result::again};
}

void engine::on_handshake(const frame_view& f, out_buffer& out) {
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
               std::to_string(cfg_.local.max_version) + ", peer speaks " + std::to_string(info->min_version) + ".." +
               std::to_string(info->max_version));
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
  state_ = engine_state::open;
}

void engine::on_peer_close(out_buffer& out) {
  if (peer_closed_) return;  // a second close adds nothing
  peer_closed_ = true;
  if (!we_closed_ && calls_unanswered_ == 0) send_close(out, {});
  maybe_finish_close();
}

void engine::answer_received() noexcept {
  if (calls_outstanding_ != 0) --calls_outstanding_;
  maybe_finish_close();
}

void engine::maybe_finish_close() noexcept {
  // Each peer closes the transport once both closes are exchanged and every call is answered both ways:
  // nothing can be in flight any more, whoever closes first.
  if (we_closed_ && peer_closed_ && calls_unanswered_ == 0 && calls_outstanding_ == 0 &&
      state_ == engine_state::closing)
    state_ = engine_state::closed;
}

void engine::reply_sent(out_buffer& out) { owed_answer_sent(out); }

bool engine::reply_sent(out_buffer& out, std::uint64_t context) {
  owed_answer_sent(out);
  if (context == 0) return false;
  auto it = children_.find(context);
  if (it == children_.end() || it->second.calls_unanswered == 0) return false;
  --it->second.calls_unanswered;
  return it->second.peer_closed ? maybe_answer_close(context, out) : maybe_end_child(context);
}

void engine::owed_answer_sent(out_buffer& out) {
  if (calls_unanswered_ != 0) --calls_unanswered_;
  if (calls_unanswered_ != 0) return;
  if (peer_closed_ && !we_closed_ && state_ == engine_state::open) send_close(out, {});
  maybe_finish_close();
}

void engine::close(out_buffer& out, std::string_view reason, clock::time_point now) {
  if (state_ == engine_state::handshaking) {
    state_ = engine_state::closed;
    return;
  }
  if (state_ != engine_state::open || we_closed_) return;
  if (peer_closed_) return;  // ours goes out after the last reply (reply_sent())
  send_close(out, reason);
  close_sent_at_ = now;
}

void engine::send_close(out_buffer& out, std::string_view reason) {
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
  state_ = engine_state::closing;
}

void engine::write_error(out_buffer& out, const frame_header& about, std::uint64_t txn, std::uint32_t code,
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

void engine::fail(out_buffer* out, std::uint32_t code, std::string text) {
  if (out != nullptr && code != 0 && code < 256) write_error(*out, frame_header{}, 0, code, text);
  failure_ = {code, std::move(text), false};
  state_ = engine_state::failed;
}

void engine::time_out(out_buffer* out, std::uint32_t code, std::string text, std::string_view to_peer) {
  if (out != nullptr && !to_peer.empty()) write_error(*out, frame_header{}, 0, code, to_peer);
  failure_ = {code, std::move(text), false, true};
  state_ = engine_state::failed;
}

engine_state engine::tick(clock::time_point now, out_buffer& out) {
  if (!accepting_input()) return state_;
  if (received_) {
    last_rx_ = now;
    pings_unanswered_ = 0;
    received_ = false;
  }
  if (state_ == engine_state::handshaking) {
    if (cfg_.handshake_timeout.count() > 0 && now - handshake_from() >= cfg_.handshake_timeout)
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
    // Dead only after silence and after pings we really sent went unanswered, the last for a whole
    // interval: a stall of ours (a stopped process, a late timer, a busy worker) sent no pings, so it
    // is never taken for the peer's silence. Once enough pings are out no more go; in closing none
    // go out, and silence alone counts.
    if (now >= dead_peer_due()) {
      time_out(nullptr, connection_lost,
               "the peer was silent for " + ms(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_rx_)) +
                   " and answered none of " + std::to_string(pings_unanswered_) + " pings");
      return state_;
    }
    if (const auto due = next_ping_due(); pinging() && now >= due) {
      frame_writer w(out, frame_header{agreed_.version, kind::ping, 0, 0, {}, next_ping_id_++, 0});
      if (w.finish()) ++counters_.frames_out;
      last_ping_ = now;
      // The peer's time to answer runs from when the ping was due if it went out within the timer's
      // tolerance (section 12), so a late timer moves no verdict; from when it went out after a stall.
      last_ping_counted_ = now - due <= timer_tolerance ? due : now;
      ++pings_unanswered_;
    }
  }
  return state_;
}

engine::clock::time_point engine::next_ping_due() const noexcept {
  // Pings are due at whole intervals after the last byte received, not an interval after the last ping:
  // a timer that fires a little late then does not push every later ping (and the dead-peer time) back.
  if (last_ping_ < last_rx_) return last_rx_ + cfg_.ping_interval;
  const auto intervals_pinged = (last_ping_ - last_rx_) / cfg_.ping_interval;
  return last_rx_ + cfg_.ping_interval * (intervals_pinged + 1);
}

engine::clock::time_point engine::dead_peer_due() const noexcept {
  const auto silence = last_rx_ + cfg_.ping_interval * cfg_.dead_after_intervals;
  if (we_closed_) return silence;
  if (pings_unanswered_ < pings_before_dead()) return clock::time_point::max();
  return std::max(silence, last_ping_counted_ + cfg_.ping_interval);
}

engine::clock::time_point engine::next_deadline() const noexcept {
  if (!accepting_input() || !started_) return clock::time_point::max();
  auto d = clock::time_point::max();
  if (state_ == engine_state::handshaking) {
    if (cfg_.handshake_timeout.count() > 0) d = handshake_from() + cfg_.handshake_timeout;
    return d;
  }
  if (we_closed_) {
    if (close_sent_at_ == clock::time_point{}) return clock::time_point::min();  // tick now to start the timer
    if (cfg_.close_timeout.count() > 0) d = std::min(d, close_sent_at_ + cfg_.close_timeout);
  }
  if (cfg_.ping_interval.count() > 0) {
    d = std::min(d, dead_peer_due());
    if (pinging()) d = std::min(d, next_ping_due());
  }
  return d;
}

engine_state engine::on_eof() {
  if (state_ == engine_state::closed || state_ == engine_state::failed) return state_;
  if (auto end = decoder_.finish(); !end) {
    fail(nullptr, static_cast<std::uint32_t>(errc::truncated), "the stream ended inside a frame");
  } else if (we_closed_ && peer_closed_) {
    state_ = engine_state::closed;
  } else {
    fail(nullptr, connection_lost,
         state_ == engine_state::handshaking ? "the peer closed the connection during the handshake"
                                             : "the peer closed the connection without close");
  }
  return state_;
}

}  // namespace courier::wire
