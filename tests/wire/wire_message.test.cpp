#include "courier/wire.hpp"

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace w = courier::wire;
using courier::token;

namespace {

enum class color : std::uint8_t { red = 1, green = 2 };

struct point {
  double x = 0;
  double y = 0;
  auto fields() { return std::tie(x, y); }
  auto fields() const { return std::tie(x, y); }
  friend bool operator==(const point&, const point&) = default;
};

struct everything {
  static constexpr courier::token token{"EVRY"};
  bool flag = false;
  std::int8_t i8 = 0;
  std::int16_t i16 = 0;
  std::int32_t i32 = 0;
  std::int64_t i64 = 0;
  long long ll = 0;
  std::uint8_t u8 = 0;
  std::uint16_t u16 = 0;
  std::uint32_t u32 = 0;
  std::uint64_t u64 = 0;
  float f = 0;
  double d = 0;
  std::string name;
  std::vector<std::byte> blob;
  std::vector<std::int32_t> numbers;
  std::vector<std::vector<std::string>> nested;
  std::array<std::uint16_t, 3> triple{};
  point where;
  std::vector<point> path;
  color c = color::red;

  auto fields() {
    return std::tie(flag, i8, i16, i32, i64, ll, u8, u16, u32, u64, f, d, name, blob, numbers, nested, triple, where,
                    path, c);
  }
  auto fields() const {
    return std::tie(flag, i8, i16, i32, i64, ll, u8, u16, u32, u64, f, d, name, blob, numbers, nested, triple, where,
                    path, c);
  }
  friend bool operator==(const everything&, const everything&) = default;
};

struct add {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0;
  std::int32_t b = 0;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};

struct greet {
  static constexpr courier::token token{"GRET"};
  std::string_view who;
  std::span<const std::byte> payload;
  auto fields() { return std::tie(who, payload); }
  auto fields() const { return std::tie(who, payload); }
};

static_assert(w::message<add>);
static_assert(w::message<everything>);
static_assert(!w::message<point>);  // no token: a field type, not a message

}  // namespace

TEST_CASE("message: a struct with token and fields() round-trips with no code of its own") {
  everything m;
  m.flag = true;
  m.i8 = -128;
  m.i16 = 32767;
  m.i32 = -5;
  m.i64 = INT64_MIN;
  m.ll = 77;
  m.u8 = 255;
  m.u16 = 65535;
  m.u32 = 4000000000u;
  m.u64 = UINT64_MAX;
  m.f = 1.25f;
  m.d = -2.5e300;
  m.name = "n\xc3\xa4me";
  m.blob = {std::byte{0}, std::byte{0xff}};
  m.numbers = {1, 2, 3};
  m.nested = {{"a", "b"}, {}, {"c"}};
  m.triple = {7, 8, 9};
  m.where = {1.5, -1.5};
  m.path = {{0, 0}, {3, 4}};
  m.c = color::green;

  w::out_buffer buf;
  auto size = w::encode(buf, m, {w::kind::call, 11, 2});
  REQUIRE(size.has_value());
  auto f = w::decode_frame(buf.view());
  REQUIRE(f.has_value());
  CHECK(f->token() == token{"EVRY"});
  CHECK(f->kind() == w::kind::call);
  CHECK(f->transaction_id() == 11);
  CHECK(f->context_id() == 2);
  auto back = w::decode<everything>(*f);
  REQUIRE(back.has_value());
  CHECK(*back == m);

  // Field types map to the documented item tags.
  auto r = f->items();
  CHECK(r.peek() == w::item_type::boolean);
  for (int i = 0; i < 5; ++i) REQUIRE(r.skip().has_value());
  CHECK(r.peek() == w::item_type::int64);  // long long, by size
}

TEST_CASE("message: string_view and span fields decode as views into the frame") {
  const std::byte raw[] = {std::byte{1}, std::byte{2}};
  w::out_buffer buf;
  REQUIRE(w::encode(buf, greet{"world", raw}).has_value());
  auto f = w::decode_frame(buf.view());
  auto g = w::decode<greet>(*f);
  REQUIRE(g.has_value());
  CHECK(g->who == "world");
  CHECK(g->who.data() > reinterpret_cast<const char*>(buf.data()));
  REQUIRE(g->payload.size() == 2);
  CHECK(g->payload[1] == std::byte{2});
}

namespace {
struct shared_note {
  static constexpr courier::token token{"SHRD"};
  w::string_ref text;
  std::vector<w::bytes_ref> parts;
  auto fields() { return std::tie(text, parts); }
  auto fields() const { return std::tie(text, parts); }
};
struct nested_view {
  std::vector<greet> inner;
  auto fields() { return std::tie(inner); }
  auto fields() const { return std::tie(inner); }
};
}  // namespace

static_assert(w::views_frame<greet>, "string_view and span fields view the frame");
static_assert(w::views_frame<nested_view>, "at any depth");
static_assert(!w::views_frame<shared_note>, "string_ref and bytes_ref keep their block instead");
static_assert(!w::views_frame<everything>);

TEST_CASE("message: string_ref and bytes_ref decoded with an owner view its block and share it") {
  const std::byte raw[] = {std::byte{7}, std::byte{8}, std::byte{9}};
  w::out_buffer buf;
  REQUIRE(w::encode(buf, shared_note{w::string_ref("hello"), {w::bytes_ref(raw), w::bytes_ref(raw)}}).has_value());
  // The frame in a shared block, as a connection reads it.
  w::block_ref block = w::block_ref::adopt(w::shared_block::make(buf.size()));
  std::memcpy(block->data(), buf.data(), buf.size());
  auto f = w::decode_frame({block->data(), buf.size()});
  REQUIRE(f.has_value());
  {
    shared_note n;
    REQUIRE(w::decode(*f, n, block.get()).has_value());
    CHECK(n.text.view() == "hello");
    CHECK(block->holds(n.text.data()));
    CHECK(n.text.owner().get() == block.get());
    REQUIRE(n.parts.size() == 2);
    CHECK(block->holds(n.parts[1].data()));
    CHECK(n.parts[1].view()[2] == std::byte{9});
    CHECK(block->use_count() == 4);  // ours, the text's, two parts'
    shared_note copy = n;            // a copy shares too
    CHECK(block->use_count() == 7);
  }
  CHECK(block->use_count() == 1);  // every field let go
}

TEST_CASE("message: string_ref decoded without an owner copies into a block of its own") {
  w::out_buffer buf;
  REQUIRE(w::encode(buf, shared_note{w::string_ref("copied"), {}}).has_value());
  auto f = w::decode_frame(buf.view());
  REQUIRE(f.has_value());
  auto n = w::decode<shared_note>(*f);
  REQUIRE(n.has_value());
  CHECK(n->text.view() == "copied");
  REQUIRE(n->text.owner());
  CHECK(n->text.owner()->holds(n->text.data()));
  CHECK(!(n->text.data() >= reinterpret_cast<const char*>(buf.data()) &&
          n->text.data() < reinterpret_cast<const char*>(buf.data()) + buf.size()));
  buf.clear();  // the frame's bytes may go: the copy stays
  CHECK(n->text.view() == "copied");
  CHECK(!w::string_ref("plain").owner());  // built from a view, it owns nothing
  CHECK(w::string_ref("a") == w::string_ref("a"));
  CHECK(w::string_ref("a") < w::string_ref("b"));
}

TEST_CASE("message: a string_ref is shared only from the block its bytes lie in") {
  w::out_buffer buf;
  REQUIRE(w::encode(buf, shared_note{w::string_ref("elsewhere"), {}}).has_value());
  auto f = w::decode_frame(buf.view());  // the frame is not in `other`
  REQUIRE(f.has_value());
  w::block_ref other = w::block_ref::adopt(w::shared_block::make(64));
  shared_note n;
  REQUIRE(w::decode(*f, n, other.get()).has_value());
  CHECK(n.text.view() == "elsewhere");
  CHECK(n.text.owner().get() != other.get());  // a copy of its own, not a view the wrong block keeps
  CHECK(other->use_count() == 1);
}

TEST_CASE("message: decoding into an existing message reuses it") {
  w::out_buffer buf;
  REQUIRE(w::encode(buf, add{3, 4}).has_value());
  add m;
  REQUIRE(w::decode(*w::decode_frame(buf.view()), m).has_value());
  CHECK(m.a == 3);
  CHECK(m.b == 4);
}

namespace {
struct arr {
  static constexpr courier::token token{"ARR_"};
  std::array<std::int32_t, 3> v{};
  auto fields() { return std::tie(v); }
  auto fields() const { return std::tie(v); }
};
struct vec {
  static constexpr courier::token token{"ARR_"};
  std::vector<std::int32_t> v;
  auto fields() { return std::tie(v); }
  auto fields() const { return std::tie(v); }
};
}  // namespace

TEST_CASE("message: a list shorter or longer than a std::array is refused, not a partial fill") {
  w::out_buffer buf;
  REQUIRE(w::encode(buf, vec{{1, 2}}).has_value());
  CHECK(w::decode<arr>(*w::decode_frame(buf.view())).code() == w::errc::no_more_items);
  buf.clear();
  REQUIRE(w::encode(buf, vec{{1, 2, 3, 4}}).has_value());
  CHECK(w::decode<arr>(*w::decode_frame(buf.view())).code() == w::errc::trailing_items);
}

namespace {

struct add_two {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0;
  std::int32_t b = 0;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};

struct segment {
  static constexpr courier::token token{"SEG_"};
  point from;
  std::array<std::int32_t, 2> tags{};
  auto fields() { return std::tie(from, tags); }
  auto fields() const { return std::tie(from, tags); }
};

// A call frame with `build` writing its items.
template <class Build>
w::out_buffer call_frame(courier::token tok, Build&& build) {
  w::out_buffer out;
  w::frame_writer fw(out, w::frame_header{1, w::kind::call, 0, 0, tok, 1, 0});
  build(fw);
  REQUIRE(fw.finish());
  return out;
}

}  // namespace

TEST_CASE("message: items after the last field are trailing_items, counted, whatever their type") {
  auto frame = call_frame(token("ADD_"), [](w::frame_writer& fw) {
    fw.add(std::int32_t{1}).add(std::int32_t{2}).add(2.5).begin_list().add(std::int32_t{3}).end_list();
  });
  add_two m;
  auto ok = w::decode(*w::decode_frame(frame.view()), m);
  REQUIRE_FALSE(ok);
  CHECK(ok.code() == w::errc::trailing_items);
  CHECK(ok.err().left_over == 2);
  CHECK(ok.err().actual == w::item_type::float64);
  CHECK(ok.err().offset == 10);
  CHECK(ok.err().message() == "2 items left over after the last field, the first a float64 (offset 10)");
}

TEST_CASE("message: items after the last field of a nested record or array are trailing_items too") {
  segment m;
  auto extra_in_record = call_frame(token("SEG_"), [](w::frame_writer& fw) {
    fw.begin_list().add(1.0).add(2.0).add(3.0).end_list();
    fw.begin_list().add(std::int32_t{1}).add(std::int32_t{2}).end_list();
  });
  auto ok = w::decode(*w::decode_frame(extra_in_record.view()), m);
  REQUIRE_FALSE(ok);
  CHECK(ok.code() == w::errc::trailing_items);
  CHECK(ok.err().left_over == 1);
  CHECK(ok.err().message() == "1 item left over after the last field, the first a float64 (offset 19)");

  auto extra_in_array = call_frame(token("SEG_"), [](w::frame_writer& fw) {
    fw.begin_list().add(1.0).add(2.0).end_list();
    fw.begin_list().add(std::int32_t{1}).add(std::int32_t{2}).add(std::int32_t{3}).end_list();
  });
  ok = w::decode(*w::decode_frame(extra_in_array.view()), m);
  REQUIRE_FALSE(ok);
  CHECK(ok.code() == w::errc::trailing_items);
  CHECK(ok.err().left_over == 1);
}
