#pragma once
/// @file
/// The TCP transport: host and port, IPv4 or IPv6, TCP_NODELAY on every connection.
#include "transport_unit.hpp"

namespace courier::net::transports {
extern const transport_unit tcp;
}
