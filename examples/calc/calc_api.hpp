// The calculator's interface: what a client includes. Each message names its 4-character token
// and its fields once; the token table and the wire encoding are built from that.
#pragma once

#include <courier/interface.hpp>
#include <courier/token.hpp>

#include <cstdint>
#include <string>
#include <tuple>

namespace calc {

struct add {  // ADD_: a + b
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0, b = 0;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};

struct divide {  // DIV_: a / b; b == 0 is an ERROR (invalid_argument, "divide by zero")
  static constexpr courier::token token{"DIV_"};
  std::int32_t a = 0, b = 1;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};

struct slow {  // SLOW: replies `value` after `delay_ms` (a client with a shorter time-out gives up)
  static constexpr courier::token token{"SLOW"};
  std::int32_t delay_ms = 0, value = 0;
  auto fields() { return std::tie(delay_ms, value); }
  auto fields() const { return std::tie(delay_ms, value); }
};

struct square {  // SQR_: x * x, answered by another actor (the server delegates)
  static constexpr courier::token token{"SQR_"};
  std::int32_t x = 0;
  auto fields() { return std::tie(x); }
  auto fields() const { return std::tie(x); }
};

struct note {  // NOTE: one-way (END): the server counts notes
  static constexpr courier::token token{"NOTE"};
  std::string text;
  auto fields() { return std::tie(text); }
  auto fields() const { return std::tie(text); }
};

struct notes_seen {  // NSEE: how many notes arrived so far
  static constexpr courier::token token{"NSEE"};
  auto fields() { return std::tie(); }
  auto fields() const { return std::tie(); }
};

using api = courier::interface<std::int32_t(add), std::int32_t(divide), std::int32_t(slow), std::int32_t(square),
                               void(note), std::int32_t(notes_seen)>;

}  // namespace calc
