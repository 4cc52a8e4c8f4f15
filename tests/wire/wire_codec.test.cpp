#include "courier/wire.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

namespace w = courier::wire;
using courier::token;

namespace {

w::frame_header call_header(std::uint64_t txn = 7) {
  return w::frame_header{w::protocol_version, w::kind::call, 0, 0, token{"ADD_"}, txn, 3};
}

w::frame_view decode_one(const w::out_buffer& buf) {
  auto f = w::decode_frame(buf.view());
  REQUIRE(f.has_value());
  REQUIRE(f->bytes().size() == buf.size());
  return *f;
}

template <class T>
void round_trip_scalar(T v) {
  w::out_buffer buf;
  w::frame_writer wr(buf, call_header());
  wr.add(v);
  REQUIRE(wr.finish().has_value());
  auto f = decode_one(buf);
  auto r = f.items();
  auto got = r.read<T>();
  REQUIRE(got.has_value());
  if constexpr (std::is_floating_point_v<T>) {
    // Bit-exact, so NaN payloads and the sign of zero survive too.
    CHECK(std::memcmp(&*got, &v, sizeof v) == 0);
  } else {
    CHECK(*got == v);
  }
  CHECK_FALSE(r.has_more());
}

template <class T>
void round_trip_limits() {
  round_trip_scalar<T>(std::numeric_limits<T>::min());
  round_trip_scalar<T>(std::numeric_limits<T>::max());
  round_trip_scalar<T>(T{0});
  round_trip_scalar<T>(T{1});
}

}  // namespace

TEST_CASE("wire codec: header fields round trip") {
  w::out_buffer buf;
  w::frame_writer wr(
      buf, w::frame_header{1, w::kind::reply, 0, 0, token{"XY_1"}, 0xfedcba9876543210ull, 0x0123456789abcdefull});
  REQUIRE(wr.finish().value() == w::header_size);
  auto f = decode_one(buf);
  CHECK(f.kind() == w::kind::reply);
  CHECK(f.token() == token{"XY_1"});
  CHECK(f.transaction_id() == 0xfedcba9876543210ull);
  CHECK(f.context_id() == 0x0123456789abcdefull);
  CHECK(f.body().empty());
}

TEST_CASE("wire codec: every integer type at its limits") {
  round_trip_scalar(true);
  round_trip_scalar(false);
  round_trip_limits<std::int8_t>();
  round_trip_limits<std::int16_t>();
  round_trip_limits<std::int32_t>();
  round_trip_limits<std::int64_t>();
  round_trip_limits<std::uint8_t>();
  round_trip_limits<std::uint16_t>();
  round_trip_limits<std::uint32_t>();
  round_trip_limits<std::uint64_t>();
  round_trip_scalar<std::int32_t>(-1);
}

TEST_CASE("wire codec: floats including NaN, infinities, signed zero, denormals") {
  for (float f : {0.0f, -0.0f, 1.5f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest()}) {
    round_trip_scalar(f);
  }
  for (double d : {0.0, -0.0, 0.1, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::signaling_NaN(),
                   std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max()}) {
    round_trip_scalar(d);
  }
}

TEST_CASE("wire codec: strings and binaries, empty to 1 MiB") {
  const std::string big(1 << 20, 'x');
  std::vector<std::byte> blob(1 << 20);
  for (std::size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<std::byte>(i * 31);
  const std::string utf8 = "gr\xc3\xbc\xc3\x9f dich \xf0\x9f\x98\x80 \xe2\x82\xac";

  w::out_buffer buf;
  w::frame_writer wr(buf, call_header());
  wr.add("").add(big).add(utf8).add_binary({}).add_binary(blob);
  REQUIRE(wr.finish().has_value());
  auto f = decode_one(buf);
  auto r = f.items();
  CHECK(r.read<std::string_view>().value().empty());
  CHECK(r.read<std::string>().value() == big);
  CHECK(r.read<std::string_view>().value() == utf8);
  CHECK(r.read<std::span<const std::byte>>().value().empty());
  auto b = r.read<std::span<const std::byte>>();
  REQUIRE(b.has_value());
  CHECK(std::equal(b->begin(), b->end(), blob.begin(), blob.end()));
  // Zero-copy: the view points into the encoded buffer.
  CHECK(b->data() > buf.data());
  CHECK(b->data() < buf.data() + buf.size());
  CHECK_FALSE(r.has_more());
}

TEST_CASE("wire codec: nested lists up to the depth limit") {
  w::limits lim;
  lim.max_depth = 32;
  w::out_buffer buf;
  w::frame_writer wr(buf, call_header(), lim);
  for (std::uint32_t i = 0; i < lim.max_depth; ++i) wr.begin_list().add(static_cast<std::int32_t>(i));
  for (std::uint32_t i = 0; i < lim.max_depth; ++i) wr.end_list();
  wr.add(true);
  REQUIRE(wr.finish().has_value());

  auto f = w::decode_frame(buf.view(), lim);
  REQUIRE(f.has_value());
  auto r = f->items();
  for (std::uint32_t i = 0; i < lim.max_depth; ++i) {
    REQUIRE(r.begin_list().has_value());
    CHECK(r.read<std::int32_t>().value() == static_cast<std::int32_t>(i));
  }
  CHECK(r.depth() == lim.max_depth);
  for (std::uint32_t i = 0; i < lim.max_depth; ++i) {
    CHECK_FALSE(r.has_more());
    REQUIRE(r.end_list().has_value());
  }
  CHECK(r.read<bool>().value() == true);

  // One level more is refused by the encoder, and by a decoder with the same limit.
  w::out_buffer deep;
  w::frame_writer too_deep(deep, call_header(), lim);
  for (std::uint32_t i = 0; i <= lim.max_depth; ++i) too_deep.begin_list();
  for (std::uint32_t i = 0; i <= lim.max_depth; ++i) too_deep.end_list();
  CHECK(too_deep.finish().code() == w::errc::nesting_too_deep);
  CHECK(deep.empty());
}

TEST_CASE("wire codec: a type mismatch names both types and does not move the cursor") {
  w::out_buffer buf;
  w::frame_writer wr(buf, call_header());
  wr.add("hello").begin_list().add(std::int32_t{1}).add(std::int32_t{2}).end_list();
  REQUIRE(wr.finish().has_value());
  auto f = decode_one(buf);
  auto r = f.items();

  auto bad = r.read<std::int32_t>();
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.err().code == w::errc::type_mismatch);
  CHECK(bad.err().expected == w::item_type::int32);
  CHECK(bad.err().actual == w::item_type::string);
  CHECK(bad.err().error_code() == w::errc::type_mismatch);
  CHECK(bad.err().error_code().category().name() == std::string("courier.wire"));
  CHECK(bad.err().message().find("expected int32, found string") != std::string::npos);

  CHECK(r.peek() == w::item_type::string);
  CHECK(r.read<std::string_view>().value() == "hello");
  REQUIRE(r.begin_list().has_value());
  CHECK(r.read<std::int32_t>().value() == 1);
  // Leaving a list with an unread item is a mismatch that names it.
  auto early_end = r.end_list();
  CHECK(early_end.code() == w::errc::type_mismatch);
  CHECK(early_end.err().actual == w::item_type::int32);
  CHECK(r.read<std::int32_t>().value() == 2);
  // Reading past the end of a list.
  auto past = r.read<std::int32_t>();
  CHECK(past.code() == w::errc::no_more_items);
  CHECK(past.err().actual == w::item_type::list_end);
  REQUIRE(r.end_list().has_value());
  CHECK(r.read<bool>().code() == w::errc::no_more_items);
}

TEST_CASE("wire codec: try_read takes a scalar of its type and leaves anything else for read to name") {
  w::out_buffer buf;
  w::frame_writer wr(buf, call_header());
  wr.add(std::int32_t{-7}).add("x").add(true).add(2.5);
  REQUIRE(wr.finish().has_value());
  auto f = decode_one(buf);
  auto r = f.items();
  std::int32_t i = 0;
  CHECK(r.try_read(i));
  CHECK(i == -7);
  std::int32_t other = 99;
  CHECK_FALSE(r.try_read(other));  // a string: nothing read, the cursor stays
  CHECK(other == 99);
  CHECK(r.read<std::int32_t>().code() == w::errc::type_mismatch);
  CHECK(r.read<std::string_view>().value() == "x");
  bool b = false;
  CHECK(r.try_read(b));
  CHECK(b);
  double d = 0;
  CHECK_FALSE(r.try_read(i));  // a float64 is not an int32
  CHECK(r.try_read(d));
  CHECK(d == 2.5);
  CHECK_FALSE(r.try_read(d));  // the end
  CHECK(r.read<double>().code() == w::errc::no_more_items);
}

TEST_CASE("wire codec: result::value() on an error throws std::system_error with the error's description") {
  w::out_buffer buf;
  w::frame_writer wr(buf, call_header());
  wr.add("hello");
  REQUIRE(wr.finish().has_value());
  auto f = decode_one(buf);
  auto r = f.items();
  auto bad = r.read<std::int32_t>();
  REQUIRE_FALSE(bad.has_value());
  try {
    (void)bad.value();
    FAIL("value() did not throw");
  } catch (const std::system_error& e) {
    CHECK(e.code() == w::errc::type_mismatch);
    CHECK(e.code().category().name() == std::string("courier.wire"));
    CHECK(std::string(e.what()).find("expected int32, found string") != std::string::npos);
  }
  w::result<void> failed_void = w::errc::truncated;
  CHECK_THROWS_AS(failed_void.value(), std::system_error);
  // The reader's results stay as cheap as a pair of registers.
  static_assert(std::is_trivially_copyable_v<w::result<std::int32_t>>);
  static_assert(std::is_trivially_copyable_v<w::result<void>>);
  static_assert(std::is_nothrow_move_constructible_v<w::result<std::string_view>>);
  // A wire::error can be a value too when asked for explicitly (a codec that returns decoded errors).
  w::result<w::error> as_value{std::in_place, w::error{w::errc::bad_flags}};
  CHECK(as_value.has_value());
  CHECK(as_value->code == w::errc::bad_flags);
  w::result<w::error> as_error = courier::failure(w::errc::bad_flags);
  CHECK_FALSE(as_error.has_value());
  CHECK(as_error.code() == w::errc::bad_flags);
}

TEST_CASE("wire codec: skip steps over scalars, strings and whole lists") {
  w::out_buffer buf;
  w::frame_writer wr(buf, call_header());
  wr.add(std::uint64_t{5})
      .add("s")
      .begin_list()
      .begin_list()
      .add(1.5)
      .end_list()
      .add_binary({})
      .end_list()
      .add(std::int8_t{-3});
  REQUIRE(wr.finish().has_value());
  auto r = decode_one(buf).items();
  REQUIRE(r.skip().has_value());
  REQUIRE(r.skip().has_value());
  REQUIRE(r.skip().has_value());
  CHECK(r.read<std::int8_t>().value() == -3);
  CHECK(r.skip().code() == w::errc::no_more_items);
}

TEST_CASE("wire codec: many frames in one buffer, split at every byte boundary") {
  w::out_buffer buf;
  const int frames = 20;
  for (int i = 0; i < frames; ++i) {
    w::frame_writer wr(buf, call_header(static_cast<std::uint64_t>(i + 1)));
    wr.add(std::int32_t{i}).add(std::string(static_cast<std::size_t>(i * 7), 'a'));
    if (i % 3 == 0) wr.begin_list().add(false).end_list();
    REQUIRE(wr.finish().has_value());
  }
  const auto all = buf.view();

  auto drain = [&](w::decoder& d, std::vector<std::uint64_t>& seen) {
    for (;;) {
      auto f = d.next();
      if (!f) {
        REQUIRE(f.code() == w::errc::need_more);
        return;
      }
      auto r = f->items();
      REQUIRE(r.read<std::int32_t>().value() == static_cast<std::int32_t>(f->transaction_id() - 1));
      seen.push_back(f->transaction_id());
    }
  };

  SECTION("two chunks, every split point") {
    for (std::size_t split = 0; split <= all.size(); ++split) {
      w::decoder d;
      std::vector<std::uint64_t> seen;
      d.feed(all.first(split));
      drain(d, seen);
      d.feed(all.subspan(split));
      drain(d, seen);
      REQUIRE(seen.size() == static_cast<std::size_t>(frames));
      for (int i = 0; i < frames; ++i) CHECK(seen[static_cast<std::size_t>(i)] == static_cast<std::uint64_t>(i + 1));
      CHECK(d.finish().has_value());
    }
  }
  SECTION("one byte at a time, and in chunks of 3, 31, 64") {
    for (std::size_t step : {1u, 3u, 31u, 64u}) {
      w::decoder d;
      std::vector<std::uint64_t> seen;
      for (std::size_t at = 0; at < all.size(); at += step) {
        d.feed(all.subspan(at, std::min(step, all.size() - at)));
        drain(d, seen);
      }
      CHECK(seen.size() == static_cast<std::size_t>(frames));
      CHECK(d.finish().has_value());
    }
  }
  SECTION("all in one chunk: every frame is a view into the chunk") {
    w::decoder d;
    d.feed(all);
    int n = 0;
    while (auto f = d.next()) {
      CHECK(f->bytes().data() >= all.data());
      CHECK(f->bytes().data() + f->bytes().size() <= all.data() + all.size());
      ++n;
    }
    CHECK(n == frames);
    CHECK(d.buffered() == 0);
  }
  SECTION("a stream that ends inside a frame is truncated") {
    w::decoder d;
    std::vector<std::uint64_t> seen;
    d.feed(all.first(all.size() - 1));
    drain(d, seen);
    CHECK(seen.size() == static_cast<std::size_t>(frames - 1));
    CHECK(d.finish().code() == w::errc::truncated);
  }
}

TEST_CASE("wire codec: out_buffer keeps its capacity and allocates through its hooks") {
  struct counts {
    int allocs = 0;
    int frees = 0;
  } c;
  w::buffer_hooks hooks{[](std::size_t n, void* ctx) -> void* {
                          ++static_cast<counts*>(ctx)->allocs;
                          return ::operator new(n);
                        },
                        [](void* p, std::size_t, void* ctx) {
                          ++static_cast<counts*>(ctx)->frees;
                          ::operator delete(p);
                        },
                        &c};
  {
    w::out_buffer buf(hooks);
    for (int round = 0; round < 100; ++round) {
      buf.clear();
      for (int i = 0; i < 50; ++i) {
        w::frame_writer wr(buf, call_header());
        wr.add(std::int32_t{i});
        REQUIRE(wr.finish().has_value());
      }
    }
    CHECK(c.allocs > 0);
    CHECK(c.allocs < 10);  // grew a few times in round 0, never after
  }
  CHECK(c.frees == c.allocs);
}

TEST_CASE("wire codec: the encoder refuses what a decoder would reject, and rolls back") {
  w::out_buffer buf;
  {
    w::frame_writer ok(buf, call_header());
    ok.add(std::int32_t{1});
    REQUIRE(ok.finish().has_value());
  }
  const auto good_size = buf.size();

  auto expect_refused = [&](auto&& fill, w::errc code, w::limits lim = {}) {
    w::frame_writer wr(buf, call_header(), lim);
    fill(wr);
    CHECK(wr.finish().code() == code);
    CHECK(buf.size() == good_size);
  };
  expect_refused([](auto& wr) { wr.add(std::string_view("\xff")); }, w::errc::invalid_utf8);
  expect_refused([](auto& wr) { wr.begin_list(); }, w::errc::unterminated_list);
  expect_refused([](auto& wr) { wr.end_list(); }, w::errc::unbalanced_list_end);
  expect_refused([](auto& wr) { wr.add(1).add(2).add(3); }, w::errc::too_many_items, w::limits{1u << 24, 32, 2});
  expect_refused([](auto& wr) { wr.add(std::string(100, 'x')); }, w::errc::frame_too_large, w::limits{100, 32, 10});
  CHECK(w::decode_frame(buf.view()).has_value());
}

TEST_CASE("wire codec: handshake and version negotiation") {
  w::out_buffer buf;
  REQUIRE(w::encode_handshake(buf, {1, 1, 0b101, 1u << 20, "client-1"}).has_value());
  auto f = decode_one(buf);
  CHECK(f.kind() == w::kind::handshake);
  auto hs = w::decode_handshake(f);
  REQUIRE(hs.has_value());
  CHECK(hs->peer_name == "client-1");
  CHECK(hs->max_frame_size == (1u << 20));

  auto agreed = w::negotiate({1, 1, 0b110, 1u << 24, "server"}, *hs);
  REQUIRE(agreed.has_value());
  CHECK(agreed->version == 1);
  CHECK(agreed->capabilities == 0b100);
  CHECK(agreed->max_frame_size == (1u << 20));

  // A newer peer that still speaks version 1 agrees on 1; one that no longer does is refused.
  CHECK(w::negotiate({1, 1, 0, 1u << 24, "old"}, {1, 3, 0, 1u << 24, "new"})->version == 1);
  CHECK(w::negotiate({1, 1, 0, 1u << 24, "old"}, {2, 3, 0, 1u << 24, "new"}).code() == w::errc::unsupported_version);
  CHECK(w::negotiate({1, 1, 0, 1u << 24, "a"}, {1, 1, 0, 1024, "tiny"}).code() == w::errc::bad_handshake);

  w::out_buffer not_hs;
  w::frame_writer wr(not_hs, call_header());
  REQUIRE(wr.finish().has_value());
  CHECK(w::decode_handshake(decode_one(not_hs)).code() == w::errc::bad_handshake);
}

TEST_CASE("wire codec: error frames carry a code and a text") {
  w::out_buffer buf;
  REQUIRE(w::encode_error(buf, 42, 0, 1001, "no such service", token{"ADD_"}).has_value());
  auto f = decode_one(buf);
  CHECK(f.kind() == w::kind::error);
  CHECK(f.transaction_id() == 42);
  auto r = f.items();
  CHECK(r.read<std::uint32_t>().value() == 1001);
  CHECK(r.read<std::string_view>().value() == "no such service");
}

TEST_CASE("with_scalar_type gives the C++ type of each scalar tag, and nothing for the others") {
  using courier::wire::item_type;
  for (auto t :
       {item_type::boolean, item_type::int8, item_type::int16, item_type::int32, item_type::int64, item_type::uint8,
        item_type::uint16, item_type::uint32, item_type::uint64, item_type::float32, item_type::float64}) {
    item_type seen = item_type::none;
    CHECK(courier::wire::with_scalar_type(t, [&]<class T>() { seen = courier::wire::detail::tag_of<T>(); }));
    CHECK(seen == t);
  }
  for (auto t : {item_type::none, item_type::string, item_type::binary, item_type::list, item_type::list_end}) {
    bool called = false;
    CHECK_FALSE(courier::wire::with_scalar_type(t, [&]<class T>() { called = true; }));
    CHECK_FALSE(called);
  }
}
