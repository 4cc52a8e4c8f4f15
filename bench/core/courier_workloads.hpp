// courier_workloads.hpp -- the Courier side of courier-bench: the same workloads as
// caf_peer.hpp, timed the same way (clock starts just before the first send; the handler of the
// last message records the end time), each on a fresh courier::system with default workers.
#pragma once

#include <cstddef>

namespace courier_bench::courier_side {

struct result {
  double ops_per_s = 0;
  double bytes_per_actor = 0;       ///< peak heap during the run (actors, messages, queues) per actor
  double bytes_per_idle_actor = 0;  ///< heap after spawning, before any message, per actor
  double actor_slot_bytes = 0;      ///< the pool slot one W4 actor occupies
  double allocations_per_op = 0;    ///< global operator new calls + pool chunk/large allocations, per op
};

result w1_self_send(std::size_t n);
result w2_ping_pong(std::size_t n);
result w3_fan_in(std::size_t per_sender, std::size_t senders = 4);
/// Memory figures are only meaningful on the first call in a process: later calls reuse the
/// pool slots freed by earlier ones, so no new chunk shows up.
result w4_spawn(std::size_t n);
result w5_ring(std::size_t actors, std::size_t hops);

/// W8: one actor makes n requests to another, each awaited (its continuation makes the next),
/// each with a 1 s time-out (`with_timeout`) or none. ops = requests.
result w8_request(std::size_t n, bool with_timeout);

/// W9: W8's client without a time-out, calling by token (ADD_ through a context_ref) a dynamic
/// service in the same process (net::serve_locally). ops = calls.
result w9_local_context(std::size_t n);

/// Latency percentiles of a blocking round trip, in microseconds.
struct latency {
  double p50_us = 0;
  double p99_us = 0;
};

/// W7: a plain thread (not a worker) `ask`s one actor n times in a row, each awaited before the
/// next; every round trip is timed on its own.
latency w7_ask_latency(std::size_t n);

/// W7's floor: a bare two-thread futex ping-pong (each side sleeps in futex_wait until the other
/// wakes it), n round trips, each timed: what any design that parks must pay.
latency futex_ping_pong_latency(std::size_t n);

/// One thread pushes a pooled message into a mailbox and pops it again, n times: the floor the
/// moodycamel queue is compared with. ns per push+pop.
double mailbox_push_pop_ns(std::size_t n);

}  // namespace courier_bench::courier_side
