#include "courier/net/session.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

#include "courier/net/socket.hpp"

namespace courier::net::detail {

peer_info peer_of(const socket& accepted, endpoint::kind_t transport) {
  peer_info peer;
  peer.transport = transport;
  if (transport == endpoint::kind_t::uds) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(accepted.fd(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      peer.credentials = peer_credentials{cred.pid, cred.uid, cred.gid};
      peer.address = "pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid) + " gid " + std::to_string(cred.gid);
    }
    return peer;
  }
  if (transport == endpoint::kind_t::pipe) {
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

}  // namespace courier::net::detail
