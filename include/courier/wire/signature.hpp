#pragma once
/// @file
/// A service's signature in the text form of docs/protocol.md (section 7, "Typed messages"; the
/// grammar is in section 15), derived from its C++ types: what service reflection reports, so that
/// a generic client (courier-call) can build a call from text and a reader knows what a server
/// takes. Part of the wire codec (courier/wire.hpp).
///
///     struct move {
///       static constexpr courier::token token{"MOVE"};
///       point to;
///       std::int32_t steps;
///       COURIER_FIELDS(to, steps);   // courier/fields.hpp: fields(), and the names reported
///     };
///     arguments_signature<move>()   -> "(record(float64 x, float64 y) to, int32 steps)"
///     result_signature<point>()     -> "(float64 x, float64 y)"  (a record result is spread)
///
/// A struct that writes fields() by hand has no names: its fields are reported by type alone.
/// An optional `static constexpr std::string_view courier_description` is the service's one-line
/// description.
///
/// Thread-safety: free functions; safe anywhere.

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "courier/fields.hpp"
#include "courier/result.hpp"
#include "courier/wire/items.hpp"
#include "courier/wire/message.hpp"

namespace courier::wire {

namespace detail {

template <class T>
concept named_fields = requires {
  { T::courier_field_names } -> std::convertible_to<std::string_view>;
};

/// The names of COURIER_FIELDS, split at the commas.
inline std::vector<std::string_view> split_names(std::string_view list) {
  std::vector<std::string_view> names;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    std::string_view name = list.substr(0, comma);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    names.push_back(name);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return names;
}

template <class T>
std::string type_name();

template <class T>
std::string field_list() {
  using fields_t = decltype(std::declval<const T&>().fields());
  std::vector<std::string_view> names;
  if constexpr (named_fields<T>) names = split_names(T::courier_field_names);
  std::string out = "(";
  const auto field = [&](std::size_t i, const std::string& type) {
    if (i != 0) out.append(", ");
    out.append(type);
    if (i < names.size() && !names[i].empty()) out.append(" ").append(names[i]);
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (field(I, type_name<std::remove_cvref_t<std::tuple_element_t<I, fields_t>>>()), ...);
  }
  (std::make_index_sequence<std::tuple_size_v<fields_t>>{});
  out.append(")");
  return out;
}

template <class T>
std::string type_name() {
  if constexpr (std::is_enum_v<T>) {
    return type_name<std::underlying_type_t<T>>();
  } else if constexpr (scalar<T>) {
    return to_string(tag_of<T>());
  } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::string_view> ||
                       std::is_same_v<T, string_ref>) {
    return "string";
  } else if constexpr (std::is_same_v<T, std::vector<std::byte>> || std::is_same_v<T, std::span<const std::byte>> ||
                       std::is_same_v<T, bytes_ref>) {
    return "binary";
  } else if constexpr (is_vector<T>::value) {
    std::string s = "list of ";
    s.append(type_name<typename T::value_type>());
    return s;
  } else if constexpr (is_array<T>::value) {
    std::string s = "list of ";
    s.append(std::to_string(std::tuple_size_v<T>)).append(" ").append(type_name<typename T::value_type>());
    return s;
  } else if constexpr (has_fields<T>) {
    std::string s = "record";
    s.append(field_list<T>());
    return s;
  } else {
    static_assert(always_false<T>, "courier::wire: this field type has no wire mapping (see courier/wire/message.hpp)");
  }
}

template <class T>
concept described = requires {
  { T::courier_description } -> std::convertible_to<std::string_view>;
};

}  // namespace detail

/// The arguments of a message (its fields, each a top-level item): "(int32 a, int32 b)".
template <class M>
requires has_fields<M> std::string arguments_signature() { return detail::field_list<M>(); }

/// The result a reply of type R carries: "()" for nothing (courier::unit), the fields of a record
/// result spread ("(float64 x, float64 y)"), any other type by name ("int64", "list of string").
template <class R>
std::string result_signature() {
  if constexpr (std::is_same_v<R, courier::unit>) {
    return "()";
  } else if constexpr (has_fields<R>) {
    return detail::field_list<R>();
  } else {
    return detail::type_name<R>();
  }
}

/// The message's one-line description (`courier_description`), or nothing.
template <class M>
std::string_view description_of() {
  if constexpr (detail::described<M>) {
    return M::courier_description;
  } else {
    return {};
  }
}

}  // namespace courier::wire
