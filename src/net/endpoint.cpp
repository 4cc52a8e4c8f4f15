#include "courier/net/endpoint.hpp"

namespace courier::net {

const char* to_string(transport_kind kind) noexcept {
  switch (kind) {
    case transport_kind::pipe: return "pipe";
    case transport_kind::uds: return "uds";
    case transport_kind::tcp: return "tcp";
  }
  return "unknown";
}

std::string to_string(const endpoint& where) {
  std::string text = to_string(where.kind);
  switch (where.kind) {
    case transport_kind::pipe:
      if (!where.command.empty()) text += " @";
      for (const auto& word : where.command) (text += ' ') += word;
      break;
    case transport_kind::uds: (text += ' ') += where.file; break;
    case transport_kind::tcp: {
      const bool ipv6_literal = where.host.find(':') != std::string::npos;
      text += ipv6_literal ? " [" + where.host + "]" : " " + where.host;
      (text += ':') += std::to_string(where.port);
      break;
    }
  }
  if (where.kind != transport_kind::pipe && where.descriptor >= 0)
    text += where.descriptor == 0 ? ", the connection on stdin"
                                  : ", the connection on fd " + std::to_string(where.descriptor);
  return text;
}

}  // namespace courier::net
