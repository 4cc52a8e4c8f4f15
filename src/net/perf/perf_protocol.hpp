#pragma once
/// @file
/// What courier-perf and courier-perf-server agree on: the services a perf session serves, by
/// token, and the items each takes. Any client may call them (courier-call --list shows them).
///
/// Thread-safety: constants.

#include <array>
#include <cstdint>

#include "courier/token.hpp"

namespace courier::perf {

/// An empty service: no items in, none out (--send-nothing).
inline constexpr courier::token nothing{"NOTH"};
/// Five int32 in; called one-way it counts them (--send), called with a reply it answers their sum
/// as one int32 (--send-and-callback, --send-and-wait). The children serve it too.
inline constexpr courier::token add_five{"ADD5"};
/// How many one-way ADD5 this session has taken, as one int64: the client checks it lost none.
inline constexpr courier::token sends_taken{"SNT_"};
/// Whatever items it is given, echoed back in order (--bfl).
inline constexpr courier::token echo_list{"BFL_"};

/// The items of every ADD5 a client sends: their sum is 15 plus the last one's offset.
inline constexpr std::array<std::int32_t, 5> five_items{1, 2, 3, 4, 5};

}  // namespace courier::perf
