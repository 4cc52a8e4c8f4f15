#include "courier/net/server.hpp"

#include <cstdio>

#include "courier/net/signals.hpp"

namespace courier::net {

int run_server(int argc, const char* const* argv, const server_program& program,
               const std::function<courier::result<serving>(server_context&)>& serve) {
  constexpr auto kind = program_kind::server;
  auto opts = parse_options(argc, argv, program.name, program.extra, kind);
  if (!opts) {
    std::fprintf(stderr, "%s: %s\n%s", program.name.c_str(), opts.err().text.c_str(),
                 options_help(program.name, program.extra, kind).c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", options_help(program.name, program.extra, kind).c_str());
    return 0;
  }
  server_signals signals;  // before the system's workers start: they inherit the blocked mask
  courier::system sys;
  node net(sys);
  connection_config base = program.base;
  if (base.name == connection_config{}.name) base.name = program.name;
  const connection_config cfg = config_from(*opts, base);
  server_context context{sys, net, *opts, opts->where, cfg};
  auto served = serve(context);
  if (!served) {
    std::fprintf(stderr, "%s: %s\n", program.name.c_str(), served.err().describe().c_str());
    return 1;
  }
  if (!opts->silent && opts->where.kind != endpoint::kind_t::pipe)
    std::fprintf(stderr, "%s: serving on %s\n", program.name.c_str(), served->where.c_str());
  signals.wait(net, opts->where);
  net.stop(program.grace);
  return 0;
}

}  // namespace courier::net
