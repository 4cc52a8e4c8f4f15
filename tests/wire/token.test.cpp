#include "courier/token.hpp"

#include <sstream>

#include <catch2/catch.hpp>

using courier::token;

TEST_CASE("token: built at compile time, compared, printed") {
  static constexpr token add{"ADD_"};
  static_assert(add.view() == "ADD_");
  static_assert(add == token{"ADD_"});
  static_assert(add != token{"GET_"});
  static_assert(token{"ABCD"} < token{"ABCE"});
  static_assert(add.is_printable());
  static_assert(token{}.is_null());

  std::ostringstream os;
  os << add;
  CHECK(os.str() == "ADD_");
}

TEST_CASE("token: its u32 value is the four bytes little-endian") {
  static_assert(token{"ABCD"}.to_u32() == 0x44434241u);
  static_assert(token::from_u32(0x44434241u) == token{"ABCD"});
  CHECK(token::from_u32(token{"PING"}.to_u32()) == token{"PING"});
}

TEST_CASE("token: unprintable bytes print as escapes") {
  std::ostringstream os;
  os << token::from_chars('A', '\0', '\n', 'Z');
  CHECK(os.str() == "A\\x00\\x0aZ");
  CHECK_FALSE(token::from_chars('A', '\0', '\n', 'Z').is_printable());
}
