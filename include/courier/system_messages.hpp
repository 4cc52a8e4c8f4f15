#pragma once
/// @file
/// The messages Courier itself sends to actors that ask for them (an actor lists the type in its
/// message list to receive it).
///
/// Thread-safety: plain values.

#include <cstdint>

#include "courier/error.hpp"

namespace courier {

/// Sent to an actor that monitors another when that one stops. `reason` is empty (no error) when
/// it stopped normally.
struct down {
  std::uint64_t id;  ///< the stopped actor's id
  error reason;
};

}  // namespace courier
