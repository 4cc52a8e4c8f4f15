// moodycamel_floor.hpp -- raw moodycamel::ConcurrentQueue cost, the floor a
// Courier mailbox should beat.
#pragma once

#include <cstddef>

namespace courier_bench {

/// Single thread, moodycamel::ConcurrentQueue<int> without tokens (implicit
/// producer, like an arbitrary sender would use): for each of n messages one
/// enqueue() immediately followed by one try_dequeue(), i.e. the queue stays
/// (almost) empty, as a busy mailbox would. Returns ns per enqueue+dequeue
/// pair. A warm-up of min(n, 100000) pairs runs first and is not timed.
double moodycamel_enqueue_dequeue_ns(std::size_t n);

}  // namespace courier_bench
