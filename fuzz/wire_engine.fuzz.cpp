// libFuzzer target for the connection engine (courier::wire::engine): a whole byte stream into one end of
// a connection. scripts/fuzz-wire builds and runs it with ASan and UBSan.
//
// Input: byte 0 picks the chunk size (0: all at once), byte 1 the scenario (bit 0: acceptor or initiator;
// bit 1: a valid peer handshake goes first, so most inputs reach the open state; bit 2: the owner closes
// after the first chunk; bits 3..4: how the owner answers calls; bit 5: end of stream at the end; bits 6..7:
// ticks of 0, 5, 15 or 35 s between chunks), the rest is the stream. Checked after every step: everything the
// engine writes decodes as well-formed frames within the limits it agreed, in order, and nothing follows a
// fatal ERROR; a finished engine (closed, failed) never changes state or writes again; the counts stay
// consistent. The engine accepts 4 children from the peer (the owner refuses kinds whose first byte is
// odd), and the owner opens a child after every third chunk and closes the newest after every fifth;
// calls and sends reach the owner only in a context the engine has open, every call is answered in
// its own context, and a child ends only once.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "courier/wire.hpp"

namespace w = courier::wire;

namespace {

struct owner {
  const w::engine* engine = nullptr;
  std::size_t calls = 0;
  std::size_t answers = 0;
  std::size_t closings = 0;             // the peer's context_close requests that arrived
  std::vector<std::uint64_t> contexts;  // the context of each call received, in order
  std::vector<std::uint64_t> ended;
  void on_frame(const w::frame_view& f) {
    if ((f.kind() == w::kind::call || f.kind() == w::kind::send) && f.context_id() != 0 &&
        !engine->has_child(f.context_id()))
      std::abort();
    if (f.kind() == w::kind::call) {
      ++calls;
      contexts.push_back(f.context_id());
    }
    if (f.kind() == w::kind::reply || f.kind() == w::kind::error) ++answers;
    if (f.kind() == w::kind::handshake || f.kind() == w::kind::ping || f.kind() == w::kind::pong ||
        f.kind() == w::kind::close)
      std::abort();  // the engine handles these itself
    if (f.kind() == w::kind::call && f.transaction_id() == 0) std::abort();
    if (f.kind() == w::kind::error && f.transaction_id() == 0) std::abort();
    (void)w::to_text(f);
  }
  void on_bad_reply(std::uint64_t txn, const w::error&) {
    if (txn == 0) std::abort();
  }
  w::context_verdict on_context_open(std::uint64_t id, courier::token kind, std::string_view) {
    if (id == 0 || engine->has_child(id)) std::abort();
    if ((static_cast<unsigned char>(kind.view()[0]) & 1) != 0) return {256, "not served"};
    return {};
  }
  void on_context_closing(std::uint64_t id) {
    if (!engine->has_child(id)) std::abort();
    ++closings;
  }
  void on_context_ended(std::uint64_t id) { note_ended(id); }
  void note_ended(std::uint64_t id) {
    if (id == 0 || engine->has_child(id)) std::abort();
    for (std::uint64_t e : ended)
      if (e == id) std::abort();  // ids are not reused here: a child ends once
    ended.push_back(id);
  }
};

// Everything written since `from` must be whole, well-formed frames; after a failure, the last one may be
// the fatal ERROR and nothing else follows it.
void check_output(const w::out_buffer& out, std::size_t from, const w::limits& lim) {
  auto rest = out.view().subspan(from);
  while (!rest.empty()) {
    auto f = w::decode_frame(rest, lim);
    if (!f) std::abort();
    rest = rest.subspan(f->bytes().size());
  }
}

bool finished(w::engine_state s) { return s == w::engine_state::closed || s == w::engine_state::failed; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t chunk = data[0] == 0 ? size : data[0];
  const std::uint8_t mode = data[1];
  const auto stream = std::as_bytes(std::span(data + 2, size - 2));

  w::engine_config cfg;
  cfg.local.peer_name = "fuzz";
  cfg.max_child_contexts = 4;
  cfg.lim.max_frame_size = 1 << 16;  // small, so the limits are reachable
  cfg.lim.max_items = 1 << 16;
  cfg.lim.max_depth = 32;
  w::engine s((mode & 1) ? w::role::initiator : w::role::acceptor, cfg);
  w::out_buffer out;
  owner o;
  o.engine = &s;
  const auto t0 = w::engine::clock::time_point{} + std::chrono::hours(1);
  auto now = t0;
  const std::chrono::seconds step[] = {std::chrono::seconds(0), std::chrono::seconds(5), std::chrono::seconds(15),
                                       std::chrono::seconds(35)};

  s.start(out, now);
  check_output(out, 0, cfg.lim);
  if (mode & 2) {
    w::out_buffer hs;
    w::handshake_info peer;
    peer.peer_name = "peer";
    peer.max_frame_size = 1 << 16;
    peer.max_items = 1 << 16;
    peer.max_child_contexts = 2;
    if (!w::encode_handshake(hs, peer)) std::abort();
    const std::size_t before = out.size();
    s.feed(hs.view(), out, o, now);
    check_output(out, before, cfg.lim);
    if (s.state() != w::engine_state::open) std::abort();
  }

  std::size_t answered = 0;
  bool closed_once = false;
  std::uint64_t next_txn = 1u << 20, newest_child = 0;
  std::size_t chunks = 0;
  for (std::size_t at = 0; at < stream.size(); at += chunk, ++chunks) {
    const auto before_state = s.state();
    const std::size_t before = out.size();
    s.feed(stream.subspan(at, std::min(chunk, stream.size() - at)), out, o, now);
    // The owner answers some or all of the calls it received.
    const unsigned policy = (mode >> 3) & 3;
    while (answered < o.calls && policy != 0 && (policy == 3 || (answered % policy) == 0)) {
      const std::uint64_t context = o.contexts[answered++];
      if (s.reply_sent(out, context)) o.note_ended(context);
    }
    if (chunks % 3 == 2) {
      const bool allowed = s.open_for_calls() && s.agreed().max_child_contexts > 0;
      const std::uint64_t id = s.open_context(out, next_txn++, courier::token("KIDS"), "fuzz");
      if (id != 0) {
        if (!allowed || ((id & 1) != 0) != (s.side() == w::role::initiator) || !s.context_usable(id)) std::abort();
        newest_child = id;
      }
    }
    if (chunks % 5 == 4 && newest_child != 0) {
      if (s.close_context(out, newest_child, next_txn++) && s.context_usable(newest_child)) std::abort();
    }
    if ((mode & 4) && !closed_once) {
      closed_once = true;
      s.close(out, "fuzz", now);
    }
    now += step[(mode >> 6) & 3];
    s.tick(now, out);
    if ((s.state() == w::engine_state::open || s.state() == w::engine_state::closing) &&
        s.agreed().max_frame_size < w::min_max_frame_size)
      std::abort();
    if (finished(before_state) && (s.state() != before_state || out.size() != before)) std::abort();
    check_output(out, before, cfg.lim);
    if (s.calls_unanswered() > o.calls - answered + o.closings) std::abort();
    const auto n = s.next_deadline();
    (void)n;
  }
  if (mode & 32) {
    const std::size_t before = out.size();
    const auto st = s.on_eof();
    if (st != w::engine_state::closed && st != w::engine_state::failed) std::abort();
    if (out.size() != before) std::abort();
  }
  (void)w::to_string(s.state());
  return 0;
}
