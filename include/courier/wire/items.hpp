#pragma once
/// @file
/// Which C++ scalar types map to which item tag (the `scalar` concept and tag_of<T>()), shared by the
/// encoder, the reader and the message codec, and the UTF-8 check strings go through. Implementation
/// detail of the codec (namespace wire::detail), public only because the public headers use it. Part of the
/// wire codec (courier/wire.hpp).
///
/// Thread-safety: compile-time mappings and pure functions; safe anywhere.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "courier/wire/error.hpp"

// Which C++ scalar types map to which item tag; shared by the encoder, the reader and the message codec.
namespace courier::wire::detail {

template <class T>
inline constexpr bool is_char_v = std::is_same_v<T, char> || std::is_same_v<T, wchar_t> || std::is_same_v<T, char8_t> ||
                                  std::is_same_v<T, char16_t> || std::is_same_v<T, char32_t>;

/// A type that is one fixed-size item: bool, the exact-width integers, float, double. Character types are
/// left out on purpose: whether a `char` is a number or a letter is the caller's call, not ours.
template <class T>
concept scalar = std::is_same_v<T, bool> || std::is_same_v<T, float> || std::is_same_v<T, double> ||
    (std::is_integral_v<T> && !is_char_v<T> && sizeof(T) <= 8);

template <scalar T>
consteval item_type tag_of() {
  if constexpr (std::is_same_v<T, bool>) {
    return item_type::boolean;
  } else if constexpr (std::is_same_v<T, float>) {
    static_assert(sizeof(float) == 4);
    return item_type::float32;
  } else if constexpr (std::is_same_v<T, double>) {
    static_assert(sizeof(double) == 8);
    return item_type::float64;
  } else if constexpr (std::is_signed_v<T>) {
    return sizeof(T) == 1   ? item_type::int8
           : sizeof(T) == 2 ? item_type::int16
           : sizeof(T) == 4 ? item_type::int32
                            : item_type::int64;
  } else {
    return sizeof(T) == 1   ? item_type::uint8
           : sizeof(T) == 2 ? item_type::uint16
           : sizeof(T) == 4 ? item_type::uint32
                            : item_type::uint64;
  }
}

/// Bytes after the tag for a fixed-size item, 0 for the others (string, binary, list, list_end).
constexpr std::size_t fixed_size(item_type t) noexcept {
  switch (t) {
    case item_type::boolean:
    case item_type::int8:
    case item_type::uint8: return 1;
    case item_type::int16:
    case item_type::uint16: return 2;
    case item_type::int32:
    case item_type::uint32:
    case item_type::float32: return 4;
    case item_type::int64:
    case item_type::uint64:
    case item_type::float64: return 8;
    default: return 0;
  }
}

constexpr bool is_known_tag(std::uint8_t b) noexcept { return b >= 0x01 && b <= 0x0f; }

/// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
[[nodiscard]] bool is_valid_utf8(const char* s, std::size_t n) noexcept;

}  // namespace courier::wire::detail

namespace courier::wire {

/// The other way round from tag_of: calls `f.template operator()<T>()` with the C++ scalar type of
/// a scalar tag (bool, std::int8_t..std::uint64_t, float, double), for code that handles items it
/// learns the types of at run time (a generic client, a service that echoes what it is given).
/// Returns false, calling nothing, for a tag that is not a scalar (string, binary, list, end, none).
template <class F>
constexpr bool with_scalar_type(item_type t, F&& f) {
  switch (t) {
    case item_type::boolean: f.template operator()<bool>(); return true;
    case item_type::int8: f.template operator()<std::int8_t>(); return true;
    case item_type::int16: f.template operator()<std::int16_t>(); return true;
    case item_type::int32: f.template operator()<std::int32_t>(); return true;
    case item_type::int64: f.template operator()<std::int64_t>(); return true;
    case item_type::uint8: f.template operator()<std::uint8_t>(); return true;
    case item_type::uint16: f.template operator()<std::uint16_t>(); return true;
    case item_type::uint32: f.template operator()<std::uint32_t>(); return true;
    case item_type::uint64: f.template operator()<std::uint64_t>(); return true;
    case item_type::float32: f.template operator()<float>(); return true;
    case item_type::float64: f.template operator()<double>(); return true;
    default: return false;
  }
}

}  // namespace courier::wire
