#include "courier/wire.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "wire/frame_text.hpp"

// The golden vectors (tests/vectors/README.md), checked both ways: bytes -> text through the decoder and
// the printer, text -> bytes through the encoder; and through the incremental decoder at every split.
namespace w = courier::wire;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<fs::path> vectors() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(COURIER_VECTORS_DIR))
    if (e.path().extension() == ".hex") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("vectors: there are good and malformed ones") {
  const auto all = vectors();
  const auto bad = std::count_if(all.begin(), all.end(), [](const fs::path& p) {
    return slurp(fs::path(p).replace_extension(".txt")).starts_with("error ");
  });
  CHECK(all.size() - static_cast<std::size_t>(bad) >= 9);
  CHECK(bad >= 15);
}

TEST_CASE("vectors: bytes decode to their meaning, and the meaning encodes to the bytes") {
  for (const auto& hex : vectors()) {
    CAPTURE(hex.filename().string());
    const auto bytes = w::test::parse_hex(slurp(hex));
    const std::string meaning = slurp(fs::path(hex).replace_extension(".txt"));
    REQUIRE_FALSE(meaning.empty());
    CHECK(w::to_text(bytes) == meaning);

    w::decoder whole;
    whole.feed(bytes);
    std::string streamed;
    for (;;) {
      auto f = whole.next();
      if (!f) {
        if (f.code() == w::errc::need_more) {
          if (auto end = whole.finish(); !end) streamed += std::string("error ") + w::to_string(end.code()) + "\n";
        } else {
          streamed += std::string("error ") + w::to_string(f.code()) + "\n";
        }
        break;
      }
      streamed += w::to_text(*f);
    }
    CHECK(streamed == meaning);

    if (meaning.starts_with("error ")) continue;
    w::out_buffer out;
    w::test::encode_text(out, meaning);
    CHECK(std::equal(out.view().begin(), out.view().end(), bytes.begin(), bytes.end()));

    for (std::size_t split = 0; split <= bytes.size(); ++split) {
      w::decoder d;
      std::string text;
      for (auto part :
           {std::span<const std::byte>(bytes).first(split), std::span<const std::byte>(bytes).subspan(split)}) {
        d.feed(part);
        while (auto f = d.next()) text += w::to_text(*f);
      }
      REQUIRE(text == meaning);
    }
  }
}

namespace {
// The service of the call_add vectors: ADD_(int32 a, int32 b, int32 c, int32 d, int32 e).
struct add_five {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0, b = 0, c = 0, d = 0, e = 0;
  auto fields() { return std::tie(a, b, c, d, e); }
  auto fields() const { return std::tie(a, b, c, d, e); }
};

w::result<add_five> read_add(const char* vector) {
  const auto bytes = w::test::parse_hex(slurp(fs::path(COURIER_VECTORS_DIR) / vector));
  auto f = w::decode_frame(bytes);
  REQUIRE(f);
  return w::decode<add_five>(*f);
}
}  // namespace

TEST_CASE("vectors: read against their definition, ADD_ fits call_add and not call_add_trailing_items") {
  auto fits = read_add("call_add.hex");
  REQUIRE(fits);
  CHECK(fits->e == 5);
  auto extra = read_add("call_add_trailing_items.hex");
  REQUIRE_FALSE(extra);
  CHECK(extra.code() == w::errc::trailing_items);
  CHECK(extra.err().left_over == 2);
  CHECK(extra.err().message() == "2 items left over after the last field, the first a float64 (offset 25)");
}
