#include "pipe/pipe.hpp"

#include "courier/net/process.hpp"

namespace courier::net::transports {

namespace {

courier::result<connected> connect_pipe(const endpoint& where, std::chrono::milliseconds) {
  if (where.command.empty())
    return courier::error(errc::invalid_argument, "pipe: no server command (usage: client [options] @ server args...)");
  auto pair = socket_pair();
  if (!pair) return pair.err();
  auto& [ours, theirs] = *pair;
  auto child = spawn_with_stdio(where.command, theirs.fd());
  if (!child) return system_error(child.err().code.value(), "start", where);
  theirs.close();  // the child holds its end now; ours sees EOF when the child exits
  return connected{std::move(ours), std::move(*child)};
}

}  // namespace

const transport_unit pipe{"pipe", connect_pipe, nullptr, nullptr};

}  // namespace courier::net::transports
