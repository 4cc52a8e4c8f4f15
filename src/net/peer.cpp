#include "courier/net/peer.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <string>

#include "courier/net/socket.hpp"

namespace courier::net::detail {

peer_info peer_of(const socket& accepted, transport_kind transport) {
  peer_info peer;
  peer.transport = transport;
  if (transport == transport_kind::uds) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(accepted.fd(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      peer.credentials = peer_credentials{cred.pid, cred.uid, cred.gid};
      peer.address =
          "pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid) + " gid " + std::to_string(cred.gid);
    }
    return peer;
  }
  if (transport == transport_kind::pipe) {
    // A program given a connected socket on stdin by inetd or systemd (Accept=yes) rather than
    // by a pipe client: a uds one is named by the listener's path, a socket pair is unnamed.
    sockaddr_storage own{};
    socklen_t own_len = sizeof own;
    if (::getsockname(accepted.fd(), reinterpret_cast<sockaddr*>(&own), &own_len) == 0) {
      if (own.ss_family == AF_INET || own.ss_family == AF_INET6) return peer_of(accepted, transport_kind::tcp);
      if (own.ss_family == AF_UNIX && own_len > offsetof(sockaddr_un, sun_path) &&
          reinterpret_cast<const sockaddr_un*>(&own)->sun_path[0] != '\0')
        return peer_of(accepted, transport_kind::uds);
    }
    peer.address = "stdin";
    return peer;
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(accepted.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return peer;
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    peer.address.append(text).append(":").append(std::to_string(ntohs(in->sin_port)));
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    peer.address.append("[").append(text).append("]:").append(std::to_string(ntohs(in6->sin6_port)));
  }
  return peer;
}

std::string describe_peer(const socket& connected) {
  sockaddr_storage own{};
  socklen_t own_len = sizeof own;
  if (::getsockname(connected.fd(), reinterpret_cast<sockaddr*>(&own), &own_len) != 0) return "an unknown peer";
  const transport_kind kind = own.ss_family == AF_UNIX ? transport_kind::uds : transport_kind::tcp;
  peer_info peer = peer_of(connected, kind);
  if (peer.address.empty()) return "an unknown peer";
  return std::string(to_string(kind)).append(" ").append(peer.address);
}

}  // namespace courier::net::detail
