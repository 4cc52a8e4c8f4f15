// courier-bench: Courier and CAF 0.17 side by side on the same workloads, in the same run.
//   courier-bench [--quick] [--runs N] [--only W6|W8|W9]
// Prints one line per workload, "W1 self-send courier=<ops/s> caf=<ops/s> ratio=<courier/caf>"
// (W8: "W8 request-timeout courier=<req/s> no_timeout=<req/s> caf=<req/s> ratio=<courier/caf>
// overhead=<no_timeout/courier>"; W9: "W9 local-context courier_context=<calls/s> actor_request=<req/s>
// ratio=<request/context>", a call by token in the same process against an actor request),
// each figure the median of N runs (default 5); --quick is the CI smoke run (sizes / 100, 1 run).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "bench_util.hpp"
#include "caf_peer.hpp"
#include "courier_workloads.hpp"
#include "moodycamel_floor.hpp"
#include "skynet.hpp"

namespace cs = courier_bench::courier_side;
namespace cp = courier_bench::caf_peer;
using courier_bench::median_of;

namespace {

struct figures {
  double ops = 0;
  double bytes_per_actor = 0;
  double bytes_per_idle_actor = 0;
  double allocations_per_op = 0;
};

template <class R>
figures median_result(int runs, const std::function<R()>& f) {
  figures out;
  std::vector<R> all;
  out.ops = median_of(runs, [&] {
    all.push_back(f());
    return all.back().ops_per_s;
  });
  for (const R& r : all) {
    if (r.ops_per_s == out.ops || out.bytes_per_actor == 0) out.bytes_per_actor = r.bytes_per_actor;
    if constexpr (requires { r.allocations_per_op; }) out.allocations_per_op = r.allocations_per_op;
    if constexpr (requires { r.bytes_per_idle_actor; }) out.bytes_per_idle_actor = r.bytes_per_idle_actor;
  }
  return out;
}

void line(const char* name, const figures& courier, const figures& caf, const char* unit) {
  const double ratio = caf.ops > 0 ? courier.ops / caf.ops : 0;
  std::printf("%s courier=%.0f caf=%.0f ratio=%.2f\n", name, courier.ops, caf.ops, ratio);
  std::printf("    courier %.1f ns/%s, caf %.1f ns/%s, courier heap allocations/%s=%.6f\n",
              courier.ops > 0 ? 1e9 / courier.ops : 0.0, unit, caf.ops > 0 ? 1e9 / caf.ops : 0.0, unit, unit,
              courier.allocations_per_op);
  std::fflush(stdout);
}

/// Side by side in one process: requests with a time-out, without, and CAF's with a time-out.
void w6_line(int runs, std::uint64_t leaves) {
  namespace sk = courier_bench::skynet;
  std::vector<sk::run> courier_runs, caf_runs;
  const double c6 = median_of(runs, [&] {
    courier_runs.push_back(sk::courier_side(leaves));
    return courier_runs.back().seconds;
  });
  const double f6 = median_of(runs, [&] {
    caf_runs.push_back(sk::caf_side(leaves));
    return caf_runs.back().seconds;
  });
  const double actors = static_cast<double>(leaves + (leaves - 1) / 9);  // 1,111,111 for 1,000,000 leaves
  bool sums_ok = true;
  std::uint64_t courier_peak = 0, caf_peak = 0;
  for (const auto& r : courier_runs) {
    sums_ok = sums_ok && r.sum == sk::expected_sum(leaves);
    courier_peak = std::max(courier_peak, r.peak_rss_bytes);
  }
  for (const auto& r : caf_runs) {
    sums_ok = sums_ok && r.sum == sk::expected_sum(leaves);
    caf_peak = std::max(caf_peak, r.peak_rss_bytes);
  }
  const double courier_rate = c6 > 0 ? actors / c6 : 0, caf_rate = f6 > 0 ? actors / f6 : 0;
  std::printf("W6 skynet courier=%.0f caf=%.0f ratio=%.2f\n", courier_rate, caf_rate,
              caf_rate > 0 ? courier_rate / caf_rate : 0.0);
  std::printf(
      "    sum %s (%llu), peak resident memory of the run: courier %.1f MB, caf %.1f MB (largest of the runs)\n",
      sums_ok ? "correct" : "WRONG", static_cast<unsigned long long>(sk::expected_sum(leaves)), courier_peak / 1e6,
      caf_peak / 1e6);
  std::fflush(stdout);
}

void w8_line(int runs, std::size_t requests) {
  // With and without a time-out alternate, so that a change in the machine's load hits both alike.
  std::vector<cs::result> without;
  const auto c8 = median_result<cs::result>(runs, [&] {
    without.push_back(cs::w8_request(requests, false));
    return cs::w8_request(requests, true);
  });
  std::size_t at = 0;
  const auto plain = median_result<cs::result>(runs, [&] { return without[at++]; });
  const auto f8 = median_result<cp::result>(runs, [&] { return cp::w8_request_timeout(requests); });
  std::printf("W8 request-timeout courier=%.0f no_timeout=%.0f caf=%.0f ratio=%.2f overhead=%.2f\n", c8.ops, plain.ops,
              f8.ops, f8.ops > 0 ? c8.ops / f8.ops : 0.0, c8.ops > 0 ? plain.ops / c8.ops : 0.0);
  std::printf(
      "    courier %.1f ns/request (%.1f without a time-out), caf %.1f ns/request, courier heap "
      "allocations/request=%.6f\n",
      c8.ops > 0 ? 1e9 / c8.ops : 0.0, plain.ops > 0 ? 1e9 / plain.ops : 0.0, f8.ops > 0 ? 1e9 / f8.ops : 0.0,
      c8.allocations_per_op);
  std::fflush(stdout);
}

// A call by token to a local context against W8's actor request without a time-out, alternating.
void w9_line(int runs, std::size_t calls) {
  std::vector<cs::result> requests;
  const auto c9 = median_result<cs::result>(runs, [&] {
    requests.push_back(cs::w8_request(calls, false));
    return cs::w9_local_context(calls);
  });
  std::size_t at = 0;
  const auto plain = median_result<cs::result>(runs, [&] { return requests[at++]; });
  std::printf("W9 local-context courier_context=%.0f actor_request=%.0f ratio=%.2f\n", c9.ops, plain.ops,
              c9.ops > 0 ? plain.ops / c9.ops : 0.0);
  std::printf("    context %.1f ns/call, actor request %.1f ns/request, context heap allocations/call=%.6f\n",
              c9.ops > 0 ? 1e9 / c9.ops : 0.0, plain.ops > 0 ? 1e9 / plain.ops : 0.0, c9.allocations_per_op);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string only;
  const auto opts = courier_bench::parse_options(
      argc, argv, "Courier against CAF 0.17 on the same workloads, in the same run",
      [&](CLI::App& app) { app.add_option("--only", only, "run just this workload (W6, W8, W9)"); });
  if (!opts.ok) return opts.exit_code;
  if (!only.empty() && only != "W6" && only != "W8" && only != "W9") {
    std::printf("courier-bench: --only %s names no workload of this benchmark (W6, W8, W9)\n", only.c_str());
    return 0;
  }
  const bool quick = opts.quick;
  const int runs = opts.runs;
  const auto n = courier_bench::workload_sizes::for_run(quick);

  std::printf("machine: %s\n", courier_bench::machine_description().c_str());
  std::printf("mode: %s, median of %d run(s) per figure\n", quick ? "quick" : "full", runs);
  if (only == "W8") {
    w8_line(runs, n.w8_requests);
    return 0;
  }
  if (only == "W9") {
    w9_line(runs, n.w8_requests);
    return 0;
  }
  if (only == "W6") {
    w6_line(runs, n.w6_leaves);
    return 0;
  }
  // Memory per actor first, while the pool holds no free slots of an actor's size (later runs
  // reuse the slots of earlier ones and would show no growth at all).
  const cs::result memory = cs::w4_spawn(n.w4_actors);

  line("W1 self-send", median_result<cs::result>(runs, [&] { return cs::w1_self_send(n.w1_messages); }),
       median_result<cp::result>(runs, [&] { return cp::w1_self_send(n.w1_messages); }), "msg");
  line("W2 ping-pong", median_result<cs::result>(runs, [&] { return cs::w2_ping_pong(n.w2_round_trips); }),
       median_result<cp::result>(runs, [&] { return cp::w2_ping_pong(n.w2_round_trips); }), "round-trip");
  line("W3 fan-in", median_result<cs::result>(runs, [&] { return cs::w3_fan_in(n.w3_per_sender, n.w3_senders); }),
       median_result<cp::result>(runs, [&] { return cp::w3_fan_in(n.w3_per_sender, n.w3_senders); }), "msg");
  auto c4 = median_result<cs::result>(runs, [&] { return cs::w4_spawn(n.w4_actors); });
  auto f4 = median_result<cp::result>(runs, [&] { return cp::w4_spawn(n.w4_actors); });
  line("W4 spawn", c4, f4, "actor");
  std::printf("    bytes per actor (peak, with its message queued): courier=%.0f caf=%.0f\n", memory.bytes_per_actor,
              f4.bytes_per_actor);
  std::printf("    courier bytes per idle actor: %.0f measured, %.0f pool slot\n", memory.bytes_per_idle_actor,
              memory.actor_slot_bytes);
  line("W5 thread-ring", median_result<cs::result>(runs, [&] { return cs::w5_ring(n.w5_actors, n.w5_hops); }),
       median_result<cp::result>(runs, [&] { return cp::w5_ring(n.w5_actors, n.w5_hops); }), "hop");

  w6_line(runs, n.w6_leaves);
  {
    // W7: one long run each (percentiles over all round trips), floor first, then Courier.
    const std::size_t asks = quick ? 1'000 : 100'000;
    const cs::latency floor = cs::futex_ping_pong_latency(asks);
    const cs::latency courier = cs::w7_ask_latency(asks);
    std::printf(
        "W7 ask-latency courier_p50_us=%.1f floor_p50_us=%.1f ratio=%.2f courier_p99_us=%.1f floor_p99_us=%.1f\n",
        courier.p50_us, floor.p50_us, floor.p50_us > 0 ? courier.p50_us / floor.p50_us : 0.0, courier.p99_us,
        floor.p99_us);
    std::fflush(stdout);
  }
  w8_line(runs, n.w8_requests);
  w9_line(runs, n.w8_requests);

  std::printf("floor: courier mailbox push+pop %.1f ns, moodycamel enqueue+dequeue %.1f ns (one thread)\n",
              median_of(runs, [&] { return cs::mailbox_push_pop_ns(n.floor_messages); }),
              median_of(runs, [&] { return courier_bench::moodycamel_enqueue_dequeue_ns(n.floor_messages); }));
  return 0;
}
