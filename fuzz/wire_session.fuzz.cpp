// libFuzzer target for the connection engine (courier::wire::session): a whole byte stream into one end of
// a connection. scripts/fuzz-wire builds and runs it with ASan and UBSan.
//
// Input: byte 0 picks the chunk size (0: all at once), byte 1 the scenario (bit 0: acceptor or initiator;
// bit 1: a valid peer handshake goes first, so most inputs reach the open state; bit 2: the owner closes
// after the first chunk; bits 3..4: how the owner answers calls; bit 5: end of stream at the end; bits 6..7:
// ticks of 0, 5, 15 or 35 s between chunks), the rest is the stream. Checked after every step: everything the
// engine writes decodes as well-formed frames within the limits it agreed, in order, and nothing follows a
// fatal ERROR; a finished engine (closed, failed) never changes state or writes again; the counts stay
// consistent.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "courier/wire.hpp"

namespace w = courier::wire;

namespace {

struct owner {
  std::size_t calls = 0;
  std::size_t answers = 0;
  void on_frame(const w::frame_view& f) {
    if (f.kind() == w::kind::call) ++calls;
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

bool finished(w::session_state s) { return s == w::session_state::closed || s == w::session_state::failed; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t chunk = data[0] == 0 ? size : data[0];
  const std::uint8_t mode = data[1];
  const auto stream = std::as_bytes(std::span(data + 2, size - 2));

  w::session_config cfg;
  cfg.local.peer_name = "fuzz";
  cfg.lim.max_frame_size = 1 << 16;  // small, so the limits are reachable
  cfg.lim.max_items = 1 << 16;
  cfg.lim.max_depth = 32;
  w::session s((mode & 1) ? w::role::initiator : w::role::acceptor, cfg);
  w::out_buffer out;
  owner o;
  const auto t0 = w::session::clock::time_point{} + std::chrono::hours(1);
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
    if (!w::encode_handshake(hs, peer)) std::abort();
    const std::size_t before = out.size();
    s.feed(hs.view(), out, o, now);
    check_output(out, before, cfg.lim);
    if (s.state() != w::session_state::open) std::abort();
  }

  std::size_t answered = 0;
  bool closed_once = false;
  for (std::size_t at = 0; at < stream.size(); at += chunk) {
    const auto before_state = s.state();
    const std::size_t before = out.size();
    s.feed(stream.subspan(at, std::min(chunk, stream.size() - at)), out, o, now);
    // The owner answers some or all of the calls it received.
    const unsigned policy = (mode >> 3) & 3;
    while (answered < o.calls && policy != 0 && (policy == 3 || (answered % policy) == 0)) {
      ++answered;
      s.reply_sent(out);
    }
    if ((mode & 4) && !closed_once) {
      closed_once = true;
      s.close(out, "fuzz", now);
    }
    now += step[(mode >> 6) & 3];
    s.tick(now, out);
    if ((s.state() == w::session_state::open || s.state() == w::session_state::closing) &&
        s.agreed().max_frame_size < w::min_max_frame_size)
      std::abort();
    if (finished(before_state) && (s.state() != before_state || out.size() != before)) std::abort();
    check_output(out, before, cfg.lim);
    if (s.calls_unanswered() > o.calls - answered) std::abort();
    const auto n = s.next_deadline();
    (void)n;
  }
  if (mode & 32) {
    const std::size_t before = out.size();
    const auto st = s.on_eof();
    if (st != w::session_state::closed && st != w::session_state::failed) std::abort();
    if (out.size() != before) std::abort();
  }
  (void)w::to_string(s.state());
  return 0;
}
