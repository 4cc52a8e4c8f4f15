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
};

/// What two peers agreed on.
struct agreement {
  std::uint8_t version = protocol_version;
  std::uint64_t capabilities = 0;
  std::uint32_t max_frame_size = 0;  // the largest frame this side may send: the peer's limit
};

/// Appends a handshake frame (always in the version 1 layout, so any peer can read it).
[[nodiscard]] result<std::size_t> encode_handshake(out_buffer& out, const handshake_info& info);

/// Reads the peer's handshake; items after the five of version 1 are ignored (a newer peer may add some).
/// peer_name views the frame.
[[nodiscard]] result<handshake_info> decode_handshake(const frame_view& frame) noexcept;

/// The highest version both speak and the capabilities both have; unsupported_version if the version
/// ranges do not meet, bad_handshake if the peer's limits are below the protocol's minimum.
[[nodiscard]] result<agreement> negotiate(const handshake_info& local, const handshake_info& remote) noexcept;

}  // namespace courier::wire
