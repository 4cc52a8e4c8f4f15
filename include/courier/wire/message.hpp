#pragma once
/// @file
/// Typed messages: encode() and decode() for any struct with a `token` and `fields()`, mapped to items
/// field by field with no code of its own. Part of the wire codec (courier/wire.hpp).
///
/// Thread-safety: free function templates; safe anywhere on distinct buffers and messages.

#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "courier/token.hpp"
#include "courier/wire/decoder.hpp"
#include "courier/wire/encoder.hpp"
#include "courier/wire/shared_buffer.hpp"

// Typed messages: a struct with `static constexpr courier::token token` and `fields()` returning a tuple
// of references crosses the wire with no code of its own. Field types map to items as follows:
//   bool, intN_t, uintN_t (any integer type but the character types), float, double -> that scalar item
//   enums                                       -> their underlying integer
//   std::string, std::string_view, string_ref   -> string (a decoded string_view views the frame; a
//                                                 string_ref views the receive buffer and keeps it alive)
//   std::vector<std::byte>, std::span<const std::byte>, bytes_ref -> binary (likewise)
//   std::vector<T>, std::array<T, N>            -> list of T
//   a struct with fields() (token not needed)   -> list of its fields
namespace courier::wire {

/// A struct whose fields() can be walked, mutable and const.
template <class T>
concept has_fields = requires(T& t, const T& ct) {
  t.fields();
  ct.fields();
};

/// A message that may cross the wire.
template <class M>
concept message = has_fields<M> && requires {
  { M::token } -> std::convertible_to<courier::token>;
};

/// How a message frame is addressed.
struct route {
  wire::kind kind = kind::send;
  std::uint64_t transaction_id = 0;
  std::uint64_t context_id = 0;
};

namespace detail {

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_array : std::false_type {};
template <class T, std::size_t N>
struct is_array<std::array<T, N>> : std::true_type {};

template <class T>
inline constexpr bool always_false = false;

template <class T>
void write_value(frame_writer& w, const T& v) {
  if constexpr (std::is_enum_v<T>) {
    w.add(static_cast<std::underlying_type_t<T>>(v));
  } else if constexpr (scalar<T>) {
    w.add(v);
  } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::string_view> ||
                       std::is_same_v<T, string_ref>) {
    w.add(std::string_view(v));
  } else if constexpr (std::is_same_v<T, std::vector<std::byte>> || std::is_same_v<T, std::span<const std::byte>> ||
                       std::is_same_v<T, bytes_ref>) {
    w.add_binary(std::span<const std::byte>(v));
  } else if constexpr (is_vector<T>::value || is_array<T>::value) {
    w.begin_list();
    for (const auto& e : v) write_value(w, e);
    w.end_list();
  } else if constexpr (has_fields<T>) {
    w.begin_list();
    std::apply([&w](const auto&... f) { (write_value(w, f), ...); }, v.fields());
    w.end_list();
  } else {
    static_assert(always_false<T>, "courier::wire: this field type has no wire mapping (see courier/wire/message.hpp)");
  }
}

template <class Tuple>
bool read_fields(reader& r, Tuple&& fields, error& err, shared_block* owner = nullptr);

/// The trailing_items error for the items from the cursor to the end of the current level (the body, or
/// the list the cursor is in): where the first is, its type and how many there are. Precondition:
/// r.has_more(). Moves the cursor past them; the body was validated, so every skip succeeds.
[[nodiscard]] inline error trailing_items(reader& r) noexcept {
  error e{errc::trailing_items, item_type::none, r.peek(), r.offset()};
  while (r.has_more() && r.skip()) ++e.left_over;
  return e;
}

// Returns false and sets err on failure: a plain bool keeps the per-field path in registers, where a
// result<void> per field went through the stack. `owner` is the block the frame lies in (null: none),
// which string_ref and bytes_ref fields share.
template <class T>
bool read_value(reader& r, T& v, error& err, shared_block* owner = nullptr) {
  auto check = [&err](auto&& x) {
    if (x) [[likely]]
      return true;
    err = x.err();
    return false;
  };
  if constexpr (std::is_enum_v<T>) {
    auto x = r.read<std::underlying_type_t<T>>();
    if (!check(x)) return false;
    v = static_cast<T>(*x);
  } else if constexpr (scalar<T>) {
    auto x = r.read<T>();
    if (!check(x)) return false;
    v = *x;
  } else if constexpr (std::is_same_v<T, std::string>) {
    // Assigning into the existing string reuses its capacity: no allocation once it is large enough.
    auto x = r.read<std::string_view>();
    if (!check(x)) return false;
    v.assign(x->data(), x->size());
  } else if constexpr (std::is_same_v<T, std::string_view> || std::is_same_v<T, std::span<const std::byte>>) {
    auto x = r.read<T>();
    if (!check(x)) return false;
    v = *x;
  } else if constexpr (std::is_same_v<T, string_ref> || std::is_same_v<T, bytes_ref>) {
    using view_type = decltype(std::declval<const T&>().view());
    auto x = r.read<view_type>();
    if (!check(x)) return false;
    // Shares the owner only when the bytes lie in it (and there are some): otherwise a copy.
    v = owner != nullptr && !x->empty() && owner->holds(x->data()) ? T::in(*x, owner) : T::copy_of(*x);
  } else if constexpr (std::is_same_v<T, std::vector<std::byte>>) {
    auto x = r.read<std::span<const std::byte>>();
    if (!check(x)) return false;
    v.assign(x->begin(), x->end());
  } else if constexpr (is_vector<T>::value) {
    if (!check(r.begin_list())) return false;
    // Grown one element at a time, never reserved from the wire: the frame size bounds the total.
    std::size_t n = 0;
    while (r.has_more()) {
      if (n == v.size()) v.emplace_back();
      if (!read_value(r, v[n], err, owner)) return false;
      ++n;
    }
    v.resize(n);
    return check(r.end_list());
  } else if constexpr (is_array<T>::value) {
    if (!check(r.begin_list())) return false;
    for (auto& e : v) {
      if (!read_value(r, e, err, owner)) return false;
    }
    if (r.has_more()) [[unlikely]] {
      err = trailing_items(r);
      return false;
    }
    return check(r.end_list());
  } else if constexpr (has_fields<T>) {
    if (!check(r.begin_list())) return false;
    if (!read_fields(r, v.fields(), err, owner)) return false;
    if (r.has_more()) [[unlikely]] {
      err = trailing_items(r);
      return false;
    }
    return check(r.end_list());
  } else {
    static_assert(always_false<T>, "courier::wire: this field type has no wire mapping (see courier/wire/message.hpp)");
  }
  return true;
}

template <class Tuple>
bool read_fields(reader& r, Tuple&& fields, error& err, shared_block* owner) {
  return std::apply([&](auto&... f) { return (read_value(r, f, err, owner) && ...); }, fields);
}

template <class T>
struct views_frame;

/// Whether T (a field type) holds a plain view into the frame it was decoded from, one that dies
/// with the frame's bytes: std::string_view or std::span<const std::byte>, at any depth.
template <class T>
inline constexpr bool views_frame_v = views_frame<std::remove_cvref_t<T>>::value;

template <class T>
struct views_frame {
  static constexpr bool value = [] {
    if constexpr (std::is_same_v<T, std::string_view> || std::is_same_v<T, std::span<const std::byte>>) {
      return true;
    } else if constexpr (is_vector<T>::value || is_array<T>::value) {
      return views_frame_v<typename T::value_type>;
    } else if constexpr (has_fields<T>) {
      using tuple = decltype(std::declval<T&>().fields());
      return []<std::size_t... I>(std::index_sequence<I...>) {
        return (views_frame_v<std::tuple_element_t<I, std::remove_cvref_t<tuple>>> || ...);
      }
      (std::make_index_sequence<std::tuple_size_v<std::remove_cvref_t<tuple>>>{});
    } else {
      return false;
    }
  }();
};

}  // namespace detail

/// Appends the frame of one message: its token, then its fields as items.
template <message M>
[[nodiscard]] result<std::size_t> encode(out_buffer& out, const M& msg, const route& rt = {},
                                         const limits& lim = limits{}) {
  frame_writer w(
      out, frame_header{protocol_version, rt.kind, 0, 0, courier::token(M::token), rt.transaction_id, rt.context_id},
      lim);
  std::apply([&w](const auto&... f) { (detail::write_value(w, f), ...); }, msg.fields());
  return w.finish();
}

/// Whether a message (or any field type) holds a plain std::string_view or span that views the frame
/// it was decoded from (see courier/wire/shared_buffer.hpp for the field types that may outlive it).
template <class T>
inline constexpr bool views_frame = detail::views_frame_v<T>;

/// Decodes a message from the body of `frame` into `msg`, reusing the capacity of its strings and vectors.
/// The frame's token must be M's, and every item must be consumed: items after the last field (of the
/// message, or of a nested record or fixed-size array) are trailing_items, which counts them. `owner`, when given, is
/// the receive block the frame lies in: string_ref and bytes_ref fields then view it and share it instead of copying
/// their bytes.
template <message M>
[[nodiscard]] result<void> decode(const frame_view& frame, M& msg, shared_block* owner = nullptr) {
  if (frame.token() != courier::token(M::token)) return errc::token_mismatch;
  reader r = frame.items();
  error err;
  if (!detail::read_fields(r, msg.fields(), err, owner)) [[unlikely]]
    return err;
  if (r.has_more()) [[unlikely]]
    return detail::trailing_items(r);
  return {};
}

/// Decodes a message from the body of `frame` into a fresh M (which must be default-constructible).
template <message M>
[[nodiscard]] result<M> decode(const frame_view& frame) {
  M msg{};
  if (auto ok = decode(frame, msg); !ok) return ok.err();
  return msg;
}

}  // namespace courier::wire
