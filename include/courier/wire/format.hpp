#pragma once
/// @file
/// The frame layout of docs/protocol.md: magic, version, header size and field offsets, frame kinds,
/// frame_header, limits, and little-endian load/store. Part of the wire codec (courier/wire.hpp).
///
/// Thread-safety: constants, value types and pure functions; safe anywhere.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "courier/token.hpp"

// The layout constants of docs/protocol.md. Everything on the wire is little-endian; load_le/store_le
// are the only places that know the host's byte order.
namespace courier::wire {

/// "COUR": the first four bytes of every frame.
inline constexpr std::byte magic[4] = {std::byte{'C'}, std::byte{'O'}, std::byte{'U'}, std::byte{'R'}};
/// The highest protocol version this codec speaks (and the only one, so far).
inline constexpr std::uint8_t protocol_version = 1;
/// Fixed header size of version 1, in bytes.
inline constexpr std::size_t header_size = 32;

/// Header field offsets, in bytes from the start of the frame.
namespace offset {
inline constexpr std::size_t magic = 0;
inline constexpr std::size_t version = 4;
inline constexpr std::size_t header_length = 5;
inline constexpr std::size_t kind = 6;
inline constexpr std::size_t flags = 7;
inline constexpr std::size_t body_length = 8;
inline constexpr std::size_t token = 12;
inline constexpr std::size_t transaction_id = 16;
inline constexpr std::size_t context_id = 24;
}  // namespace offset

/// Frame kinds; the values are the kind byte on the wire.
enum class kind : std::uint8_t {
  handshake = 1,      // version and capability negotiation, peer name
  send = 2,           // one-way call (libmsgque END)
  call = 3,           // call expecting a reply (END_AND_WAIT / END_AND_CALLBACK)
  reply = 4,          // RETURN: the result of a call
  error = 5,          // ERROR: numeric code + text, in answer to a call or about the connection
  context_open = 6,   // open a child context
  context_close = 7,  // close a child context
  ping = 8,
  pong = 9,
  close = 10,  // orderly close: the sender will send nothing more
};
inline constexpr std::uint8_t max_kind = 10;

/// "call", "context_open"...; an unknown value gives "unknown".
[[nodiscard]] const char* to_string(kind k) noexcept;

/// A receiver's limits (docs/protocol.md, "Limits"). The defaults are safe for an untrusted peer.
///
/// Thread-safety: a value type.
struct limits {
  /// Header plus body, in bytes. Every peer must accept at least min_max_frame_size.
  std::uint32_t max_frame_size = 16u * 1024 * 1024;
  /// How many lists may be open at once: opening one more is nesting_too_deep (so 32 nested empty lists
  /// pass and 33 do not). Items outside any list are at depth 0, a top-level list's elements at depth 1.
  std::uint32_t max_depth = 32;
  /// Items per frame, counting every value and every list, but not list ends.
  std::uint32_t max_items = 1u << 20;
};
inline constexpr std::uint32_t min_max_frame_size = 64 * 1024;
/// The smallest max_items and max_depth a peer may announce (docs/protocol.md section 10).
inline constexpr std::uint32_t min_max_items = 64 * 1024;
inline constexpr std::uint32_t min_max_depth = 32;
/// The largest first frame a receiver accepts (docs/protocol.md sections 8 and 10): until the peer's
/// handshake is accepted, a header announcing a larger frame is frame_too_large, so a peer that has not
/// even said hello cannot make the receiver buffer megabytes. A handshake (or an ERROR refusing the
/// connection) is far smaller.
inline constexpr std::uint32_t max_first_frame_size = 4096;

/// The service that lists a context's services with their signatures (docs/protocol.md section 15).
inline constexpr courier::token reflection_token{"$SVC"};

/// The decoded fixed header of a frame.
///
/// Thread-safety: a value type.
struct frame_header {
  std::uint8_t version = protocol_version;
  wire::kind kind = kind::send;
  std::uint8_t flags = 0;
  std::uint32_t body_length = 0;
  courier::token token{};
  std::uint64_t transaction_id = 0;
  std::uint64_t context_id = 0;

  friend bool operator==(const frame_header&, const frame_header&) noexcept = default;
};

namespace detail {

template <class U>
constexpr U byteswap(U v) noexcept {
  static_assert(std::is_unsigned_v<U>);
  U r = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    r = static_cast<U>((r << 8) | (v & 0xff));
    v = static_cast<U>(v >> 8);
  }
  return r;
}

template <class T>
using uint_of =
    std::conditional_t<sizeof(T) == 1, std::uint8_t,
                       std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                          std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;

/// Writes an integer or floating-point value as little-endian bytes at p (no alignment needed).
template <class T>
inline void store_le(std::byte* p, T v) noexcept {
  auto u = std::bit_cast<uint_of<T>>(v);
  if constexpr (std::endian::native == std::endian::big) u = byteswap(u);
  std::memcpy(p, &u, sizeof u);
}

/// Reads a little-endian value at p (no alignment needed).
template <class T>
[[nodiscard]] inline T load_le(const std::byte* p) noexcept {
  uint_of<T> u;
  std::memcpy(&u, p, sizeof u);
  if constexpr (std::endian::native == std::endian::big) u = byteswap(u);
  return std::bit_cast<T>(u);
}

}  // namespace detail
}  // namespace courier::wire
