// The echo server: answers every message with itself.
//   courier-echo-client @ courier-echo-server        (pipe)
//   courier-echo-server --uds --file /tmp/echo.sock  /  --tcp --port 4568
#include <courier/courier.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>
#include <courier/net/signals.hpp>

#include <cstdio>

#include "echo_api.hpp"

namespace {

class echoer : public courier::actor<echoer, echo::everything> {
 public:
  echo::everything on(const echo::everything& m) { return m; }
};

}  // namespace

int main(int argc, char** argv) {
  constexpr auto kind = courier::net::program_kind::server;
  auto opts = courier::net::parse_options(argc, argv, "courier-echo-server", {}, kind);
  if (!opts) {
    std::fprintf(stderr, "courier-echo-server: %s\n", opts.err().text.c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", courier::net::options_help("courier-echo-server", {}, kind).c_str());
    return 0;
  }
  courier::net::server_signals signals;  // before any thread starts

  courier::system sys;
  courier::net::node net(sys);
  courier::actor_ref<echo::api> echoer_ref = sys.spawn<echoer>();
  courier::net::connection_config base;
  base.name = "echo-server";
  auto served = net.serve_on(echoer_ref, opts->where, courier::net::config_from(*opts, base));
  if (!served) {
    std::fprintf(stderr, "courier-echo-server: %s\n", served.err().describe().c_str());
    return 1;
  }
  if (!opts->silent && opts->where.kind != courier::net::endpoint::kind_t::pipe)
    std::fprintf(stderr, "courier-echo-server: serving on %s\n", served->where.c_str());
  signals.wait(net, opts->where);
  net.stop();
  return 0;
}
