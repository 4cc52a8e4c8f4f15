#include "courier/wire.hpp"

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include <catch2/catch.hpp>

#include "counting_allocator.hpp"

// Zero allocations per frame in steady state, for encode and for decode, counted by the shared counting operator new
// (tests/support) linked into this test executable.

namespace w = courier::wire;
using courier::token;

namespace {

struct call5 {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0, b = 0, c = 0, d = 0, e = 0;
  std::string note;
  auto fields() { return std::tie(a, b, c, d, e, note); }
  auto fields() const { return std::tie(a, b, c, d, e, note); }
};

void encode_batch(w::out_buffer& buf, int frames) {
  // Built once: the message's own string is the caller's allocation, not the codec's.
  static call5 msg{0, 1, 2, 3, 4, "a note that does not fit in SSO storage"};
  buf.clear();
  for (int i = 0; i < frames; ++i) {
    w::frame_writer wr(buf, w::frame_header{1, w::kind::call, 0, 0, token{"ADD_"}, static_cast<std::uint64_t>(i), 0});
    wr.add(i).add(i + 1).add(i + 2).add(i + 3).add(i + 4);
    REQUIRE(wr.finish().has_value());
    msg.a = i;
    REQUIRE(w::encode(buf, msg).has_value());
  }
}

}  // namespace

TEST_CASE("alloc: encoding into a warm out_buffer allocates nothing") {
  w::out_buffer buf;
  encode_batch(buf, 1000);  // warm-up: the buffer grows to its working size
  const long before = static_cast<long>(counting_allocator::allocation_count());
  for (int round = 0; round < 10; ++round) encode_batch(buf, 1000);
  CHECK(static_cast<long>(counting_allocator::allocation_count()) - before == 0);
}

TEST_CASE("alloc: decoding, whole or split across chunks, allocates nothing once warm") {
  w::out_buffer buf;
  encode_batch(buf, 1000);
  const auto all = buf.view();
  w::decoder d;
  call5 msg;
  std::int64_t sum = 0;
  auto run = [&](std::size_t chunk) {
    for (std::size_t at = 0; at < all.size(); at += chunk) {
      d.feed(all.subspan(at, std::min(chunk, all.size() - at)));
      for (;;) {
        auto f = d.next();
        if (!f) {
          REQUIRE(f.code() == w::errc::need_more);
          break;
        }
        if (f->body().size() < 40) {
          auto r = f->items();
          for (int i = 0; i < 5; ++i) sum += r.read<std::int32_t>().value();
        } else {
          REQUIRE(w::decode(*f, msg).has_value());
          sum += msg.a;
        }
      }
    }
  };
  run(all.size());
  run(1000);  // warm-up of the decoder's own buffer for split frames
  const long before = static_cast<long>(counting_allocator::allocation_count());
  run(all.size());
  run(1000);
  run(7);
  CHECK(static_cast<long>(counting_allocator::allocation_count()) - before == 0);
  CHECK(sum != 0);
}

TEST_CASE("alloc: an engine in steady state allocates nothing per frame (calls, replies, pings, split reads)") {
  struct sink {
    std::uint64_t n = 0;
    void on_frame(const w::frame_view& f) { n += f.transaction_id(); }
  };
  w::engine_config cfg;
  cfg.local.peer_name = "alloc";
  w::engine s(w::role::acceptor, cfg);
  w::out_buffer out, in;
  sink h;
  s.start(out);
  REQUIRE(w::encode_handshake(in, w::handshake_info{}).has_value());
  s.feed(in.view(), out, h);
  REQUIRE(s.state() == w::engine_state::open);

  // One batch: 100 calls, 100 replies, 10 pings, fed in chunks of 7 bytes (frames split across reads).
  in.clear();
  for (std::uint64_t i = 1; i <= 100; ++i) {
    w::frame_writer c(in, w::frame_header{1, w::kind::call, 0, 0, token{"ADD_"}, i, 0});
    c.add(std::int32_t{1}).add(std::int32_t{2});
    REQUIRE(c.finish().has_value());
    w::frame_writer r(in, w::frame_header{1, w::kind::reply, 0, 0, token{"GET_"}, i, 0});
    r.add(std::int64_t{3});
    REQUIRE(r.finish().has_value());
    if (i % 10 == 0)
      REQUIRE(w::frame_writer(in, w::frame_header{1, w::kind::ping, 0, 0, {}, i, 0}).finish().has_value());
  }
  auto batch = [&] {
    out.clear();
    const auto all = in.view();
    for (std::size_t at = 0; at < all.size(); at += 7) {
      s.feed(all.subspan(at, std::min<std::size_t>(7, all.size() - at)), out, h);
      while (s.calls_unanswered() != 0) s.reply_sent(out);
    }
  };
  batch();  // warm-up: the decoder's staging buffer and `out` grow to their working size
  const long before = static_cast<long>(counting_allocator::allocation_count());
  for (int round = 0; round < 10; ++round) batch();
  CHECK(static_cast<long>(counting_allocator::allocation_count()) - before == 0);
  CHECK(s.state() == w::engine_state::open);
  CHECK(s.counters().frames_in == 1 + 11 * 210);
  CHECK(out.size() == 10 * 32);  // the ten pongs of the last batch
}
