#pragma once
/// @file
/// The handshake (docs/protocol.md, "Handshake and versioning"): handshake_info, agreement,
/// encode_handshake(), decode_handshake() and negotiate(). Part of the wire codec (courier/wire.hpp).
///
/// Thread-safety: value types and free functions; safe anywhere on distinct objects.

#include <cstdint>
#include <string_view>

#include "courier/wire/buffer.hpp"
#include "courier/wire/decoder.hpp"
#include "courier/wire/error.hpp"
#include "courier/wire/format.hpp"

// The handshake (docs/protocol.md, "Handshake and versioning").
namespace courier::wire {

/// What a peer says about itself in its handshake.
///
/// Thread-safety: a value type; peer_name views memory it does not own.
struct handshake_info {
  std::uint8_t min_version = protocol_version;
  std::uint8_t max_version = protocol_version;
  std::uint64_t capabilities = 0;
  std::uint32_t max_frame_size = limits{}.max_frame_size;
  std::string_view peer_name;
  /// Items 6 and 7 (docs/protocol.md section 8): the most items per frame and the deepest list nesting
  /// the sender accepts. A peer that omits them accepts the defaults.
  std::uint32_t max_items = limits{}.max_items;
  std::uint32_t max_depth = limits{}.max_depth;
  /// Item 8: a random number chosen per connection, so that a peer can tell its own handshake read back
  /// (a transport that echoes, such as `cat`, reflects it) from the other end's. 0 means none: item 8 is
  /// then not sent. The owner fills it from a random source; it need not be secret.
  std::uint64_t nonce = 0;
  /// Item 9: the most child contexts the sender lets its peer open at once (docs/protocol.md section 6).
  /// 0 means none: item 9 is then not sent (absent, a peer accepts none). When it is sent, item 8 goes
  /// before it, 0 if there is no nonce.
  std::uint32_t max_child_contexts = 0;
};

/// What two peers agreed on.
struct agreement {
  std::uint8_t version = protocol_version;
  std::uint64_t capabilities = 0;
  std::uint32_t max_frame_size = 0;      // the largest frame this side may send: the peer's limit
  std::uint32_t max_items = 0;           // the most items per frame this side may send: the peer's limit
  std::uint32_t max_depth = 0;           // the deepest nesting this side may send: the peer's limit
  std::uint32_t max_child_contexts = 0;  // the most children this side may have open in the peer: its limit

  /// The peer's limits as a limits value, for a frame_writer that must respect them.
  [[nodiscard]] limits peer_limits() const noexcept { return limits{max_frame_size, max_depth, max_items}; }
};

/// Appends a handshake frame (always in the version 1 layout, so any peer can read it): seven items,
/// the nonce as an eighth when it is not 0 or when a ninth follows, and max_child_contexts as the
/// ninth when it is not 0.
[[nodiscard]] result<std::size_t> encode_handshake(out_buffer& out, const handshake_info& info);

/// Reads the peer's handshake: five items, then optionally max_items and max_depth (uint32 each; the
/// defaults when absent), then optionally the nonce (a uint64 eighth item; an eighth item of another
/// type is ignored, as every item after it), then behind it optionally max_child_contexts (a uint32
/// ninth item; of another type, ignored). peer_name views the frame.
[[nodiscard]] result<handshake_info> decode_handshake(const frame_view& frame) noexcept;

/// The highest version both speak and the capabilities both have; unsupported_version if the version
/// ranges do not meet, bad_handshake if the peer's limits are below the protocol's minimums
/// (min_max_frame_size, min_max_items, min_max_depth).
[[nodiscard]] result<agreement> negotiate(const handshake_info& local, const handshake_info& remote) noexcept;

}  // namespace courier::wire
