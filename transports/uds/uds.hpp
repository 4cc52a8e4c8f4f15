#pragma once
/// @file
/// The Unix-domain socket transport: a socket file, owner-only by default.
#include "transport_unit.hpp"

namespace courier::net::transports {
extern const transport_unit uds;
}
