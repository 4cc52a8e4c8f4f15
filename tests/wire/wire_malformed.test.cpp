#include "courier/wire.hpp"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

// Every malformed input gives its own error, from decode_frame() and from the incremental decoder alike.
namespace w = courier::wire;
using courier::token;

namespace {

using bytes = std::vector<std::byte>;

bytes header(w::kind k = w::kind::call, std::uint32_t body_length = 0, token tok = token{"ADD_"}) {
  w::out_buffer buf;
  w::frame_writer wr(buf, w::frame_header{1, k, 0, 0, tok, 1, 0});
  (void)wr.finish();
  bytes b(buf.data(), buf.data() + buf.size());
  w::detail::store_le<std::uint32_t>(b.data() + w::offset::body_length, body_length);
  return b;
}

// A frame with this raw body; the header's length matches it.
bytes frame(std::initializer_list<int> body, w::kind k = w::kind::call) {
  bytes b = header(k, static_cast<std::uint32_t>(body.size()));
  for (int x : body) b.push_back(static_cast<std::byte>(x));
  return b;
}

w::error decode_error(const bytes& b, const w::limits& lim = {}) {
  auto f = w::decode_frame(b, lim);
  REQUIRE_FALSE(f.has_value());
  // The incremental decoder, fed byte by byte, must reach the same verdict.
  w::decoder d(lim);
  w::errc streamed = w::errc::need_more;
  for (std::size_t i = 0; i < b.size() && streamed == w::errc::need_more; ++i) {
    d.feed(std::span<const std::byte>(b).subspan(i, 1));
    streamed = d.next().code();
  }
  if (streamed == w::errc::need_more) streamed = d.finish().code();
  CHECK(streamed == f.err().code);
  return f.err();
}

}  // namespace

TEST_CASE("malformed: truncated headers and bodies") {
  bytes b = frame({0x04, 1, 0, 0, 0});
  for (std::size_t n = 0; n < b.size(); ++n) {
    CAPTURE(n);
    CHECK(w::decode_frame(std::span<const std::byte>(b).first(n)).code() == w::errc::truncated);
  }
  CHECK(w::decode_frame(b).has_value());
}

TEST_CASE("malformed: wrong magic, detected from the first byte") {
  bytes b = frame({});
  b[2] = std::byte{'X'};
  CHECK(decode_error(b).code == w::errc::bad_magic);
  w::decoder d;
  const char http[] = "GE";
  d.feed(std::as_bytes(std::span(http, 2)));
  CHECK(d.next().code() == w::errc::bad_magic);
  CHECK(d.next().code() == w::errc::bad_magic);  // fatal: sticky
}

TEST_CASE("malformed: wrong version and header length") {
  bytes b = frame({});
  b[w::offset::version] = std::byte{2};
  CHECK(decode_error(b).code == w::errc::unsupported_version);
  b[w::offset::version] = std::byte{0};
  CHECK(decode_error(b).code == w::errc::unsupported_version);
  b = frame({});
  b[w::offset::header_length] = std::byte{40};
  CHECK(decode_error(b).code == w::errc::bad_header_length);
}

TEST_CASE("malformed: lengths past the limit are refused before any allocation") {
  w::limits lim;
  lim.max_frame_size = 1024;
  bytes b = header(w::kind::call, 1024 - 32 + 1);
  CHECK(decode_error(b, lim).code == w::errc::frame_too_large);
  b = header(w::kind::call, 0xffffffffu);
  CHECK(decode_error(b).code == w::errc::frame_too_large);  // no 32-bit wrap-around
  w::decoder d(lim);
  d.feed(b);
  CHECK(d.next().code() == w::errc::frame_too_large);
  CHECK(d.buffered() == 0);
}

TEST_CASE("malformed: frame length larger than the data") {
  bytes b = frame({0x04, 1, 0, 0, 0});
  w::detail::store_le<std::uint32_t>(b.data() + w::offset::body_length, 6);
  CHECK(decode_error(b).code == w::errc::truncated);
}

TEST_CASE("malformed: unknown kinds, reserved flags, bad tokens") {
  bytes b = frame({});
  b[w::offset::kind] = std::byte{0};
  CHECK(decode_error(b).code == w::errc::unknown_kind);
  b[w::offset::kind] = std::byte{11};
  CHECK(decode_error(b).code == w::errc::unknown_kind);
  b = frame({});
  b[w::offset::flags] = std::byte{0x80};
  CHECK(decode_error(b).code == w::errc::bad_flags);
  b = frame({});
  b[w::offset::token + 1] = std::byte{0x07};
  CHECK(decode_error(b).code == w::errc::bad_token);
  b = header(w::kind::send, 0, token{});
  CHECK(decode_error(b).code == w::errc::bad_token);
  // Control frames carry no token, so zero bytes are fine there.
  CHECK(w::decode_frame(header(w::kind::ping, 0, token{})).has_value());
}

TEST_CASE("malformed: item errors") {
  CHECK(decode_error(frame({0x00})).code == w::errc::unknown_type_tag);
  auto unknown = decode_error(frame({0x04, 1, 0, 0, 0, 0x10}));
  CHECK(unknown.code == w::errc::unknown_type_tag);
  CHECK(static_cast<int>(unknown.actual) == 0x10);
  CHECK(unknown.offset == 5);
  CHECK(decode_error(frame({0x04, 1, 0, 0})).code == w::errc::length_past_end);
  CHECK(decode_error(frame({0x05, 1})).code == w::errc::length_past_end);
  CHECK(decode_error(frame({0x0c, 5, 0, 0, 0, 'a', 'b'})).code == w::errc::length_past_end);
  CHECK(decode_error(frame({0x0d, 0xff, 0xff, 0xff, 0xff})).code == w::errc::length_past_end);
  CHECK(decode_error(frame({0x0c, 2, 0})).code == w::errc::length_past_end);
  CHECK(decode_error(frame({0x01, 2})).code == w::errc::invalid_bool);
  CHECK(decode_error(frame({0x01})).code == w::errc::length_past_end);
}

TEST_CASE("malformed: invalid UTF-8 in strings, but not in binaries") {
  const std::vector<std::vector<int>> invalid = {
      {0x80},                                          // lone continuation byte
      {0xc0, 0xaf},                                    // overlong '/'
      {0xe0, 0x80, 0xaf},                              // overlong, 3 bytes
      {0xed, 0xa0, 0x80},                              // surrogate U+D800
      {0xf4, 0x90, 0x80, 0x80},                        // above U+10FFFF
      {0xf5, 0x80, 0x80, 0x80},                        // invalid lead byte
      {0xe2, 0x82},                                    // cut short
      {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 0xff},  // after an ASCII run of eight
  };
  for (const auto& s : invalid) {
    std::vector<int> body = {0x0c, static_cast<int>(s.size()), 0, 0, 0};
    body.insert(body.end(), s.begin(), s.end());
    bytes b = header(w::kind::call, static_cast<std::uint32_t>(body.size()));
    for (int x : body) b.push_back(static_cast<std::byte>(x));
    CHECK(decode_error(b).code == w::errc::invalid_utf8);
    b[w::header_size] = std::byte{0x0d};  // the same bytes as binary are fine
    CHECK(w::decode_frame(b).has_value());
  }
  CHECK(w::decode_frame(frame({0x0c, 4, 0, 0, 0, 0xf0, 0x9f, 0x98, 0x80})).has_value());
}

TEST_CASE("malformed: lists that never close, close too often, nest too deep") {
  CHECK(decode_error(frame({0x0e, 0x0e, 0x0f})).code == w::errc::unterminated_list);
  CHECK(decode_error(frame({0x0e, 0x0f, 0x0f})).code == w::errc::unbalanced_list_end);
  w::limits lim;
  lim.max_depth = 4;
  CHECK(w::decode_frame(frame({0x0e, 0x0e, 0x0e, 0x0e, 0x0f, 0x0f, 0x0f, 0x0f}), lim).has_value());
  CHECK(decode_error(frame({0x0e, 0x0e, 0x0e, 0x0e, 0x0e, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f}), lim).code ==
        w::errc::nesting_too_deep);
  // The default limit, with a body of nothing but list openings.
  bytes deep = header(w::kind::call, 100000);
  deep.resize(deep.size() + 100000, std::byte{0x0e});
  CHECK(decode_error(deep).code == w::errc::nesting_too_deep);
}

TEST_CASE("malformed: too many items") {
  w::limits lim;
  lim.max_items = 3;
  CHECK(w::decode_frame(frame({0x02, 1, 0x0e, 0x02, 2, 0x0f}), lim).has_value());  // list ends do not count
  CHECK(decode_error(frame({0x02, 1, 0x02, 2, 0x02, 3, 0x02, 4}), lim).code == w::errc::too_many_items);
}

TEST_CASE("malformed: after a frame error the decoder goes on with the next frame") {
  bytes stream = frame({0x04, 1, 0, 0, 0});
  bytes bad = frame({0x01, 7});
  w::detail::store_le<std::uint64_t>(bad.data() + w::offset::transaction_id, 99);
  bytes good = frame({0x04, 2, 0, 0, 0});
  stream.insert(stream.end(), bad.begin(), bad.end());
  stream.insert(stream.end(), good.begin(), good.end());

  w::decoder d;
  d.feed(stream);
  CHECK(d.next()->items().read<std::int32_t>().value() == 1);
  auto e = d.next();
  CHECK(e.code() == w::errc::invalid_bool);
  CHECK_FALSE(w::is_fatal(e.code()));
  CHECK(d.last_header().transaction_id == 99);  // so the receiver can answer that call with ERROR
  CHECK(d.next()->items().read<std::int32_t>().value() == 2);
  CHECK(d.next().code() == w::errc::need_more);
}

namespace {
struct add {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0;
  std::int32_t b = 0;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};
}  // namespace

TEST_CASE("malformed: typed messages from the wrong frame") {
  add m;
  CHECK(w::decode(*w::decode_frame(frame({0x04, 1, 0, 0, 0})), m).code() == w::errc::no_more_items);
  CHECK(w::decode(*w::decode_frame(frame({0x04, 1, 0, 0, 0, 0x03, 1, 0})), m).code() == w::errc::type_mismatch);
  CHECK(w::decode(*w::decode_frame(frame({0x04, 1, 0, 0, 0, 0x04, 1, 0, 0, 0, 0x01, 0})), m).code() ==
        w::errc::trailing_items);
  bytes other = header(w::kind::call, 0, token{"SUB_"});
  CHECK(w::decode(*w::decode_frame(other), m).code() == w::errc::token_mismatch);
}
