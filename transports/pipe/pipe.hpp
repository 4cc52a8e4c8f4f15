#pragma once
/// @file
/// The pipe transport: the client starts the server program as a child process on a socket pair.
#include "transport_unit.hpp"

namespace courier::net::transports {
extern const transport_unit pipe;
}
