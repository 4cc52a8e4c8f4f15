// caf_peer_main.cpp -- standalone driver for the CAF 0.17 peer workloads.
//   caf-peer-bench [--quick] [--runs N]
// --quick shrinks every workload ~100x (CI smoke run, a few seconds on 2 cores).
// Each number is the median of N runs (default 5, or 1 with --quick).
#include "bench_util.hpp"
#include "caf_peer.hpp"
#include "moodycamel_floor.hpp"

#include <cstdio>
#include <string>

namespace cp = courier_bench::caf_peer;
using courier_bench::median_of;

namespace {

void line(const char* name, double ops, const char* unit_ns) {
  double ns = ops > 0 ? 1e9 / ops : 0.0;
  std::printf("%-16s caf=%.0f ops/s  (%.1f ns per %s)\n", name, ops, ns, unit_ns);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const auto opts = courier_bench::parse_options(argc, argv, "CAF 0.17 on courier-bench's workloads, alone");
  if (!opts.ok) return opts.exit_code;
  const bool quick = opts.quick;
  const int runs = opts.runs;
  const auto n = courier_bench::workload_sizes::for_run(quick);

  std::printf("machine: %s\n", courier_bench::machine_description().c_str());
  std::printf("mode: %s, runs=%d\n", quick ? "quick" : "full", runs);
  std::fflush(stdout);

  line("W1 self-send", median_of(runs, [&] { return cp::w1_self_send(n.w1_messages).ops_per_s; }), "message");
  line("W2 ping-pong", median_of(runs, [&] { return cp::w2_ping_pong(n.w2_round_trips).ops_per_s; }), "round trip");
  line("W3 fan-in", median_of(runs, [&] { return cp::w3_fan_in(n.w3_per_sender, n.w3_senders).ops_per_s; }), "message");
  double w4_bytes = 0;
  double w4_ops = median_of(runs, [&] {
    auto r = cp::w4_spawn(n.w4_actors);
    w4_bytes = r.bytes_per_actor;  // bytes of the last run
    return r.ops_per_s;
  });
  line("W4 spawn", w4_ops, "actor");
  std::printf(
      "W4 bytes/actor   caf=%.0f (peak live heap via counting operator "
      "new, n=%zu)\n",
      w4_bytes, n.w4_actors);
  line("W5 ring", median_of(runs, [&] { return cp::w5_ring(n.w5_actors, n.w5_hops).ops_per_s; }), "hop");
  line("W8 request-timeout", median_of(runs, [&] { return cp::w8_request_timeout(n.w8_requests).ops_per_s; }),
       "request");
  double mc = median_of(runs, [&] { return courier_bench::moodycamel_enqueue_dequeue_ns(n.floor_messages); });
  std::printf("moodycamel floor %.1f ns per enqueue+dequeue (n=%zu)\n", mc, n.floor_messages);
  return 0;
}
