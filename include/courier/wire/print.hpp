#pragma once
/// @file
/// The generic frame printer: print() and to_text(), any frame (or a run of frames) as text without
/// knowing its message type. Part of the wire codec (courier/wire.hpp); for tools and tests.
///
/// Thread-safety: free functions; safe on distinct streams.

#include <iosfwd>
#include <span>
#include <string>

#include "courier/wire/decoder.hpp"

// The generic frame printer: any frame to text, without knowing its message type. The text form is
// documented in tests/vectors/README.md, where it is the "meaning" half of every golden vector.
namespace courier::wire {

/// Writes `frame` as text: a header line, then one line per item, lists indented by two spaces.
/// Thread-safety: a free function; safe on distinct streams.
void print(std::ostream& os, const frame_view& frame);

/// print() into a string.
[[nodiscard]] std::string to_text(const frame_view& frame);

/// Decodes every frame in `bytes` and prints them one after the other; where decoding fails, prints
/// "error <name> offset=<n>" and stops. For debugging tools and tests, not for the hot path.
[[nodiscard]] std::string to_text(std::span<const std::byte> bytes, const limits& lim = limits{});

}  // namespace courier::wire
