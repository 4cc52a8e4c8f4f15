#pragma once
/// @file
/// courier-perf's tests: each calls a courier-perf-server (perf_protocol.hpp) for a given time and
/// counts what it completed, checking every answer (a wrong sum, a lost send or an ERROR fails the
/// test, naming why).
///
/// Thread-safety: one thread runs a perf_client's tests (a plain thread: the waiting tests block it).

#include <array>
#include <chrono>
#include <optional>
#include <string_view>

#include "courier/error.hpp"
#include "courier/net/connection_config.hpp"
#include "courier/net/context.hpp"
#include "courier/net/endpoint.hpp"
#include "courier/net/node.hpp"
#include "courier/system.hpp"
#include "perf_raw.hpp"

namespace courier::perf {

/// One test: its option (without the dashes), what it does, and the raw limit it is held against.
struct test_info {
  std::string_view name;
  std::string_view help;
  std::string_view bound;  // a raw figure's name
};

inline constexpr std::array<test_info, 7> all_tests{{
    {"send-nothing", "An empty service called and waited for (END_AND_WAIT, no items)", "raw-roundtrip"},
    {"send", "One-way sends (END) of five int32; the server's count checks none was lost", "raw-pipelined"},
    {"send-and-callback", "Calls of five int32 with a callback for the sum (END_AND_CALLBACK), 64 in flight",
     "raw-pipelined"},
    {"send-and-wait", "Calls of five int32 waited for one at a time (END_AND_WAIT)", "raw-roundtrip"},
    {"parent", "A whole session created and deleted: connection, handshake, session start and stop", "raw-connect"},
    {"child", "A child context opened and closed on one connection", "raw-roundtrip"},
    {"bfl", "A list of 24 typed items (int32, float64, string) echoed back and compared", "raw-roundtrip"},
}};

inline constexpr std::array<std::string_view, 3> raw_tests{"raw-roundtrip", "raw-pipelined", "raw-connect"};

/// The client side of the tests, against one server endpoint.
class perf_client {
 public:
  perf_client(courier::system& sys, net::node& node, net::endpoint where, net::connection_config cfg,
              std::chrono::milliseconds timeout)
      : sys_(sys), node_(node), where_(std::move(where)), cfg_(std::move(cfg)), timeout_(timeout) {}
  ~perf_client();

  /// Runs test `name` (one of all_tests) for `run_for`, after a tenth of that as warm-up.
  courier::result<measured> run(std::string_view name, std::chrono::duration<double> run_for);

 private:
  courier::result<net::context_ref> server();
  courier::result<measured> run_once(std::string_view name, std::chrono::duration<double> run_for);

  courier::system& sys_;
  net::node& node_;
  net::endpoint where_;
  net::connection_config cfg_;
  std::chrono::milliseconds timeout_;
  std::optional<net::context_ref> server_;  // the connection the tests share (parent makes its own)
};

}  // namespace courier::perf
