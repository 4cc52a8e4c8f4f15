// The calculator server: typed services as actors, served over pipe, uds or tcp.
//   courier-calc-server --uds --file /tmp/calc.sock      (until SIGINT/SIGTERM)
//   courier-calc-server --tcp --port 4567
//   courier-calc-client @ courier-calc-server            (pipe: the client starts the server)
#include <courier/courier.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>

#include <csignal>
#include <cstdio>

#include "calc_api.hpp"

namespace {

struct square_of {
  std::int32_t x = 0;
};

// The actor the server delegates squares to.
class squarer : public courier::actor<squarer, square_of> {
 public:
  std::int32_t on(const square_of& m) { return m.x * m.x; }
};

struct slow_done {
  std::int32_t value = 0;
  courier::response_promise<std::int32_t> answer;
};

class calculator : public courier::actor<calculator, calc::add, calc::divide, calc::slow, calc::square, calc::note,
                                         calc::notes_seen, slow_done> {
 public:
  void on_start() { squarer_ = spawn<squarer>(); }
  std::int32_t on(const calc::add& m) { return m.a + m.b; }
  // Division by zero fails the request (an ERROR frame) and the calculator goes on; a handler that
  // threw would stop the actor instead.
  courier::response_promise<std::int32_t> on(const calc::divide& m) {
    auto answer = make_response_promise<std::int32_t>();
    if (m.b == 0)
      answer.fail(courier::error(courier::errc::invalid_argument, "divide by zero"));
    else
      answer.deliver(m.a / m.b);
    return answer;
  }
  courier::response_promise<std::int32_t> on(const calc::slow& m) {
    auto answer = make_response_promise<std::int32_t>();
    self().delayed_send(slow_done{m.value, answer}, std::chrono::milliseconds(m.delay_ms));
    return answer;
  }
  void on(const slow_done& m) {
    auto answer = m.answer;  // a copy shares the one answer
    answer.deliver(m.value);
  }
  courier::delegated<std::int32_t> on(const calc::square& m) { return delegate(squarer_, square_of{m.x}); }
  void on(const calc::note&) { ++notes_; }
  std::int32_t on(const calc::notes_seen&) { return notes_; }
  void on_stop() { squarer_.reset(); }

 private:
  courier::actor_ref<squarer> squarer_;
  std::int32_t notes_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  auto opts = courier::net::parse_options(argc, argv, "courier-calc-server");
  if (!opts) {
    std::fprintf(stderr, "courier-calc-server: %s\n%s", opts.err().text.c_str(),
                 courier::net::options_help("courier-calc-server").c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", courier::net::options_help("courier-calc-server").c_str());
    return 0;
  }
  // Signals are taken by sigwait below, not by handlers: block them before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  courier::system sys;
  courier::net::node net(sys);
  courier::actor_ref<calc::api> calc = sys.spawn<calculator>();
  courier::net::connection_config cfg;
  cfg.name = opts->name.empty() ? "calc-server" : opts->name;
  auto served = net.serve_on(calc, opts->where, cfg);
  if (!served) {
    std::fprintf(stderr, "courier-calc-server: %s\n", served.err().describe().c_str());
    return 1;
  }
  if (opts->where.kind == courier::net::endpoint::kind_t::pipe) {
    // A pipe server lives as long as its one connection.
    net.wait_no_connections(std::chrono::hours(24 * 365));
  } else {
    if (!opts->silent) std::fprintf(stderr, "courier-calc-server: serving on %s\n", served->where.c_str());
    int sig = 0;
    sigwait(&stop_signals, &sig);
  }
  net.stop();
  return 0;
}
