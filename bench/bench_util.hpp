// bench_util.hpp -- header-only helpers shared by the CAF peer and the Courier
// side of courier-bench.
//
//  * median_of(runs, f)      -- median of `runs` calls of a double-returning f
//  * machine_description()   -- "CPU model | N cores | kernel" one-liner
//  * allocation counters     -- from tests/support/counting_allocator.hpp; the
//                               executable links the courier_counting_allocator
//                               object library, which replaces operator new.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../src/net/perf/machine.hpp"  // the machine line, as courier-perf prints it
#include "counting_allocator.hpp"

namespace courier_bench {

/// The median of `xs` (0 when empty); for an even count, the mean of the two middle values.
inline double median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  auto mid = xs.size() / 2;
  if (xs.size() % 2 == 1) return xs[mid];
  return (xs[mid - 1] + xs[mid]) / 2.0;
}

/// Runs f() `runs` times (at least once) and returns the median of the results.
template <class F>
double median_of(int runs, F f) {
  if (runs < 1) runs = 1;
  std::vector<double> xs;
  xs.reserve(static_cast<std::size_t>(runs));
  for (int i = 0; i < runs; ++i) xs.push_back(static_cast<double>(f()));
  return median(std::move(xs));
}

using courier::perf::machine_description;

/// The command line every benchmark takes (CLI11): [--quick] [--runs N], plus the program's own
/// options, which `extra` adds to the same parser (--only, say). --quick is the CI smoke run:
/// smaller sizes and one run unless --runs says otherwise. scripts/run hands every benchmark the
/// same line, so each takes --only, and one that names none of its figures says so and runs nothing.
struct options {
  bool quick = false;
  int runs = 5;
  bool ok = true;  ///< false after printing why (or the help, asked for): exit with exit_code
  int exit_code = 0;
};

inline options parse_options(int argc, char** argv, const std::string& description,
                             const std::function<void(CLI::App&)>& extra = {}) {
  options o;
  CLI::App app{description};
  app.add_flag("--quick", o.quick, "the CI smoke run: smaller sizes, one run");
  auto* runs = app.add_option("--runs", o.runs, "runs per figure (the median is printed)")->check(CLI::PositiveNumber);
  if (extra) extra(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    o.exit_code = app.exit(e);
    o.ok = false;
    return o;
  }
  if (o.quick && runs->count() == 0) o.runs = 1;
  return o;
}

/// The workloads' sizes, shared by the Courier and CAF sides.
struct workload_sizes {
  std::size_t w1_messages, w2_round_trips, w3_per_sender, w3_senders, w4_actors, w5_actors, w5_hops, floor_messages,
      w8_requests, w6_leaves;

  static workload_sizes for_run(bool quick) {
    const std::size_t div = quick ? 100 : 1;
    return {1'000'000 / div,  1'000'000 / div, 250'000 / div,  4, 1'000'000 / div, 503, 10'000'000 / div,
            10'000'000 / div, 1'000'000 / div, 1'000'000 / div};
  }
};

// The allocation counters: the shared counting operator new (tests/support).
using counting_allocator::allocation_count;
using counting_allocator::live_bytes;
using counting_allocator::peak_live_bytes;
using counting_allocator::reset_peak;

}  // namespace courier_bench
