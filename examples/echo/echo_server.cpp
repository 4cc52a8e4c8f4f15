// The echo server: answers every message with itself.
//   courier-echo-client @ courier-echo-server        (pipe)
//   courier-echo-server --uds --file /tmp/echo.sock  /  --tcp --port 4568
#include <courier/courier.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>

#include <csignal>
#include <cstdio>

#include "echo_api.hpp"

namespace {

class echoer : public courier::actor<echoer, echo::everything> {
 public:
  echo::everything on(const echo::everything& m) { return m; }
};

}  // namespace

int main(int argc, char** argv) {
  auto opts = courier::net::parse_options(argc, argv, "courier-echo-server");
  if (!opts) {
    std::fprintf(stderr, "courier-echo-server: %s\n", opts.err().text.c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", courier::net::options_help("courier-echo-server").c_str());
    return 0;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  courier::system sys;
  courier::net::node net(sys);
  courier::actor_ref<echo::api> echoer_ref = sys.spawn<echoer>();
  auto served = net.serve_on(echoer_ref, opts->where);
  if (!served) {
    std::fprintf(stderr, "courier-echo-server: %s\n", served.err().describe().c_str());
    return 1;
  }
  if (opts->where.kind == courier::net::endpoint::kind_t::pipe) {
    net.wait_no_connections(std::chrono::hours(24 * 365));
  } else {
    if (!opts->silent) std::fprintf(stderr, "courier-echo-server: serving on %s\n", served->where.c_str());
    int sig = 0;
    sigwait(&stop_signals, &sig);
  }
  net.stop();
  return 0;
}
