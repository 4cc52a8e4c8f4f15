#pragma once
/// @file
/// COURIER_FIELDS(a, b, ...): a message struct's fields, declared once. It defines fields() (mutable
/// and const), which the wire codec walks, and `courier_field_names`, the names as written, which
/// service reflection reports (courier/wire/signature.hpp):
///
///     struct add {
///       static constexpr courier::token token{"ADD_"};
///       std::int32_t a = 0, b = 0;
///       COURIER_FIELDS(a, b);
///     };
///
/// Thread-safety: declarations only.

#include <string_view>
#include <tuple>

#define COURIER_FIELDS(...)                             \
  auto fields() { return std::tie(__VA_ARGS__); }       \
  auto fields() const { return std::tie(__VA_ARGS__); } \
  static constexpr std::string_view courier_field_names { #__VA_ARGS__ }
