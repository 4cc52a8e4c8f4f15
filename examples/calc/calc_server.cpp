// The calculator server: typed services as actors, served over pipe, uds or tcp.
//   courier-calc-server --uds --file /tmp/calc.sock      (until SIGINT/SIGTERM)
//   courier-calc-server --tcp --port 4567
//   courier-calc-client @ courier-calc-server            (pipe: the client starts the server)
#include <courier/courier.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>
#include <courier/net/server.hpp>

#include <cstdio>
#include <limits>

#include "calc_api.hpp"

namespace {

struct square_of {
  std::int32_t x = 0;
};

courier::error overflow(const char* what) {
  return courier::error(courier::errc::invalid_argument, std::string("overflow: ") + what + " does not fit in int32");
}

// The result, or an overflow error when `overflowed` says it did not fit in int32.
courier::response_promise<std::int32_t> checked(courier::response_promise<std::int32_t> answer, bool overflowed,
                                                std::int32_t value, const char* what) {
  if (overflowed)
    answer.fail(overflow(what));
  else
    answer.deliver(value);
  return answer;
}

// The actor the server delegates squares to.
class squarer : public courier::actor<squarer, square_of> {
 public:
  courier::response_promise<std::int32_t> on(const square_of& m) {
    std::int32_t product = 0;
    const bool overflowed = __builtin_mul_overflow(m.x, m.x, &product);
    return checked(make_response_promise<std::int32_t>(), overflowed, product, "the square");
  }
};

struct slow_done {
  std::int32_t value = 0;
  std::chrono::steady_clock::time_point due;
  courier::response_promise<std::int32_t> answer;
};

// How long a slow answer sleeps between looks at whether its caller still waits.
constexpr std::chrono::milliseconds slow_step{100};

class calculator : public courier::actor<calculator, calc::add, calc::divide, calc::slow, calc::square, calc::note,
                                         calc::notes_seen, slow_done> {
 public:
  void on_start() { squarer_ = spawn<squarer>(); }
  // Every input is a client's: a result that does not fit, a zero divisor or a negative delay fails
  // the request (an ERROR frame, invalid_argument) and the calculator goes on. A handler that threw
  // would stop the actor instead, and INT32_MIN / -1 would kill the process (SIGFPE).
  courier::response_promise<std::int32_t> on(const calc::add& m) {
    std::int32_t sum = 0;
    const bool overflowed = __builtin_add_overflow(m.a, m.b, &sum);
    return checked(make_response_promise<std::int32_t>(), overflowed, sum, "the sum");
  }
  courier::response_promise<std::int32_t> on(const calc::divide& m) {
    auto answer = make_response_promise<std::int32_t>();
    if (m.b == 0)
      answer.fail(courier::error(courier::errc::invalid_argument, "divide by zero"));
    else if (m.a == std::numeric_limits<std::int32_t>::min() && m.b == -1)
      answer.fail(overflow("the quotient"));
    else
      answer.deliver(m.a / m.b);
    return answer;
  }
  // A slow answer waits in steps, and gives up as soon as nobody can receive it (the caller timed
  // out, or its connection closed): a client that asks for 2^31 ms and goes away holds nothing.
  courier::response_promise<std::int32_t> on(const calc::slow& m) {
    auto answer = make_response_promise<std::int32_t>();
    if (m.delay_ms < 0) {
      answer.fail(courier::error(courier::errc::invalid_argument, "a negative delay"));
      return answer;
    }
    wait_step(slow_done{m.value, std::chrono::steady_clock::now() + std::chrono::milliseconds(m.delay_ms), answer});
    return answer;
  }
  void on(const slow_done& m) {
    auto answer = m.answer;  // a copy shares the one answer
    if (answer.abandoned()) return;
    if (std::chrono::steady_clock::now() < m.due) {
      wait_step(m);
      return;
    }
    answer.deliver(m.value);
  }
  courier::delegated<std::int32_t> on(const calc::square& m) { return delegate(squarer_, square_of{m.x}); }
  void on(const calc::note&) { ++notes_; }
  std::int32_t on(const calc::notes_seen&) { return notes_; }
  void on_stop() { squarer_.reset(); }

 private:
  void wait_step(const slow_done& m) {
    const auto left = m.due - std::chrono::steady_clock::now();
    self().delayed_send(m, left < slow_step ? std::chrono::duration_cast<std::chrono::nanoseconds>(left) : slow_step);
  }

  courier::actor_ref<squarer> squarer_;
  std::int32_t notes_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  courier::net::server_program program{.name = "courier-calc-server"};
  program.base.name = "calc-server";
  // Until a signal (or, over pipe, the end of the one connection); then an orderly stop: calls in
  // flight are answered within the node's grace, new ones refused.
  return courier::net::run_server(argc, argv, program, [](courier::net::server_setup& s) {
    return s.net.serve_on(courier::actor_ref<calc::api>(s.sys.spawn<calculator>()), s.where, s.config);
  });
}
