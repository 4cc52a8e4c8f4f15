#include "moodycamel_floor.hpp"

#include <chrono>
#include <cstdint>

#if __has_include(<concurrentqueue/concurrentqueue.h>)
#include <concurrentqueue/concurrentqueue.h>
#else
#include <concurrentqueue.h>
#endif

namespace courier_bench {

namespace {

std::uint64_t run_pairs(moodycamel::ConcurrentQueue<int>& q, std::size_t n) {
  std::uint64_t sum = 0;
  int out = 0;
  for (std::size_t i = 0; i < n; ++i) {
    q.enqueue(static_cast<int>(i));
    if (q.try_dequeue(out)) sum += static_cast<std::uint64_t>(out);
  }
  return sum;
}

}  // namespace

double moodycamel_enqueue_dequeue_ns(std::size_t n) {
  if (n == 0) return 0.0;
  moodycamel::ConcurrentQueue<int> q;
  volatile std::uint64_t sink = run_pairs(q, n < 100000 ? n : 100000);
  auto t0 = std::chrono::steady_clock::now();
  sink = sink + run_pairs(q, n);
  auto t1 = std::chrono::steady_clock::now();
  (void)sink;
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}

}  // namespace courier_bench
