// caf_peer.hpp -- CAF 0.17 peer workloads for courier-bench.
//
// Every workload:
//  * creates its OWN caf::actor_system (fresh per call, no lazily shared one),
//    so runs are independent; system start-up and shutdown are not timed.
//    The scheduler is CAF's default work-stealing scheduler with
//    scheduler.max-threads set explicitly to std::thread::hardware_concurrency()
//    (note: CAF 0.17's own default would be max(4, hardware_concurrency)).
//  * times wall-clock (steady_clock) from just before the first message is sent
//    (by a caf::scoped_actor on the calling thread) until the last message is
//    handled: the handler of the last message stores the end timestamp itself,
//    so the wake-up latency of the waiting thread is not included. W4 also
//    times the spawning, which is the workload.
//  * waits for a "done" message with a timeout (default 120 s, see
//    set_timeout). On timeout it prints a warning to stderr, kills its actors
//    and returns ops_per_s = 0.
//  * returns 0 ops for degenerate sizes (n == 0 etc.).
#pragma once

#include <chrono>
#include <cstddef>

namespace courier_bench::caf_peer {

struct result {
  double ops_per_s;
  double bytes_per_actor = 0;
};

/// W1: one actor sends itself an int and handles it, n times, sequentially
/// (each handler sends the next message). ops = messages.
result w1_self_send(std::size_t n);

/// W2: two actors, n round trips (ping sends an int, pong replies with it).
/// ops = round trips.
result w2_ping_pong(std::size_t n);

/// W3: `senders` sender actors each send per_sender ints (as fast as they can,
/// from one handler) to one receiver that counts them. ops = total messages.
result w3_fan_in(std::size_t per_sender, std::size_t senders = 4);

/// W4: spawns n actors (all of them first, so all are live at the same time),
/// then sends each one int; each actor quits on that message. Timed from
/// before the first spawn until the last actor handled its message.
/// ops = actors/s. bytes_per_actor = (peak live heap bytes during the run -
/// live bytes before it) / n, measured with the counting global operator new
/// from bench_alloc.cpp (courier_bench::peak_live_bytes; malloc usable sizes).
/// Requires bench/bench_alloc.cpp in the same executable (it defines the
/// counters; without it the link fails). The timeout only covers the wait
/// after all actors are spawned and messaged.
result w4_spawn(std::size_t n);

/// W5: `actors` actors in a ring pass one token for `hops` hops
/// (the classic benchmark: 503 actors, 10,000,000 hops). ops = hops/s.
result w5_ring(std::size_t actors, std::size_t hops);

/// W8: one actor makes n requests to another with `request(..., 1s)`, each awaited (its
/// `then` makes the next). ops = requests.
result w8_request_timeout(std::size_t n);

/// Timeout for each workload (default 120 s).
void set_timeout(std::chrono::milliseconds timeout);

}  // namespace courier_bench::caf_peer
