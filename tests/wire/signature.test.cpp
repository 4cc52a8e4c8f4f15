// Signatures for service reflection, from C++ types (docs/protocol.md sections 7 and 15).
#include "courier/wire/signature.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "courier/fields.hpp"

namespace w = courier::wire;

namespace {

struct point {
  double x = 0, y = 0;
  COURIER_FIELDS(x, y);
};

enum class colour : std::uint8_t { red, green };

struct move {
  static constexpr courier::token token{"MOVE"};
  static constexpr std::string_view courier_description = "moves a point";
  point to;
  std::int32_t steps = 0;
  COURIER_FIELDS(to, steps);
};

struct everything {
  static constexpr courier::token token{"EVRY"};
  bool b = false;
  std::uint64_t u = 0;
  float f = 0;
  std::string s;
  std::vector<std::byte> bytes;
  std::vector<std::string> names;
  std::array<std::int16_t, 3> triple{};
  std::vector<point> path;
  colour c = colour::red;
  COURIER_FIELDS(b, u, f, s, bytes, names, triple, path, c);
};

struct unnamed {  // fields() by hand: reported by type alone
  static constexpr courier::token token{"UNNM"};
  std::int32_t a = 0;
  std::string b;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};

struct nothing {
  static constexpr courier::token token{"NONE"};
  COURIER_FIELDS();
};

}  // namespace

TEST_CASE("arguments: the fields as top-level items, named by COURIER_FIELDS; a nested struct is a record") {
  CHECK(w::arguments_signature<move>() == "(record(float64 x, float64 y) to, int32 steps)");
  CHECK(w::arguments_signature<everything>() ==
        "(bool b, uint64 u, float32 f, string s, binary bytes, list of string names, list of 3 int16 triple, "
        "list of record(float64 x, float64 y) path, uint8 c)");
  CHECK(w::arguments_signature<unnamed>() == "(int32, string)");
  CHECK(w::arguments_signature<nothing>() == "()");
}

TEST_CASE("results: nothing is (), a record is spread, any other type by name") {
  CHECK(w::result_signature<courier::unit>() == "()");
  CHECK(w::result_signature<point>() == "(float64 x, float64 y)");
  CHECK(w::result_signature<std::int64_t>() == "int64");
  CHECK(w::result_signature<std::vector<point>>() == "list of record(float64 x, float64 y)");
  CHECK(w::result_signature<colour>() == "uint8");
}

TEST_CASE("descriptions come from courier_description, or are empty") {
  CHECK(w::description_of<move>() == "moves a point");
  CHECK(w::description_of<unnamed>().empty());
}

TEST_CASE("COURIER_FIELDS gives the codec the same fields() as written by hand") {
  move m{{1.5, -2}, 7};
  const auto& cm = m;
  CHECK(std::get<0>(cm.fields()).x == 1.5);
  std::get<1>(m.fields()) = 9;
  CHECK(m.steps == 9);
  CHECK(move::courier_field_names == "to, steps");
}
