#pragma once
/// @file
/// Flat type-list helpers (no recursion deeper than one fold), so an actor with fifty handlers
/// still compiles quickly.

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace courier::detail {

template <class... Ts>
struct type_list {};

/// Position of T in Ts..., or sizeof...(Ts) when absent.
template <class T, class... Ts>
constexpr std::size_t index_of() {
  constexpr bool matches[] = {std::is_same_v<T, Ts>..., false};
  for (std::size_t i = 0; i < sizeof...(Ts); ++i)
    if (matches[i]) return i;
  return sizeof...(Ts);
}

template <class... Ts>
constexpr bool all_distinct() {
  std::size_t i = 0;
  return ((index_of<Ts, Ts...>() == i++) && ...);
}

template <std::size_t I, class... Ts>
using nth_type = std::tuple_element_t<I, std::tuple<Ts...>>;

}  // namespace courier::detail
