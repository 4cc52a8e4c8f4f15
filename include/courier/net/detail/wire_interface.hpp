#pragma once
/// @file
/// An interface in wire terms: the token table built at compile time from the interface's messages,
/// and how a reply of each message crosses the wire (private to the network layer). The connection
/// actor (net/detail/connection.hpp) uses it; nothing here does I/O.
///
///     struct add {
///       static constexpr courier::token token{"ADD_"};
///       std::int32_t a, b;
///       auto fields() { return std::tie(a, b); }
///       auto fields() const { return std::tie(a, b); }
///     };
///     using calc_api = courier::interface<std::int32_t(add), ...>;   // every message names its token once
///
/// A reply is the body of a RETURN frame: nothing for `unit` (a handler returning void), the fields of
/// a struct with `fields()` as top-level items, any other mapped type (int32, string, vector...) as one
/// item (docs/protocol.md, "Typed messages").
///
/// Thread-safety: types and free functions; safe anywhere on distinct buffers.

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "courier/error.hpp"
#include "courier/interface.hpp"
#include "courier/token.hpp"
#include "courier/wire/message.hpp"
#include "courier/wire/signature.hpp"

namespace courier::net::detail {

template <class Interface>
struct wire_interface;

template <class... Ms>
consteval bool tokens_distinct() {
  constexpr std::array<std::uint32_t, sizeof...(Ms)> t{courier::token(Ms::token).to_u32()...};
  for (std::size_t i = 0; i < t.size(); ++i)
    for (std::size_t j = i + 1; j < t.size(); ++j)
      if (t[i] == t[j]) return false;
  return true;
}

template <class... Ms>
consteval bool tokens_printable() {
  return (courier::token(Ms::token).is_printable() && ...);
}

template <class... Rs, class... Ms>
struct wire_interface<courier::interface<Rs(Ms)...>> {
  using api = courier::interface<Rs(Ms)...>;
  static_assert((wire::message<std::remove_cvref_t<Ms>> && ...),
                "courier::net: every message of a remote interface needs `static constexpr courier::token token` "
                "and fields() (see courier/wire/message.hpp)");
  static_assert(tokens_distinct<std::remove_cvref_t<Ms>...>(),
                "courier::net: two messages of the interface name the same token");
  static_assert(tokens_printable<std::remove_cvref_t<Ms>...>(),
                "courier::net: a token must be four printable ASCII characters");

  static constexpr std::size_t size = sizeof...(Ms);
  static constexpr std::array<std::uint32_t, size> tokens{courier::token(std::remove_cvref_t<Ms>::token).to_u32()...};

  template <std::size_t P>
  using message_at = courier::detail::nth_type<P, std::remove_cvref_t<Ms>...>;
  template <std::size_t P>
  using reply_at = typename api::template reply_type<message_at<P>>;

  /// The message's position for a token received, or `size` when the interface has none. A linear
  /// scan over a few words: interfaces are small, and it stays in one cache line up to 16 messages.
  static constexpr std::size_t find(courier::token t) noexcept {
    const std::uint32_t v = t.to_u32();
    for (std::size_t i = 0; i < size; ++i)
      if (tokens[i] == v) return i;
    return size;
  }

  /// Appends the services of the interface as the reply to a `$SVC` reflection call
  /// (docs/protocol.md section 15): one list per message, its signatures from its types.
  static void describe(wire::frame_writer& w) {
    (describe_one<std::remove_cvref_t<Ms>, typename api::template reply_type<std::remove_cvref_t<Ms>>>(w), ...);
  }

  /// Calls `f.template operator()<P>()` for the run-time position `p` (< size): a switch the
  /// compiler builds from the fold, no table of function pointers.
  template <class F>
  static void visit(std::size_t p, F&& f) {
    visit_impl(p, f, std::make_index_sequence<size>{});
  }

 private:
  template <class M, class R>
  static void describe_one(wire::frame_writer& w) {
    w.begin_list();
    w.add(courier::token(M::token).view());
    w.add(static_cast<std::uint8_t>(std::is_same_v<R, courier::unit> ? 0 : 1));
    w.add(std::string_view(wire::arguments_signature<M>()));
    w.add(std::string_view(wire::result_signature<R>()));
    w.add(wire::description_of<M>());
    w.end_list();
  }

  template <class F, std::size_t... P>
  static void visit_impl(std::size_t p, F& f, std::index_sequence<P...>) {
    (void)((p == P ? (f.template operator()<P>(), true) : false) || ...);
  }
};

/// Writes a reply's value as its items: a record's fields spread as top-level items, any other
/// value as one item (courier::unit: none).
template <class R>
void write_reply_items(wire::frame_writer& w, const R& value) {
  if constexpr (std::is_same_v<R, unit>) {
    (void)w;
    (void)value;
  } else if constexpr (wire::has_fields<R>) {
    std::apply([&w](const auto&... f) { (wire::detail::write_value(w, f), ...); }, value.fields());
  } else {
    wire::detail::write_value(w, value);
  }
}

/// Appends the RETURN frame of a call's reply.
template <class R>
[[nodiscard]] wire::result<std::size_t> encode_reply(wire::out_buffer& out, courier::token tok,
                                                     std::uint64_t transaction_id, std::uint64_t context_id,
                                                     const R& value, const wire::limits& lim = wire::limits{}) {
  wire::frame_writer w(
      out, wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, tok, transaction_id, context_id}, lim);
  write_reply_items(w, value);
  return w.finish();
}

/// Decodes the body of a RETURN frame into `value` (reusing its capacity); every item must be used.
/// `owner`: the receive block the frame lies in, which string_ref and bytes_ref fields share. A
/// reply type with `assign_frame(frame, owner)` (wire::items_ref) takes the frame whole instead.
template <class R>
[[nodiscard]] wire::result<void> decode_reply(const wire::frame_view& frame, R& value,
                                              wire::shared_block* owner = nullptr) {
  if constexpr (requires { value.assign_frame(frame, owner); }) {
    value.assign_frame(frame, owner);
    return {};
  } else {
    wire::reader r = frame.items();
    wire::error err;
    if constexpr (std::is_same_v<R, unit>) {
      (void)value;
    } else if constexpr (wire::has_fields<R>) {
      if (!wire::detail::read_fields(r, value.fields(), err, owner)) return err;
    } else {
      if (!wire::detail::read_value(r, value, err, owner)) return err;
    }
    if (r.peek() != wire::item_type::none)
      return wire::error{wire::errc::trailing_items, wire::item_type::none, r.peek(), r.offset()};
    return {};
  }
}

/// The `courier::error` an ERROR frame stands for: codes below 256 are the protocol's
/// (courier.wire category), 256..65535 Courier's runtime codes (courier category, the same
/// `errc` a local call fails with), above that the application's (kept as the number, courier
/// category, with the peer's text).
[[nodiscard]] courier::error error_from_wire(std::uint32_t code, std::string_view text);

/// The code an ERROR frame carries for a local failure: the number of a courier or courier.wire
/// code as it is, handler_failed for any other category (a system error, say), whose text then
/// names it.
[[nodiscard]] std::uint32_t error_to_wire(const courier::error& e) noexcept;

}  // namespace courier::net::detail
