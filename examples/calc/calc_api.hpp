// The calculator's interface: what a client includes. Each message names its 4-character token
// and its fields once; the token table and the wire encoding are built from that.
#pragma once

#include <courier/fields.hpp>
#include <courier/interface.hpp>
#include <courier/token.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace calc {

struct add {  // ADD_: a + b
  static constexpr courier::token token{"ADD_"};
  static constexpr std::string_view courier_description = "a + b";
  std::int32_t a = 0, b = 0;
  COURIER_FIELDS(a, b);
};

struct divide {  // DIV_: a / b; b == 0 is an ERROR (invalid_argument, "divide by zero")
  static constexpr courier::token token{"DIV_"};
  static constexpr std::string_view courier_description = "a / b; b == 0 is an ERROR (invalid_argument)";
  std::int32_t a = 0, b = 1;
  COURIER_FIELDS(a, b);
};

struct slow {  // SLOW: replies `value` after `delay_ms` (a client with a shorter time-out gives up)
  static constexpr courier::token token{"SLOW"};
  static constexpr std::string_view courier_description = "replies value after delay_ms";
  std::int32_t delay_ms = 0, value = 0;
  COURIER_FIELDS(delay_ms, value);
};

struct square {  // SQR_: x * x, answered by another actor (the server delegates)
  static constexpr courier::token token{"SQR_"};
  static constexpr std::string_view courier_description = "x * x, answered by another actor";
  std::int32_t x = 0;
  COURIER_FIELDS(x);
};

struct note {  // NOTE: one-way (END): the server counts notes
  static constexpr courier::token token{"NOTE"};
  static constexpr std::string_view courier_description = "one-way: the server counts notes";
  std::string text;
  COURIER_FIELDS(text);
};

struct notes_seen {  // NSEE: how many notes arrived so far
  static constexpr courier::token token{"NSEE"};
  static constexpr std::string_view courier_description = "how many notes arrived so far";
  COURIER_FIELDS();
};

using api = courier::interface<std::int32_t(add), std::int32_t(divide), std::int32_t(slow), std::int32_t(square),
                               void(note), std::int32_t(notes_seen)>;

}  // namespace calc
