#include "courier/wire/engine.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "courier/wire.hpp"
#include "wire/frame_text.hpp"

// The conversation transcripts (tests/vectors/transcripts/, format in tests/vectors/README.md), replayed
// against the engine engine: once with every `>` line fed whole, once fed byte by byte.
namespace w = courier::wire;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<fs::path> transcripts() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(fs::path(COURIER_VECTORS_DIR) / "transcripts"))
    if (e.path().extension() == ".txt") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string trim(std::string s) {
  if (auto hash = s.find('#'); hash != std::string::npos) s.erase(hash);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string token_text(courier::token t) { return t == courier::token{} ? std::string("-") : std::string(t.view()); }

struct recorder {
  std::deque<std::string> seen;
  std::vector<std::string> refused_kinds;  // kinds of child this owner does not serve
  void on_frame(const w::frame_view& f) {
    std::string what = std::string(w::to_string(f.kind())) + " txn=" + std::to_string(f.transaction_id());
    if (f.context_id() != 0) what += " ctx=" + std::to_string(f.context_id());
    seen.push_back(std::move(what));
  }
  w::context_verdict on_context_open(std::uint64_t id, courier::token kind, std::string_view name) {
    seen.push_back("context_open ctx=" + std::to_string(id) + " kind=" + token_text(kind) +
                   " name=" + std::string(name));
    if (std::find(refused_kinds.begin(), refused_kinds.end(), token_text(kind)) != refused_kinds.end())
      return {256 /* no_such_service */, "no child service " + token_text(kind)};
    return {};
  }
  void on_context_closing(std::uint64_t id) { seen.push_back("context_closing ctx=" + std::to_string(id)); }
  void on_context_ended(std::uint64_t id) { seen.push_back("context_ended ctx=" + std::to_string(id)); }
  void on_bad_reply(std::uint64_t txn, const w::error& e) {
    seen.push_back("bad_reply txn=" + std::to_string(txn) + " " + std::to_string(static_cast<unsigned>(e.code)));
  }
};

// An expected ERROR frame whose text is "*" matches any text: compares everything but the text.
bool frame_matches(const w::frame_view& expected, const w::frame_view& actual) {
  if (expected.kind() == w::kind::error) {
    auto r = expected.items();
    auto code = r.read<std::uint32_t>();
    auto text = r.read<std::string_view>();
    if (code && text && *text == "*") {
      auto a = actual.items();
      auto acode = a.read<std::uint32_t>();
      auto atext = a.read<std::string_view>();
      return actual.kind() == w::kind::error && actual.token() == expected.token() &&
             actual.transaction_id() == expected.transaction_id() && actual.context_id() == expected.context_id() &&
             acode && atext && *acode == *code;
    }
  }
  return std::equal(expected.bytes().begin(), expected.bytes().end(), actual.bytes().begin(), actual.bytes().end());
}

std::uint64_t observe(const w::engine& s, const std::string& what) {
  const auto& c = s.counters();
  if (what == "failure") return s.failure().code;
  if (what == "peer_closing") return s.peer_closing() ? 1 : 0;
  if (what == "calls_unanswered") return s.calls_unanswered();
  if (what == "calls_outstanding") return s.calls_outstanding();
  if (what == "dropped_sends") return c.dropped_sends;
  if (what == "refused_calls") return c.refused_calls;
  if (what == "spoiled_frames") return c.spoiled_frames;
  if (what == "unknown_context_frames") return c.unknown_context_frames;
  if (what == "agreed_max_frame_size") return s.agreed().max_frame_size;
  if (what == "agreed_max_items") return s.agreed().max_items;
  if (what == "agreed_max_depth") return s.agreed().max_depth;
  if (what == "agreed_max_child_contexts") return s.agreed().max_child_contexts;
  if (what == "children") return s.children();
  if (what == "contexts_opened") return c.contexts_opened;
  if (what == "contexts_refused") return c.contexts_refused;
  if (what.starts_with("usable ")) return s.context_usable(std::stoull(what.substr(7))) ? 1 : 0;
  throw std::runtime_error("unknown observable " + what);
}

void replay(const fs::path& file, bool byte_by_byte) {
  std::istringstream in(slurp(file));
  std::string line;
  std::optional<w::engine> s;
  w::out_buffer out;  // what the engine wrote and the transcript has not matched yet
  std::size_t matched = 0;
  recorder rec;
  const auto t0 = w::engine::clock::time_point{} + 1h;
  auto now = t0;
  w::engine_config cfg;
  cfg.local.peer_name = "engine";
  int n = 0;
  auto all_seen = [&] {
    INFO("line " << n << ": unmatched output or frames before the next step");
    CHECK(matched == out.size());
    CHECK(rec.seen.empty());
  };
  while (std::getline(in, line)) {
    ++n;
    line = trim(line);
    if (line.empty()) continue;
    CAPTURE(n, line);
    const char op = line[0];
    const std::string arg = line.size() > 2 ? line.substr(2) : std::string();
    if (line.starts_with("role ")) {
      s.emplace(line.substr(5) == "initiator" ? w::role::initiator : w::role::acceptor, cfg);
    } else if (line.starts_with("nonce ")) {
      cfg.local.nonce = std::stoull(line.substr(6));
      s.emplace(s->side(), cfg);
    } else if (line.starts_with("max_children ")) {
      cfg.max_child_contexts = static_cast<std::uint32_t>(std::stoul(line.substr(13)));
      s.emplace(s->side(), cfg);
    } else if (line.starts_with("refuse ")) {
      rec.refused_kinds.push_back(line.substr(7));
    } else if (op == '>') {
      all_seen();
      const auto bytes = w::test::parse_hex(arg);
      if (byte_by_byte) {
        for (std::size_t i = 0; i < bytes.size(); ++i) s->feed(std::span(bytes).subspan(i, 1), out, rec, now);
      } else {
        s->feed(bytes, out, rec, now);
      }
    } else if (op == '<') {
      const auto bytes = w::test::parse_hex(arg);
      auto expected = w::decode_frame(bytes);
      REQUIRE(expected.has_value());
      auto actual = w::decode_frame(out.view().subspan(matched));
      INFO("engine wrote: " << (actual ? w::to_text(*actual) : std::string("nothing decodable")));
      REQUIRE(actual.has_value());
      CHECK(frame_matches(*expected, *actual));
      matched += actual->bytes().size();
    } else if (op == '^') {
      REQUIRE_FALSE(rec.seen.empty());
      CHECK(rec.seen.front() == arg);
      rec.seen.pop_front();
    } else if (op == '=') {
      CHECK(w::to_string(s->state()) == arg);
    } else if (op == '?') {
      const auto sp = arg.rfind(' ');
      CHECK(observe(*s, arg.substr(0, sp)) == std::stoull(arg.substr(sp + 1)));
    } else if (op == '!') {
      all_seen();
      if (arg == "start") {
        s->start(out, now);
      } else if (arg == "eof") {
        s->on_eof();
      } else if (arg == "call_sent") {
        s->call_sent();
      } else if (arg == "reply_sent") {
        s->reply_sent(out);
      } else if (arg.starts_with("reply_sent ")) {
        const auto context = std::stoull(arg.substr(11));
        if (s->reply_sent(out, context)) rec.seen.push_back("context_ended ctx=" + std::to_string(context));
      } else if (arg.starts_with("open_context ")) {
        // open_context TXN KIND [NAME]: KIND "-" is the zero token.
        std::istringstream words(arg.substr(13));
        std::uint64_t txn = 0;
        std::string kind, name;
        words >> txn >> kind;
        std::getline(words >> std::ws, name);
        REQUIRE((kind == "-" || kind.size() == 4));
        const auto id = s->open_context(
            out, txn, kind == "-" ? courier::token{} : courier::token::from_chars(kind[0], kind[1], kind[2], kind[3]),
            name);
        rec.seen.push_back("opened ctx=" + std::to_string(id));
      } else if (arg.starts_with("close_context ")) {
        std::istringstream words(arg.substr(14));
        std::uint64_t context = 0, txn = 0;
        words >> context >> txn;
        rec.seen.push_back(std::string("close_context ") + (s->close_context(out, context, txn) ? "true" : "false"));
      } else if (arg == "close" || arg.starts_with("close ")) {
        s->close(out, arg.size() > 6 ? std::string_view(arg).substr(6) : std::string_view(), now);
      } else if (arg.starts_with("tick ")) {
        now = t0 + std::chrono::milliseconds(std::stoll(arg.substr(5)));
        // The deadline the engine asks for is never later than the tick that has work to do.
        s->tick(now, out);
      } else {
        FAIL("unknown action " << arg);
      }
    } else {
      FAIL("unknown line");
    }
  }
  all_seen();
}

}  // namespace

TEST_CASE("engine transcripts: every conversation replays, whole and byte by byte") {
  const auto all = transcripts();
  REQUIRE(all.size() >= 20);
  for (const auto& t : all) {
    CAPTURE(t.filename().string());
    replay(t, false);
    replay(t, true);
  }
}

TEST_CASE("engine: two engines talk to each other, call and close orderly") {
  w::engine_config a_cfg, b_cfg;
  a_cfg.local.peer_name = "a";
  b_cfg.local.peer_name = "b";
  w::engine a(w::role::initiator, a_cfg), b(w::role::acceptor, b_cfg);
  w::out_buffer a_out, b_out;
  recorder a_rec, b_rec;
  a.start(a_out);
  b.start(b_out);
  auto pump = [&] {
    for (int i = 0; i < 8 && (!a_out.empty() || !b_out.empty()); ++i) {
      w::out_buffer to_b = std::move(a_out), to_a = std::move(b_out);
      a_out = w::out_buffer();
      b_out = w::out_buffer();
      if (!to_b.empty()) b.feed(to_b.view(), b_out, b_rec);
      if (!to_a.empty()) a.feed(to_a.view(), a_out, a_rec);
    }
  };
  pump();
  REQUIRE(a.state() == w::engine_state::open);
  REQUIRE(b.state() == w::engine_state::open);
  CHECK(a.peer_name() == "b");
  CHECK(b.peer_name() == "a");
  CHECK(a.agreed().max_items == w::limits{}.max_items);

  // a calls b; a closes before the reply; b answers, then closes; a sees the reply, then the close.
  REQUIRE(w::frame_writer(a_out, w::frame_header{1, w::kind::call, 0, 0, courier::token("ADD_"), 1, 0})
              .add(std::int32_t{1})
              .finish());
  a.call_sent();
  a.close(a_out, "done");
  pump();
  REQUIRE(b_rec.seen.size() == 1);
  CHECK(b.peer_closing());
  CHECK(b.state() == w::engine_state::open);
  REQUIRE(w::frame_writer(b_out, w::frame_header{1, w::kind::reply, 0, 0, courier::token("ADD_"), 1, 0})
              .add(std::int32_t{2})
              .finish());
  b.reply_sent(b_out);
  CHECK(b.state() == w::engine_state::closed);  // b answered everything and made no call: done
  pump();
  CHECK(a_rec.seen.size() == 1);
  CHECK(a.state() == w::engine_state::closed);  // a has its answer and b's close: done too
}

TEST_CASE("engine: next_deadline says when tick has work") {
  w::engine s(w::role::acceptor);
  w::out_buffer out;
  const auto t0 = w::engine::clock::time_point{} + 1h;
  CHECK(s.next_deadline() == w::engine::clock::time_point::max());
  s.start(out, t0);
  CHECK(s.next_deadline() == t0 + 10s);
  out.clear();
  REQUIRE(w::encode_handshake(out, w::handshake_info{}));
  w::out_buffer mine;
  struct ignore {
    void on_frame(const w::frame_view&) {}
  };
  s.feed(out.view(), mine, ignore{});
  REQUIRE(s.state() == w::engine_state::open);
  s.tick(t0 + 1s, mine);  // the bytes arrived by then
  CHECK(s.next_deadline() == t0 + 11s);
  s.tick(t0 + 11s, mine);
  CHECK(s.next_deadline() == t0 + 21s);  // pinged at 11 s: next ping 10 s later
}

TEST_CASE("engine: close before the handshake completes closes at once, writing nothing") {
  w::engine s(w::role::initiator);
  w::out_buffer out;
  s.start(out);
  const auto n = out.size();
  s.close(out);
  CHECK(s.state() == w::engine_state::closed);
  CHECK(out.size() == n);
}

TEST_CASE("handshake: encode_handshake writes the seven items of the handshake_limits vector") {
  w::out_buffer out;
  w::handshake_info info;
  info.peer_name = "server-7";
  REQUIRE(w::encode_handshake(out, info));
  const auto expected = w::test::parse_hex(slurp(fs::path(COURIER_VECTORS_DIR) / "handshake_limits.hex"));
  CHECK(std::equal(out.view().begin(), out.view().end(), expected.begin(), expected.end()));

  // And the five-item handshake of the first version of the spec still decodes, with the default limits.
  const auto five = w::test::parse_hex(slurp(fs::path(COURIER_VECTORS_DIR) / "handshake.hex"));
  auto f = w::decode_frame(five);
  REQUIRE(f);
  auto hs = w::decode_handshake(*f);
  REQUIRE(hs);
  CHECK(hs->max_items == w::limits{}.max_items);
  CHECK(hs->max_depth == w::limits{}.max_depth);
  CHECK(hs->peer_name == "client-42");
}

namespace {

struct ignore_frames {
  void on_frame(const w::frame_view&) {}
};

// Feeds `s` (started at `at`) the peer's handshake, arriving at `at`; `peer` says what it announces.
void open_at(w::engine& s, w::out_buffer& out, w::engine::clock::time_point at, const w::handshake_info& peer = {}) {
  s.start(out, at);
  w::out_buffer theirs;
  REQUIRE(w::encode_handshake(theirs, peer));
  s.feed(theirs.view(), out, ignore_frames{}, at);
  REQUIRE(s.state() == w::engine_state::open);
  out.clear();
}

// The transaction ids of the pings in `out`, which holds only whole frames.
std::vector<std::uint64_t> pings_in(const w::out_buffer& out) {
  std::vector<std::uint64_t> ids;
  auto rest = out.view();
  while (!rest.empty()) {
    auto f = w::decode_frame(rest);
    REQUIRE(f);
    if (f->kind() == w::kind::ping) ids.push_back(f->transaction_id());
    rest = rest.subspan(f->bytes().size());
  }
  return ids;
}

}  // namespace

TEST_CASE("engine: bytes of a frame still arriving keep the peer alive (note_received)") {
  w::engine s(w::role::initiator);  // ping interval 10 s, dead after 30 s
  w::out_buffer out;
  const auto t0 = w::engine::clock::time_point{} + 1h;
  open_at(s, out, t0);
  // A large frame trickles in: a few of its bytes every 5 s, never a whole frame, for two minutes.
  for (auto t = t0 + 5s; t <= t0 + 120s; t += 5s) {
    s.note_received(t);
    CHECK(s.next_deadline() == t + 10s);
    s.tick(t, out);
    s.tick(t + 4999ms, out);
  }
  CHECK(pings_in(out).empty());
  CHECK(s.state() == w::engine_state::open);
  // Then the trickle stops: the silence counts from the last byte.
  s.tick(t0 + 130s, out);
  CHECK(pings_in(out) == std::vector<std::uint64_t>{1});
}

TEST_CASE("engine: ticked exactly at next_deadline(), a silent peer gets pings at 10 s and 20 s, dead at 30 s") {
  // The owner's timer is one-shot: armed at next_deadline(), it calls tick() then, and is armed again.
  struct event {
    std::chrono::milliseconds at;
    std::vector<std::uint64_t> pings;
    w::engine_state state;
    bool operator==(const event&) const = default;
  };
  auto run = [](std::chrono::milliseconds late) {
    w::engine s(w::role::acceptor);
    w::out_buffer out;
    const auto t0 = w::engine::clock::time_point{} + 1h;
    open_at(s, out, t0);
    std::vector<event> seen;
    for (int i = 0; i < 10 && s.state() == w::engine_state::open; ++i) {
      const auto t = s.next_deadline();
      REQUIRE(t != w::engine::clock::time_point::max());
      out.clear();
      s.tick(t + late, out);
      seen.push_back({std::chrono::duration_cast<std::chrono::milliseconds>(t - t0), pings_in(out), s.state()});
    }
    return std::pair{seen, s.failure()};
  };
  const std::vector<event> expected{
      {10s, {1}, w::engine_state::open}, {20s, {2}, w::engine_state::open}, {30s, {}, w::engine_state::failed}};
  auto [on_time, failure] = run(0ms);
  CHECK(on_time == expected);
  CHECK(failure.code == 272);
  // A timer that fires late (within the protocol's 100 ms) does not move the deadlines that follow.
  auto [late, late_failure] = run(99ms);
  CHECK(late == expected);
}

TEST_CASE("engine: time-outs are reported as time-outs") {
  const auto t0 = w::engine::clock::time_point{} + 1h;
  w::out_buffer out;
  SECTION("handshake: bad_handshake locally with the time, 'no handshake in time' to the peer") {
    w::engine s(w::role::acceptor);
    s.start(out, t0);
    out.clear();
    s.tick(t0 + 10s, out);
    REQUIRE(s.state() == w::engine_state::failed);
    CHECK(s.failure().code == 22);
    CHECK(s.failure().timed_out);
    CHECK_FALSE(s.failure().by_peer);
    CHECK(s.failure().text == "no handshake from the peer within 10000 ms");
    auto f = w::decode_frame(out.view());
    REQUIRE(f);
    auto r = f->items();
    CHECK(r.read<std::uint32_t>().value() == 22);
    CHECK(r.read<std::string_view>().value() == "no handshake in time");
  }
  SECTION("dead peer: after the pings of two intervals went unanswered, the third interval ends it") {
    w::engine s(w::role::acceptor);
    open_at(s, out, t0);
    s.tick(t0 + 10s, out);
    s.tick(t0 + 20s, out);
    REQUIRE(s.state() == w::engine_state::open);
    s.tick(t0 + 30s, out);
    REQUIRE(s.state() == w::engine_state::failed);
    CHECK(s.failure().code == 272);
    CHECK(s.failure().timed_out);
    CHECK(s.failure().text == "the peer was silent for 30000 ms and answered none of 2 pings");
  }
  SECTION(
      "a stall of ours is not the peer's silence: a first tick long after the last byte pings, and does not end it") {
    w::engine s(w::role::acceptor);
    open_at(s, out, t0);
    out.clear();
    s.tick(t0 + 300s, out);  // this process was stopped, or its timer thread starved, for 5 minutes
    REQUIRE(s.state() == w::engine_state::open);
    auto ping = w::decode_frame(out.view());
    REQUIRE(ping);
    CHECK(ping->header().kind == w::kind::ping);
    CHECK(s.next_deadline() == t0 + 310s);  // the next ping, an interval later; not a verdict
    s.tick(t0 + 310s, out);
    REQUIRE(s.state() == w::engine_state::open);
    // A peer that answers neither is dead a whole interval after the second ping, not at once.
    CHECK(s.next_deadline() == t0 + 320s);
    s.tick(t0 + 320s - 1ms, out);
    REQUIRE(s.state() == w::engine_state::open);
    s.tick(t0 + 320s, out);
    CHECK(s.state() == w::engine_state::failed);
  }
  SECTION("close") {
    w::engine_config cfg;
    cfg.ping_interval = 0ms;
    w::engine s(w::role::acceptor, cfg);
    open_at(s, out, t0);
    s.close(out, {}, t0 + 1s);
    s.tick(t0 + 11s, out);
    REQUIRE(s.state() == w::engine_state::failed);
    CHECK(s.failure().code == 272);
    CHECK(s.failure().timed_out);
  }
  SECTION("not a time-out: end of stream, a fatal frame, the peer's refusal") {
    w::engine s(w::role::acceptor);
    open_at(s, out, t0);
    s.on_eof();
    CHECK(s.failure().code == 272);
    CHECK_FALSE(s.failure().timed_out);
  }
}

TEST_CASE("engine: before the handshake nothing larger than max_first_frame_size is accepted") {
  const auto t0 = w::engine::clock::time_point{} + 1h;
  w::out_buffer out;
  w::engine s(w::role::acceptor);
  CHECK(s.frame_limit() == w::max_first_frame_size);
  s.start(out, t0);
  out.clear();
  // A handshake of exactly 4096 bytes (its name padded) is accepted.
  const std::string long_name(w::max_first_frame_size - 65, 'n');  // the other items take 65 bytes
  w::handshake_info peer;
  peer.peer_name = long_name;
  w::out_buffer theirs;
  REQUIRE(w::encode_handshake(theirs, peer));
  REQUIRE(theirs.size() == w::max_first_frame_size);
  s.feed(theirs.view(), out, ignore_frames{}, t0);
  CHECK(s.state() == w::engine_state::open);
  CHECK(s.frame_limit() == w::limits{}.max_frame_size);

  SECTION("once open, larger frames are accepted") {
    w::out_buffer big;
    REQUIRE(w::frame_writer(big, w::frame_header{1, w::kind::send, 0, 0, courier::token("BIG_"), 0, 0})
                .add(std::string_view(std::string(100000, 'x')))
                .finish());
    recorder rec;
    s.feed(big.view(), out, rec, t0);
    CHECK(rec.seen.size() == 1);
    CHECK(s.state() == w::engine_state::open);
  }
}

TEST_CASE("engine: a first frame announcing more than 4096 bytes is frame_too_large from its header alone") {
  const auto t0 = w::engine::clock::time_point{} + 1h;
  for (auto k : {w::kind::handshake, w::kind::error}) {
    CAPTURE(w::to_string(k));
    w::out_buffer out;
    w::engine s(w::role::initiator);
    s.start(out, t0);
    out.clear();
    w::out_buffer theirs;
    REQUIRE(w::frame_writer(theirs, w::frame_header{1, k, 0, 0, {}, 0, 0})
                .add(std::string_view(std::string(w::max_first_frame_size - 32 - 5 + 1, 'x')))
                .finish());
    REQUIRE(theirs.size() == w::max_first_frame_size + 1);
    s.feed(theirs.view().first(w::header_size), out, ignore_frames{}, t0);  // the header only
    REQUIRE(s.state() == w::engine_state::failed);
    CHECK(s.failure().code == 9);
    CHECK_FALSE(s.failure().by_peer);
    auto f = w::decode_frame(out.view());
    REQUIRE(f);
    CHECK(f->kind() == w::kind::error);
    CHECK(f->transaction_id() == 0);
    CHECK(f->items().read<std::uint32_t>().value() == 9);
  }
}

TEST_CASE("engine: with no children accepted, opens get 274; calls, sends and closes for a child get 258") {
  const auto t0 = w::engine::clock::time_point{} + 1h;
  w::out_buffer out;
  w::engine s(w::role::acceptor);
  open_at(s, out, t0);
  recorder rec;
  auto feed = [&](w::kind k, courier::token tok, std::uint64_t txn, std::uint64_t ctx) {
    out.clear();
    w::out_buffer theirs;
    w::frame_writer frame(theirs, w::frame_header{1, k, 0, 0, tok, txn, ctx});
    if (k == w::kind::call || k == w::kind::send) frame.add(std::int32_t{1});
    REQUIRE(frame.finish());
    s.feed(theirs.view(), out, rec, t0);
    REQUIRE(s.state() == w::engine_state::open);
  };
  auto answer = [&] {
    auto f = w::decode_frame(out.view());
    REQUIRE(f);
    REQUIRE(f->bytes().size() == out.size());
    auto r = f->items();
    return std::tuple{f->kind(),
                      f->token(),
                      f->transaction_id(),
                      f->context_id(),
                      r.read<std::uint32_t>().value(),
                      std::string(r.read<std::string_view>().value())};
  };

  feed(w::kind::call, courier::token("ADD_"), 7, 5);
  CHECK(answer() == std::tuple{w::kind::error, courier::token("ADD_"), 7u, 5u, 258u,
                               std::string("call ADD_: context 5 is not open")});
  CHECK(s.calls_unanswered() == 0);

  feed(w::kind::send, courier::token("LOG_"), 0, 5);
  CHECK(answer() == std::tuple{w::kind::error, courier::token("LOG_"), 0u, 0u, 258u,
                               std::string("send LOG_: context 5 is not open")});

  feed(w::kind::context_open, courier::token("CHLD"), 1, 1);
  CHECK(answer() == std::tuple{w::kind::error, courier::token("CHLD"), 1u, 1u, 274u,
                               std::string("context_open 1: this peer accepts no child contexts")});
  feed(w::kind::context_close, courier::token{}, 2, 1);
  CHECK(answer() == std::tuple{w::kind::error, courier::token{}, 2u, 1u, 258u,
                               std::string("context_close: context 1 is not open")});
  CHECK(rec.seen.empty());
  CHECK(s.counters().unknown_context_frames == 3);
  CHECK(s.counters().contexts_refused == 1);
  CHECK(s.calls_unanswered() == 0);

  // Answers to our calls are the owner's, whatever their context id.
  s.call_sent();
  feed(w::kind::reply, courier::token("ADD_"), 3, 9);
  CHECK(out.empty());
  REQUIRE(rec.seen.size() == 1);
  CHECK(rec.seen.front() == "reply txn=3 ctx=9");

  // And a 258 with transaction id 0 from the peer is a report about one frame of ours, not the end.
  out.clear();
  w::out_buffer theirs;
  REQUIRE(w::frame_writer(theirs, w::frame_header{1, w::kind::error, 0, 0, {}, 0, 0})
              .add(std::uint32_t{258})
              .add(std::string_view("send LOG_: context 5 is not open"))
              .finish());
  s.feed(theirs.view(), out, rec, t0);
  CHECK(s.state() == w::engine_state::open);
  CHECK(out.empty());
}

TEST_CASE("engine: a handshake reflected back (client @ /bin/cat) is refused when it carries our nonce") {
  const auto t0 = w::engine::clock::time_point{} + 1h;
  w::engine_config cfg;
  cfg.local.peer_name = "client";
  SECTION("with a nonce: bad_handshake, saying the handshake is our own") {
    cfg.local.nonce = 0x1234'5678'9abc'def0;
    w::engine s(w::role::initiator, cfg);
    w::out_buffer out, answer;
    s.start(out, t0);
    auto mine = w::decode_frame(out.view());
    REQUIRE(mine);
    CHECK(w::decode_handshake(*mine)->nonce == cfg.local.nonce);
    s.feed(out.view(), answer, ignore_frames{}, t0);  // what cat gives back
    REQUIRE(s.state() == w::engine_state::failed);
    CHECK(s.failure().code == 22);
    CHECK(s.failure().text == "the peer's handshake is our own, reflected (the other end echoes what it reads)");
    auto f = w::decode_frame(answer.view());
    REQUIRE(f);
    CHECK(f->items().read<std::uint32_t>().value() == 22);
  }
  SECTION("a peer's other nonce is accepted") {
    cfg.local.nonce = 7;
    w::engine s(w::role::initiator, cfg);
    w::out_buffer out;
    w::handshake_info peer;
    peer.nonce = 8;
    open_at(s, out, t0, peer);
  }
  SECTION("nonce 0 on both sides: no eighth item, and an echoed handshake opens as before") {
    w::engine s(w::role::initiator, cfg);
    w::out_buffer out, answer;
    s.start(out, t0);
    auto mine = w::decode_frame(out.view());
    REQUIRE(mine);
    auto r = mine->items();
    for (int i = 0; i < 7; ++i) REQUIRE(r.skip());
    CHECK_FALSE(r.has_more());
    s.feed(out.view(), answer, ignore_frames{}, t0);
    CHECK(s.state() == w::engine_state::open);
  }
}

TEST_CASE("engine: bytes that are no frame from the start say the peer does not speak Courier") {
  const auto t0 = w::engine::clock::time_point{} + 1h;
  const std::string http = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
  const auto bytes = std::as_bytes(std::span<const char>(http.data(), http.size()));
  for (const auto& [side, peer] : {std::pair{w::role::initiator, "server"}, std::pair{w::role::acceptor, "client"}}) {
    INFO(peer);
    w::engine e(side, w::engine_config{});
    w::out_buffer out;
    e.start(out, t0);
    e.feed(bytes, out, ignore_frames{}, t0);
    REQUIRE(e.state() == w::engine_state::failed);
    CHECK(e.failure().code == static_cast<std::uint32_t>(w::errc::bad_magic));
    CHECK(e.failure().text.find(std::string("the peer is not a Courier ") + peer) != std::string::npos);
  }
}

TEST_CASE("handshake: a nonce is written as the eighth item of the handshake_nonce vector, and read back") {
  w::out_buffer out;
  w::handshake_info info;
  info.peer_name = "client-42";
  info.nonce = 0x5ca1ab1e0ddba11;
  REQUIRE(w::encode_handshake(out, info));
  const auto expected = w::test::parse_hex(slurp(fs::path(COURIER_VECTORS_DIR) / "handshake_nonce.hex"));
  CHECK(std::equal(out.view().begin(), out.view().end(), expected.begin(), expected.end()));
  auto f = w::decode_frame(expected);
  REQUIRE(f);
  CHECK(w::decode_handshake(*f)->nonce == info.nonce);
}

namespace {

// One side of a conversation between two engines, for the random context test: it opens and
// closes children, calls in them, and answers the calls it receives (late, in random order).
struct context_peer {
  w::engine engine;
  w::out_buffer out;
  std::uint64_t next_txn = 1;
  struct received {
    std::uint64_t txn, context;
    courier::token tok;
  };
  std::vector<received> owed;                      // calls received, not answered yet
  std::map<std::uint64_t, std::uint64_t> waiting;  // our calls and requests in flight: txn -> context
  std::set<std::uint64_t> had;                     // children this side had: opened, or accepted
  std::set<std::uint64_t> ended;                   // children that ended here (notified)
  std::size_t answers = 0;

  context_peer(w::role r, const w::engine_config& cfg) : engine(r, cfg) {}

  // The handler.
  void on_frame(const w::frame_view& f) {
    if (f.kind() == w::kind::call) {
      REQUIRE((f.context_id() == 0 || engine.has_child(f.context_id())));
      owed.push_back({f.transaction_id(), f.context_id(), f.token()});
    } else if (f.kind() == w::kind::send) {
      REQUIRE((f.context_id() == 0 || engine.has_child(f.context_id())));
    } else if (f.kind() == w::kind::reply || f.kind() == w::kind::error) {
      REQUIRE(waiting.erase(f.transaction_id()) == 1);  // every answer is for one of ours, once
      ++answers;
    }
  }
  w::context_verdict on_context_open(std::uint64_t id, courier::token, std::string_view) {
    REQUIRE_FALSE(engine.has_child(id));
    had.insert(id);
    return {};
  }
  void on_context_closing(std::uint64_t id) { REQUIRE(engine.has_child(id)); }
  void on_context_ended(std::uint64_t id) { note_ended(id); }
  void note_ended(std::uint64_t id) {
    REQUIRE_FALSE(engine.has_child(id));
    REQUIRE(ended.insert(id).second);  // ids are never reused here: each child ends once
  }

  void answer_one(std::size_t which) {
    const received r = owed[which];
    owed.erase(owed.begin() + static_cast<std::ptrdiff_t>(which));
    if (r.context == 0 || engine.has_child(r.context)) {
      REQUIRE(w::frame_writer(out, w::frame_header{1, w::kind::reply, 0, 0, r.tok, r.txn, r.context}).finish());
    }
    if (engine.reply_sent(out, r.context)) note_ended(r.context);
  }
};

}  // namespace

TEST_CASE("engine: two engines open, call in, and close children at random; both end with none, every call answered") {
  std::mt19937 random(GENERATE(1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u));
  w::engine_config cfg;
  cfg.max_child_contexts = 6;
  context_peer a(w::role::initiator, cfg), b(w::role::acceptor, cfg);
  a.engine.start(a.out);
  b.engine.start(b.out);
  // Delivers what each wrote to the other, in pieces of random size: frames cross in flight.
  auto deliver = [&](context_peer& from, context_peer& to, bool all) {
    if (from.out.empty()) return;
    const std::size_t n = all ? from.out.size() : std::min<std::size_t>(from.out.size(), 1 + random() % 200);
    w::out_buffer rest;
    if (n < from.out.size()) std::memcpy(rest.extend(from.out.size() - n), from.out.data() + n, from.out.size() - n);
    to.engine.feed(std::span<const std::byte>(from.out.data(), n), to.out, to);
    from.out = std::move(rest);
  };
  for (int round = 0;
       round < 4 && (a.engine.state() != w::engine_state::open || b.engine.state() != w::engine_state::open); ++round) {
    deliver(a, b, true);
    deliver(b, a, true);
  }
  REQUIRE(a.engine.state() == w::engine_state::open);
  REQUIRE(b.engine.state() == w::engine_state::open);
  REQUIRE(a.engine.agreed().max_child_contexts == 6);

  std::vector<std::uint64_t> opened_a, opened_b;  // what each side opened (or tried to)
  auto act = [&](context_peer& p, std::vector<std::uint64_t>& opened) {
    switch (random() % 6) {
      case 0: {  // open a child
        const std::uint64_t txn = p.next_txn++;
        if (const std::uint64_t id = p.engine.open_context(p.out, txn, courier::token("KIDS"))) {
          p.waiting[txn] = id;
          p.had.insert(id);
          opened.push_back(id);
        }
        break;
      }
      case 1: {  // close a child this side knows (either side's)
        std::vector<std::uint64_t> usable;
        for (std::uint64_t id : opened_a)
          if (p.engine.context_usable(id)) usable.push_back(id);
        for (std::uint64_t id : opened_b)
          if (p.engine.context_usable(id)) usable.push_back(id);
        if (usable.empty()) break;
        const std::uint64_t id = usable[random() % usable.size()];
        const std::uint64_t txn = p.next_txn++;
        REQUIRE(p.engine.close_context(p.out, id, txn));
        REQUIRE_FALSE(p.engine.context_usable(id));
        p.waiting[txn] = id;
        break;
      }
      case 2:
      case 3: {  // call in the parent or in a usable child
        std::vector<std::uint64_t> usable{0};
        for (std::uint64_t id : opened_a)
          if (p.engine.context_usable(id)) usable.push_back(id);
        for (std::uint64_t id : opened_b)
          if (p.engine.context_usable(id)) usable.push_back(id);
        const std::uint64_t ctx = usable[random() % usable.size()];
        const std::uint64_t txn = p.next_txn++;
        REQUIRE(
            w::frame_writer(p.out, w::frame_header{1, w::kind::call, 0, 0, courier::token("WORK"), txn, ctx}).finish());
        p.engine.call_sent();
        p.waiting[txn] = ctx;
        break;
      }
      default:  // answer a call received, not the oldest
        if (!p.owed.empty()) p.answer_one(random() % p.owed.size());
        break;
    }
  };
  for (int step = 0; step < 3000; ++step) {
    act(random() % 2 ? a : b, random() % 2 ? opened_a : opened_b);
    deliver(a, b, false);
    deliver(b, a, false);
  }
  // Drain: everything is delivered and answered; then every child left open is closed.
  auto settle = [&] {
    for (int i = 0; i < 1000 && (!a.out.empty() || !b.out.empty() || !a.owed.empty() || !b.owed.empty()); ++i) {
      while (!a.owed.empty()) a.answer_one(0);
      while (!b.owed.empty()) b.answer_one(0);
      deliver(a, b, true);
      deliver(b, a, true);
    }
  };
  settle();
  for (std::uint64_t id : opened_a)
    if (a.engine.context_usable(id)) {
      const std::uint64_t txn = a.next_txn++;
      REQUIRE(a.engine.close_context(a.out, id, txn));
      a.waiting[txn] = id;
    }
  for (std::uint64_t id : opened_b)
    if (b.engine.context_usable(id)) {
      const std::uint64_t txn = b.next_txn++;
      REQUIRE(b.engine.close_context(b.out, id, txn));
      b.waiting[txn] = id;
    }
  settle();
  INFO("a opened " << opened_a.size() << ", b opened " << opened_b.size() << "; answers " << a.answers << " and "
                   << b.answers);
  CHECK(a.waiting.empty());
  CHECK(b.waiting.empty());
  CHECK(a.engine.calls_outstanding() == 0);
  CHECK(b.engine.calls_outstanding() == 0);
  CHECK(a.engine.calls_unanswered() == 0);
  CHECK(b.engine.calls_unanswered() == 0);
  CHECK(a.engine.children() == 0);
  CHECK(b.engine.children() == 0);
  CHECK(a.engine.state() == w::engine_state::open);
  CHECK(b.engine.state() == w::engine_state::open);
  CHECK(a.ended == a.had);  // every child either side had ended there, and was told once
  CHECK(b.ended == b.had);
  CHECK(opened_a.size() + opened_b.size() > 20);  // the limit let children come and go
  // And the connection still closes orderly.
  a.engine.close(a.out, "done");
  settle();
  CHECK(a.engine.state() == w::engine_state::closed);
  CHECK(b.engine.state() == w::engine_state::closed);
}
