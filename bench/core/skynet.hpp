// skynet.hpp -- W6, the skynet tree: each actor spawns 10 children down to `leaves` leaves (1,000,000:
// 1,111,111 actors); a leaf answers with its number, an inner node with the sum of its children's
// answers, so the root's answer is leaves * (leaves - 1) / 2 (499999500000). Both sides are written
// the natural way: a request per child, and a deferred reply (a response promise) per inner node.
// Each run is in a forked child process, so its peak resident memory is its own.
#pragma once

#include <cstdint>

namespace courier_bench::skynet {

struct run {
  std::uint64_t sum = 0;
  double seconds = 0;
  std::uint64_t peak_rss_bytes = 0;  ///< peak resident set of the run, above the child's start
};

std::uint64_t expected_sum(std::uint64_t leaves);
run courier_side(std::uint64_t leaves);
run caf_side(std::uint64_t leaves);

}  // namespace courier_bench::skynet
