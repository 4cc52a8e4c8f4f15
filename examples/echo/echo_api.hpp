// The echo interface: one message carrying every item type of the protocol, echoed back.
#pragma once

#include <courier/fields.hpp>
#include <courier/interface.hpp>
#include <courier/token.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace echo {

struct point {  // a nested struct travels as a list of its fields
  double x = 0, y = 0;
  COURIER_FIELDS(x, y);
  friend bool operator==(const point&, const point&) = default;
};

struct everything {
  static constexpr courier::token token{"ECHO"};
  bool flag = false;
  std::int8_t i8 = 0;
  std::int16_t i16 = 0;
  std::int32_t i32 = 0;
  std::int64_t i64 = 0;
  std::uint8_t u8 = 0;
  std::uint16_t u16 = 0;
  std::uint32_t u32 = 0;
  std::uint64_t u64 = 0;
  float f32 = 0;
  double f64 = 0;
  std::string text;
  std::vector<std::byte> blob;
  std::vector<std::int32_t> numbers;
  point where;
  std::vector<point> path;

  static constexpr std::string_view courier_description = "echoes every item type of the protocol back";
  COURIER_FIELDS(flag, i8, i16, i32, i64, u8, u16, u32, u64, f32, f64, text, blob, numbers, where, path);
  friend bool operator==(const everything&, const everything&) = default;
};

using api = courier::interface<everything(everything)>;

}  // namespace echo
