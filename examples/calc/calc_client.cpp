// The calculator client: every call style against the calculator server, over whichever transport
// the options name. The code is the same for all three; only the options change:
//   courier-calc-client @ courier-calc-server                 (pipe: starts the server itself)
//   courier-calc-client --uds --file /tmp/calc.sock
//   courier-calc-client --tcp --port 4567
// Exits 0 when every answer is the expected one.
#include <courier/courier.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <limits>
#include <string>

#include "calc_api.hpp"

using namespace std::chrono_literals;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%-4s %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  auto opts = courier::net::parse_options(argc, argv, "courier-calc-client");
  if (!opts) {
    std::fprintf(stderr, "%s", courier::net::options_error("courier-calc-client", opts.err()).c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", courier::net::options_help("courier-calc-client").c_str());
    return 0;
  }
  courier::system sys;
  courier::net::node net(sys);
  courier::net::connection_config base;
  base.name = "calc-client";
  const courier::net::connection_config cfg = courier::net::config_from(*opts, base);
  auto connected = net.connect<calc::api>(opts->where, cfg);
  if (!connected) {
    std::fprintf(stderr, "courier-calc-client: cannot connect to %s: %s\n", to_string(opts->where).c_str(),
                 connected.err().describe().c_str());
    return 1;
  }
  courier::actor_ref<calc::api> calc = *connected;  // the same type as a local calculator's ref
  const auto timeout = opts->timeout;

  // WAIT: a blocking call from this (plain) thread.
  auto sum = calc.ask(calc::add{2, 3}, timeout);
  expect(sum && *sum == 5, "add 2 + 3 = " + (sum ? std::to_string(*sum) : sum.err().describe()));

  // An ERROR reply: the caller sees the error the server's handler failed with, and its text.
  auto quotient = calc.ask(calc::divide{1, 0}, timeout);
  expect(!quotient && quotient.err() == courier::errc::invalid_argument &&
             quotient.err().text.find("divide by zero") != std::string::npos,
         "divide 1 / 0 fails: " + (quotient ? std::to_string(*quotient) : quotient.err().describe()));

  // Every input gets an answer: INT32_MIN / -1 does not fit, and the server says so.
  auto overflow = calc.ask(calc::divide{std::numeric_limits<std::int32_t>::min(), -1}, timeout);
  expect(!overflow && overflow.err() == courier::errc::invalid_argument &&
             overflow.err().text.find("overflow") != std::string::npos,
         "divide INT32_MIN / -1 fails: " + (overflow ? std::to_string(*overflow) : overflow.err().describe()));

  // A time-out: the server answers after 500 ms, the client waits 100 ms.
  auto late = calc.ask(calc::slow{500, 1}, 100ms);
  expect(!late && late.err() == courier::errc::request_timeout,
         "slow call times out: " + (late ? std::to_string(*late) : late.err().describe()));

  // CALLBACK: a request whose continuation runs later (here on the host lane, off this thread).
  std::promise<std::int32_t> squared;
  calc.request(calc::square{7}, timeout)
      .then([&squared](std::int32_t v) { squared.set_value(v); },
            [&squared](const courier::error&) { squared.set_value(-1); });
  auto sq = squared.get_future();
  expect(sq.wait_for(timeout) == std::future_status::ready && sq.get() == 49, "square 7 = 49 (answered by a delegate)");

  // END: one-way sends; a later call sees them, since one connection keeps their order.
  for (int i = 0; i < 3; ++i) calc.send(calc::note{"note " + std::to_string(i)});
  auto seen = calc.ask(calc::notes_seen{}, timeout);
  expect(seen && *seen == 3,
         "3 notes sent one-way, server saw " + (seen ? std::to_string(*seen) : seen.err().describe()));

  // The slow call's late reply arrives after its time-out and is dropped.
  auto after = calc.ask(calc::slow{0, 42}, timeout);
  expect(after && *after == 42, "a call after the time-out still works");

  std::printf("%s: %d failure(s) over %s\n", failures == 0 ? "passed" : "FAILED", failures,
              to_string(opts->where).c_str());
  return failures == 0 ? 0 : 1;
}
