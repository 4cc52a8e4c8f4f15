#include "courier/net/endpoint.hpp"

namespace courier::net {

const char* to_string(endpoint::kind_t kind) noexcept {
  switch (kind) {
    case endpoint::kind_t::pipe: return "pipe";
    case endpoint::kind_t::uds: return "uds";
    case endpoint::kind_t::tcp: return "tcp";
  }
  return "unknown";
}

std::string to_string(const endpoint& where) {
  std::string text = to_string(where.kind);
  switch (where.kind) {
    case endpoint::kind_t::pipe:
      if (!where.command.empty()) text += " @";
      for (const auto& word : where.command) (text += ' ') += word;
      break;
    case endpoint::kind_t::uds: (text += ' ') += where.file; break;
    case endpoint::kind_t::tcp: {
      const bool ipv6_literal = where.host.find(':') != std::string::npos;
      text += ipv6_literal ? " [" + where.host + "]" : " " + where.host;
      (text += ':') += std::to_string(where.port);
      break;
    }
  }
  return text;
}

}  // namespace courier::net
