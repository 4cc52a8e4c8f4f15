#pragma once
/// @file
/// What one transport folder provides: how a stream descriptor is obtained (connect, listen) and which
/// options an accepted one gets. src/net/transport.cpp picks the unit by endpoint::kind; adding a
/// transport is one more folder with one more of these, plus its endpoint kind and option.
///
/// Thread-safety: units are immutable tables of plain functions.

#include <sys/socket.h>

#include <chrono>
#include <string_view>

#include "courier/net/transport.hpp"

namespace courier::net {

struct transport_unit {
  std::string_view name;
  courier::result<connected> (*connect)(const endpoint& where, std::chrono::milliseconds limit);
  /// nullptr: the transport has no listener (pipe).
  courier::result<listener> (*listen)(const endpoint& where);
  /// Socket options of an accepted connection (tcp: TCP_NODELAY); nullptr when there are none.
  courier::result<void> (*prepare_accepted)(const socket& accepted);
};

/// Connects the non-blocking `sock` to `address`, waiting at most `limit` for the connection to
/// complete (a full uds backlog, EAGAIN, is retried until then). Returns the errno of the failure, 0 on
/// success, ETIMEDOUT when the limit passed.
int connect_within(const socket& sock, const sockaddr* address, socklen_t length,
                   std::chrono::milliseconds limit) noexcept;

/// A system call failed: errno with "<what> <where>" as the text.
courier::error system_error(int errno_value, std::string_view what, const endpoint& where);

}  // namespace courier::net
