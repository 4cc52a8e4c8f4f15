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

TEST_CASE("token: from text known at run time, checked") {
  const std::string from_a_command_line = "ADD_";
  const char* as_c_string = from_a_command_line.c_str();
  CHECK(token(as_c_string) == token{"ADD_"});
  CHECK(token(from_a_command_line) == token{"ADD_"});
  CHECK_THROWS_AS(token(std::string("ADD")), std::invalid_argument);
  CHECK_THROWS_WITH(token(std::string_view("ADDER")), Catch::Contains("four characters") && Catch::Contains("ADDER"));

  static_assert(token::parse("PING") == token{"PING"});
  CHECK(token::parse(from_a_command_line) == token{"ADD_"});
  CHECK_FALSE(token::parse(""));
  CHECK_FALSE(token::parse("TOOLONG"));
}
