#include "tcp/tcp.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

namespace courier::net::transports {

namespace {

struct addrinfo_deleter {
  void operator()(addrinfo* list) const noexcept { ::freeaddrinfo(list); }
};
using addrinfo_list = std::unique_ptr<addrinfo, addrinfo_deleter>;

courier::result<addrinfo_list> resolve(const endpoint& where, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const std::string port = std::to_string(where.port);
  addrinfo* list = nullptr;
  const int failed = ::getaddrinfo(where.host.empty() ? nullptr : where.host.c_str(), port.c_str(), &hints, &list);
  if (failed != 0) {
    const int errno_value = failed == EAI_SYSTEM ? errno : EHOSTUNREACH;
    return courier::error(std::error_code(errno_value, std::system_category()),
                          "resolve " + to_string(where) + ": " + ::gai_strerror(failed));
  }
  return addrinfo_list(list);
}

courier::result<void> no_delay(const socket& sock) {
  // Request/response traffic: Nagle's algorithm would hold a small reply until the previous one is
  // acknowledged, ~40 ms a call with delayed ACKs.
  const int on = 1;
  if (::setsockopt(sock.fd(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) < 0)
    return courier::error(std::error_code(errno, std::system_category()), "setsockopt TCP_NODELAY");
  return {};
}

courier::result<connected> connect_tcp(const endpoint& where, std::chrono::milliseconds limit) {
  auto addresses = resolve(where, false);
  if (!addresses) return addresses.err();
  int last_failure = EHOSTUNREACH;
  const auto until = std::chrono::steady_clock::now() + limit;
  for (addrinfo* a = addresses->get(); a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_failure = errno;
      continue;
    }
    socket sock(fd);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    last_failure = connect_within(sock, a->ai_addr, a->ai_addrlen, left);
    if (last_failure != 0) continue;
    if (auto ok = no_delay(sock); !ok) return ok.err();
    return connected{std::move(sock), std::nullopt};
  }
  return system_error(last_failure, "connect", where);
}

std::uint16_t bound_port(const socket& sock) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(sock.fd(), reinterpret_cast<sockaddr*>(&address), &length) < 0) return 0;
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

courier::result<listener> listen_tcp(const endpoint& where) {
  auto addresses = resolve(where, true);
  if (!addresses) return addresses.err();
  int last_failure = EADDRNOTAVAIL;
  const char* last_step = "bind";
  for (addrinfo* a = addresses->get(); a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_failure = errno;
      last_step = "socket";
      continue;
    }
    socket sock(fd);
    const int on = 1;
    // A restarted server binds again at once instead of waiting out the old connections' TIME_WAIT.
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) < 0) {
      last_failure = errno;
      last_step = "bind";
      continue;
    }
    if (::listen(fd, SOMAXCONN) < 0) {
      last_failure = errno;
      last_step = "listen";
      continue;
    }
    endpoint actual = where;
    actual.port = bound_port(sock);
    return listener(std::move(sock), tcp, to_string(actual), actual.port);
  }
  return system_error(last_failure, last_step, where);
}

}  // namespace

const transport_unit tcp{"tcp", connect_tcp, listen_tcp, no_delay};

}  // namespace courier::net::transports
