// caf_peer_main.cpp -- standalone driver for the CAF 0.17 peer workloads.
//   caf-peer-bench [--quick] [--runs N]
// --quick shrinks every workload ~100x (CI smoke run, a few seconds on 2 cores).
// Each number is the median of N runs (default 1).
#include "bench_util.hpp"
#include "caf_peer.hpp"
#include "moodycamel_floor.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace cp = courier_bench::caf_peer;
using courier_bench::median_of;

namespace {

void line(const char* name, double ops, const char* unit_ns) {
  double ns = ops > 0 ? 1e9 / ops : 0.0;
  std::printf("%-16s caf=%.0f ops/s  (%.1f ns per %s)\n", name, ops, ns,
              unit_ns);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int runs = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--runs N]\n", argv[0]);
      return 2;
    }
  }
  const std::size_t div = quick ? 100 : 1;
  const std::size_t w1_n = 1'000'000 / div;
  const std::size_t w2_n = 1'000'000 / div;
  const std::size_t w3_per_sender = 250'000 / div; // x4 senders = 1M messages
  const std::size_t w3_senders = 4;
  const std::size_t w4_n = 100'000 / div;
  const std::size_t w5_actors = 503;
  const std::size_t w5_hops = 10'000'000 / div;
  const std::size_t mc_n = 10'000'000 / div;

  std::printf("machine: %s\n", courier_bench::machine_description().c_str());
  std::printf("mode: %s, runs=%d\n", quick ? "quick" : "full", runs);
  std::fflush(stdout);

  line("W1 self-send", median_of(runs, [&] {
         return cp::w1_self_send(w1_n).ops_per_s;
       }),
       "message");
  line("W2 ping-pong", median_of(runs, [&] {
         return cp::w2_ping_pong(w2_n).ops_per_s;
       }),
       "round trip");
  line("W3 fan-in", median_of(runs, [&] {
         return cp::w3_fan_in(w3_per_sender, w3_senders).ops_per_s;
       }),
       "message");
  double w4_bytes = 0;
  double w4_ops = median_of(runs, [&] {
    auto r = cp::w4_spawn(w4_n);
    w4_bytes = r.bytes_per_actor; // bytes of the last run
    return r.ops_per_s;
  });
  line("W4 spawn", w4_ops, "actor");
  std::printf("W4 bytes/actor   caf=%.0f (peak live heap via counting operator "
              "new, n=%zu)\n",
              w4_bytes, w4_n);
  line("W5 ring", median_of(runs, [&] {
         return cp::w5_ring(w5_actors, w5_hops).ops_per_s;
       }),
       "hop");
  double mc = median_of(runs, [&] {
    return courier_bench::moodycamel_enqueue_dequeue_ns(mc_n);
  });
  std::printf("moodycamel floor %.1f ns per enqueue+dequeue (n=%zu)\n", mc,
              mc_n);
  return 0;
}
