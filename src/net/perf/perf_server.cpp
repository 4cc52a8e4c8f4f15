// courier-perf-server: the server side of courier-perf. Every connection is a session with its own
// count of the one-way sends it took; the parent context serves the perf services (perf_protocol.hpp)
// and opens child contexts that serve ADD5 and NOTH.
//   courier-perf-server --uds --file /tmp/perf.sock       (or --tcp --port P; a pipe client starts it)
#include <courier/courier.hpp>
#include <courier/net/server.hpp>
#include <courier/net/services.hpp>
#include <courier/net/session.hpp>
#include <courier/wire/copy.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "perf_protocol.hpp"

namespace net = courier::net;

namespace {

/// ADD5's sum, or nothing when the items are not five int32 (the call then fails naming why).
std::optional<std::int32_t> sum_of_five(net::incoming& call) {
  std::int32_t sum = 0;
  for (int i = 0; i < 5; ++i) {
    const auto v = call.read<std::int32_t>();
    if (!v) return std::nullopt;
    sum += *v;
  }
  return sum;
}

void add_nothing(net::service_table& table) {
  table.add(courier::perf::nothing, [](net::incoming&) {}, {"()", "", "does nothing: the cost of a call alone"});
}

void add_common(net::service_table& table) {
  add_nothing(table);
  table.add(courier::perf::add_five,
            [](net::incoming& call) {
              if (auto sum = sum_of_five(call)) call.reply().add(*sum);
            },
            {"(int32 a, int32 b, int32 c, int32 d, int32 e)", "int32", "their sum"});
}

/// The children every session opens share one table: they keep no state.
std::shared_ptr<const net::service_table> child_services() {
  auto table = std::make_shared<net::service_table>();
  add_common(*table);
  return table;
}

net::session make_session(const std::shared_ptr<const net::service_table>& children) {
  auto taken = std::make_shared<std::int64_t>(0);  // touched only in this connection's turns
  auto table = std::make_shared<net::service_table>();
  add_nothing(*table);
  table->add(courier::perf::add_five,
             [taken](net::incoming& call) {
               const auto sum = sum_of_five(call);
               if (!sum) return;
               if (call.one_way())
                 ++*taken;
               else
                 call.reply().add(*sum);
             },
             {"(int32 a, int32 b, int32 c, int32 d, int32 e)", "int32", "their sum; one-way, counted (SNT_)"});
  table->add(courier::perf::sends_taken, [taken](net::incoming& call) { call.reply().add(*taken); },
             {"()", "int64", "the one-way ADD5 this session has taken"});
  table->add(courier::perf::echo_list,
             [](net::incoming& call) { courier::wire::copy_items(call.items(), call.reply()); },
             {"", "", "echoes its items back, whatever they are"});
  table->children(
      [children](courier::token kind, std::string_view) { return kind == courier::token{} ? children : nullptr; });
  net::session s;
  s.services = std::move(table);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  net::server_program program{.name = "courier-perf-server"};
  program.base.max_child_contexts = 64;
  program.offers_start_modes = true;  // a session shares nothing with the others
  return net::run_server(argc, argv, program, [](net::server_setup& s) {
    auto children = child_services();
    return s.net.serve_sessions([children](const net::peer_info&, net::context_ref) { return make_session(children); },
                                s.where, s.config);
  });
}
