#pragma once
/// @file
/// The mailbox: an intrusive multi-producer, single-consumer queue whose nodes are the pooled
/// message slots themselves, with the actor's idle/scheduled/closed state folded into the same
/// word (CAF's lifo_inbox design), plus an urgent lane and an optional capacity.
///
/// A push is one CAS on `head_`; it also tells the producer whether the consumer was idle and so
/// must be scheduled. The consumer takes the whole stack with one exchange and reverses it into
/// FIFO order on its own cache line, then works through that batch without touching shared state.
/// Because each producer's pushes are ordered by its CASes, messages from one sender arrive in the
/// order they were sent.
///
/// The urgent lane (replies, stop requests, `down`) is a second stack, `urgent_`, on the consumer's
/// cache line. The consumer looks at it before every message (one relaxed load of a line it owns,
/// so it costs nothing measurable while the lane is empty) and serves what it finds before the rest
/// of its batch: an urgent message overtakes everything queued and takes effect after the message
/// being handled. An urgent push wakes an idle consumer by moving `head_` from idle to empty; the
/// consumer re-checks the urgent lane after it goes idle, and both sides order these steps with
/// sequentially consistent operations (a Dekker handshake), so exactly one of them schedules.
///
/// A capacity (0: unbounded) limits the normal lane. Bounded mailboxes count every normal-lane
/// message in `size_` (one atomic add per push; the consumer subtracts once per batch);
/// `try_push` refuses a message that would exceed the capacity. Unbounded mailboxes never touch
/// the counter.
/// The urgent lane is never counted and never refuses a message: a reply must always arrive.
///
/// A bounded mailbox may also refuse whatever its count (`set_refusing`): its owner says it cannot
/// take more for now (a connection whose output is above its high-water mark). The state is one
/// high bit of `size_` (refusing_bias), so `try_push`'s one atomic add already sees it: a count at
/// or above the bias is never below the capacity. Refusing costs the push nothing it did not pay,
/// and unbounded mailboxes cannot refuse (they keep no count), so they pay nothing either.
///
/// The layout keeps producers and the consumer apart without wasting a line: the producers' word
/// (and the bounded counter) share the first cache line only with `Shared`, fields that are
/// written rarely (an actor's identity and reference count); the consumer's cursor starts the
/// second line, and whatever follows the mailbox in its owner (the actor's own state) fills the
/// rest of that line. The owner must therefore be allocated 64-byte aligned, as `system::spawn` does.
///
/// A consumer that a blocked thread drives (a plain thread's `ask` running the connection actor it
/// waits on, see scheduler.cpp: drive_while_waiting) goes *held* instead of idle: nobody may
/// schedule it, and the push that finds it held (`woke_holder`) must wake its driver, which takes
/// it back (`take_hold`) and runs it. The driver gives it up with `release_hold`, which leaves it
/// idle, or reports that pushes came meanwhile and the driver must schedule it.
///
/// Messages the consumer sends to itself skip the shared word: `push_local` appends them to a
/// consumer-only list that is served after the messages already taken from the producers, so a
/// self-sending actor cannot starve its other senders.
///
/// Thread-safety: `push`, `try_push`, `push_urgent`, `queued` and `closed` from any thread;
/// everything else only from the consumer (the actor's resume), including `close`, which the
/// consumer calls when the actor stops, and `set_refusing`. `set_capacity` only before the
/// mailbox is shared.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "courier/detail/assert.hpp"
#include "courier/detail/message.hpp"

namespace courier::detail {

enum class push_result : std::uint8_t {
  queued,       ///< the consumer is already scheduled or running
  woke_reader,  ///< the consumer was idle: the caller must schedule it
  closed,       ///< the mailbox is closed: the message was not taken
  full,         ///< a bounded mailbox is at its capacity: the message was not taken
  woke_holder,  ///< the consumer was held by a blocked driver: the caller must wake that driver
};

struct no_shared_fields {};

template <std::size_t N>
struct padding {
  char bytes[N];
};
template <>
struct padding<0> {};

template <class Shared = no_shared_fields>
class mailbox {
 public:
  /// Mailboxes start idle: the first push schedules the actor.
  mailbox() noexcept = default;
  mailbox(const mailbox&) = delete;
  mailbox& operator=(const mailbox&) = delete;

  /// Bounds the normal lane to `n` messages (0: unbounded). Before the first push only.
  void set_capacity(std::uint32_t n) noexcept { capacity_ = n; }
  std::uint32_t capacity() const noexcept { return capacity_; }

  /// Consumer only, bounded mailboxes only (on an unbounded one it does nothing): while on,
  /// `try_push` and `push_local` refuse every message with `full`, as at capacity; `push` and the
  /// urgent lane still take theirs. Messages already queued stay queued. Not after `close`.
  void set_refusing(bool on) noexcept {
    if (capacity_ == 0 || refusing() == on) return;
    COURIER_ASSERT(capacity_ < refusing_bias, "courier: a refusing mailbox needs a capacity below 2^31");
    // Only the consumer moves the bias; producers' +1/-1 never reach it (the count stays far
    // below 2^31), so the bit read above is still ours to flip.
    if (on)
      size_.fetch_add(refusing_bias, std::memory_order_relaxed);
    else
      size_.fetch_sub(refusing_bias, std::memory_order_relaxed);
  }
  /// Whether `set_refusing(true)` is in force. Any thread.
  bool refusing() const noexcept { return (size_.load(std::memory_order_relaxed) & refusing_bias) != 0; }

  /// A normal-lane push that is never refused for capacity (a graceful stop request); on a
  /// bounded mailbox it is still counted.
  push_result push(message_header* msg) noexcept {
    if (capacity_ != 0) [[unlikely]]
      size_.fetch_add(1, std::memory_order_relaxed);
    return push_counted(msg);
  }

  /// A normal-lane push that a full bounded mailbox refuses with `full` (the message stays the
  /// caller's). On an unbounded mailbox, the same as `push`.
  push_result try_push(message_header* msg) noexcept {
    if (capacity_ != 0) [[unlikely]] {
      if (!reserve()) return push_result::full;
    }
    return push_counted(msg);
  }

  /// The urgent lane: served before anything queued, never refused for capacity.
  push_result push_urgent(message_header* msg) noexcept {
    msg->urgent = true;
    std::uintptr_t top = urgent_.load(std::memory_order_relaxed);
    do {
      if (top == closed_tag) return push_result::closed;
      msg->next = reinterpret_cast<message_header*>(top);
    } while (!urgent_.compare_exchange_weak(top, reinterpret_cast<std::uintptr_t>(msg), std::memory_order_seq_cst,
                                            std::memory_order_relaxed));
    // The message is visible to the consumer; now make sure the consumer runs. seq_cst pairs
    // with try_block: either it sees our message after going idle, or we see it idle here.
    std::uintptr_t head = head_.load(std::memory_order_seq_cst);
    while (head == idle_tag) {
      if (head_.compare_exchange_weak(head, empty_tag, std::memory_order_acq_rel, std::memory_order_relaxed))
        return push_result::woke_reader;
    }
    while (head == held_tag) {
      if (head_.compare_exchange_weak(head, empty_tag, std::memory_order_acq_rel, std::memory_order_relaxed))
        return push_result::woke_holder;
    }
    // Empty or a stack: the consumer is scheduled or running and will look at the urgent lane.
    // Closed: close() took the urgent lane after our CAS, so it owns (and discards) the message.
    return push_result::queued;
  }

  /// Consumer only: a message from the consumer to itself, with no atomic operation on an
  /// unbounded mailbox. A full bounded mailbox refuses it (`full`); otherwise `queued`.
  push_result push_local(message_header* msg) noexcept {
    if (capacity_ != 0) [[unlikely]] {
      if (!reserve()) return push_result::full;
    }
    msg->next = local_;  // a stack, like the shared one: reversed when taken
    local_ = msg;
    return push_result::queued;
  }

  /// Consumer only: the next message, urgent ones first, else in FIFO order; null when the
  /// mailbox is empty right now.
  message_header* pop() noexcept {
    if (urgent_.load(std::memory_order_relaxed) != 0) [[unlikely]]
      take_urgent();
    message_header* m = batch_;
    if (m == nullptr) [[unlikely]] {
      m = refill();
      if (m == nullptr) return nullptr;
    }
    batch_ = m->next;
    ++popped_;
    return m;
  }

  /// Consumer only: what the next `pop` returns, left in place; null when the mailbox is empty
  /// right now. Takes the urgent lane and a new batch as `pop` would (for tests and tools).
  message_header* peek() noexcept {
    if (urgent_.load(std::memory_order_relaxed) != 0) take_urgent();
    if (batch_ == nullptr) batch_ = refill();
    return batch_;
  }

  /// Marks the mailbox idle (or held, for a driver: see above) if nothing arrived; false means a
  /// message is waiting and the consumer must keep running. After `true`, the next push reports
  /// `woke_reader` (`woke_holder`).
  bool try_block(bool hold = false) noexcept {
    const std::uintptr_t parked = hold ? held_tag : idle_tag;
    if (batch_ != nullptr || local_ != nullptr) return false;
    release_popped();
    if (urgent_.load(std::memory_order_seq_cst) != 0) return false;
    std::uintptr_t expected = empty_tag;
    if (!head_.compare_exchange_strong(expected, parked, std::memory_order_seq_cst, std::memory_order_relaxed))
      return false;
    // An urgent push between the check above and the CAS saw head_ not idle and did not
    // schedule us: take the wake-up back, unless a producer has just claimed it.
    if (urgent_.load(std::memory_order_seq_cst) != 0) {
      expected = parked;
      if (head_.compare_exchange_strong(expected, empty_tag, std::memory_order_acq_rel, std::memory_order_relaxed))
        return false;
    }
    return true;
  }

  /// The driver of a held consumer takes it back to run it. Pushes may have done so already
  /// (each reported woke_holder): either way the caller is the consumer again.
  void take_hold() noexcept {
    std::uintptr_t expected = held_tag;
    head_.compare_exchange_strong(expected, empty_tag, std::memory_order_acq_rel, std::memory_order_relaxed);
  }

  /// The driver of a held consumer lets it go: true when it is idle now (the next push schedules
  /// it as usual); false when pushes came meanwhile, and the caller must schedule it.
  bool release_hold() noexcept {
    std::uintptr_t expected = held_tag;
    return head_.compare_exchange_strong(expected, idle_tag, std::memory_order_seq_cst, std::memory_order_relaxed);
  }

  /// Refuses all later pushes and hands back what was queued, urgent messages first, then FIFO,
  /// for the caller to discard.
  message_header* close() noexcept {
    // The urgent lane closes first: an urgent producer that sees head_ closed knows close() has
    // already taken its message.
    std::uintptr_t urgent = urgent_.exchange(closed_tag, std::memory_order_acq_rel);
    std::uintptr_t taken = head_.exchange(closed_tag, std::memory_order_acq_rel);
    message_header* shared = nullptr;
    if (taken > held_tag) shared = reverse(reinterpret_cast<message_header*>(taken));
    message_header* all = nullptr;
    if (urgent != 0 && urgent != closed_tag) all = reverse(reinterpret_cast<message_header*>(urgent));
    // The unconsumed batch comes next (urgent messages already taken lead it): it was pushed
    // before anything still on the stack.
    all = append(all, batch_);
    all = append(all, shared);
    all = append(all, reverse(local_));
    batch_ = local_ = nullptr;
    popped_ = 0;
    if (capacity_ != 0) size_.store(0, std::memory_order_relaxed);
    return all;
  }

  bool closed() const noexcept { return head_.load(std::memory_order_acquire) == closed_tag; }

  /// Consumer only: the batch taken from the producers is used up and the consumer has sent
  /// itself nothing since, so the next `pop` takes a new batch from the producers (or finds none).
  /// What the consumer sent itself is not a new batch: it follows from what it handled (a
  /// handler's send to its own actor), so it is handled first. No atomic operation: it reads the
  /// consumer's own line.
  bool batch_used_up() const noexcept { return batch_ == nullptr && local_ == nullptr; }

  /// Messages waiting in the normal lane, approximately. Bounded mailboxes: the count the capacity
  /// is checked against; it includes messages handled in the consumer's current batch or turn
  /// (at most one batch, at most `config::throughput` messages), since the consumer subtracts its
  /// pops once per batch, and it may be off by sends in flight. Unbounded mailboxes keep no
  /// counter (it would cost every send an atomic add): always 0. Any thread.
  std::uint32_t queued() const noexcept {
    return capacity_ != 0 ? size_.load(std::memory_order_relaxed) & (refusing_bias - 1) : 0;
  }

 private:
  /// A bounded mailbox's count drops once per batch (or turn), not once per message: the
  /// consumer keeps its pops in a plain counter and subtracts them when it takes a new batch or
  /// goes idle (both only with the batch used up, so every urgent message taken in between has
  /// been popped and uncounted again), and writes the producers' line once per batch.
  void release_popped() noexcept {
    if (popped_ != 0) {
      if (capacity_ != 0) size_.fetch_sub(popped_, std::memory_order_relaxed);
      popped_ = 0;
    }
  }

  bool reserve() noexcept {
    if (size_.fetch_add(1, std::memory_order_relaxed) < capacity_) return true;
    size_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }

  push_result push_counted(message_header* msg) noexcept {
    std::uintptr_t top = head_.load(std::memory_order_relaxed);
    for (;;) {
      if (top == closed_tag) {
        if (capacity_ != 0) size_.fetch_sub(1, std::memory_order_relaxed);
        return push_result::closed;
      }
      msg->next = top <= held_tag ? nullptr : reinterpret_cast<message_header*>(top);
      // acq_rel, not release: a push that wakes the reader must acquire the consumer's last
      // try_block, so the thread that runs the actor next (scheduled by this producer) sees the
      // consumer-side fields (batch_, local list) the previous run left behind.
      if (head_.compare_exchange_weak(top, reinterpret_cast<std::uintptr_t>(msg), std::memory_order_acq_rel,
                                      std::memory_order_relaxed))
        return top == idle_tag   ? push_result::woke_reader
               : top == held_tag ? push_result::woke_holder
                                 : push_result::queued;
    }
  }

  /// The producers' stack in FIFO order followed by the local list; null when both are empty.
  message_header* refill() noexcept {
    release_popped();
    message_header* fifo = nullptr;
    message_header* fifo_tail = nullptr;
    if (std::uintptr_t top = head_.load(std::memory_order_relaxed); top > held_tag) {
      // Only producers change a non-empty head, and never to closed: the exchange takes a list.
      std::uintptr_t taken = head_.exchange(empty_tag, std::memory_order_acquire);
      if (taken > held_tag) {
        fifo_tail = reinterpret_cast<message_header*>(taken);
        fifo = reverse(fifo_tail);
      }
    }
    if (local_ != nullptr) {
      message_header* local = reverse(local_);
      if (fifo_tail != nullptr)
        fifo_tail->next = local;
      else
        fifo = local;
      local_ = nullptr;
    }
    return fifo;
  }

  /// Moves the urgent stack to the front of the batch, in FIFO order, behind urgent messages
  /// taken earlier and not yet popped (their header says so), so the urgent lane stays FIFO.
  void take_urgent() noexcept {
    std::uintptr_t taken = urgent_.exchange(0, std::memory_order_acquire);
    message_header* list = reverse(reinterpret_cast<message_header*>(taken));
    message_header* tail = list;
    // pop counts every message it hands out; urgent ones must not count against the capacity.
    for (--popped_; tail->next != nullptr; tail = tail->next) --popped_;
    message_header** at = &batch_;
    while (*at != nullptr && (*at)->urgent) at = &(*at)->next;
    tail->next = *at;
    *at = list;
  }

  static message_header* reverse(message_header* m) noexcept {
    message_header* fifo = nullptr;
    while (m != nullptr) {
      message_header* next = m->next;
      m->next = fifo;
      fifo = m;
      m = next;
    }
    return fifo;
  }
  static message_header* append(message_header* list, message_header* rest) noexcept {
    if (list == nullptr) return rest;
    message_header* tail = list;
    while (tail->next != nullptr) tail = tail->next;
    tail->next = rest;
    return list;
  }

  // Message slots are at least 16-byte aligned, so these small values never collide with a node.
  static constexpr std::uintptr_t empty_tag = 0;   // running or scheduled, nothing queued
  static constexpr std::uintptr_t idle_tag = 1;    // not scheduled: a push must wake the actor
  static constexpr std::uintptr_t closed_tag = 2;  // stopped: pushes are refused
  static constexpr std::uintptr_t held_tag = 3;    // held by a blocked driver: a push must wake it
  // Added to size_ while refusing: any count with it is at or above every capacity below it.
  static constexpr std::uint32_t refusing_bias = std::uint32_t{1} << 31;

  // First cache line: the producers'.
  std::atomic<std::uintptr_t> head_{idle_tag};
  std::uint32_t capacity_ = 0;          // 0: unbounded; set before the mailbox is shared
  std::atomic<std::uint32_t> size_{0};  // bounded only: normal-lane messages queued (+ refusing_bias)

 public:
  Shared shared;

 private:
  static constexpr std::size_t first_line_used =
      sizeof(std::atomic<std::uintptr_t>) + 2 * sizeof(std::uint32_t) + sizeof(Shared);
  static_assert(first_line_used <= 64, "courier: the mailbox's shared fields must fit one cache line");
  [[no_unique_address]] padding<64 - first_line_used> pad_;
  // Second cache line: the consumer's (the urgent word is written by urgent producers, rarely).
  // Kept to 28 bytes: with the owner's next field in the tail padding (see actor_base), an actor
  // with one pointer of state still fits a 128-byte pool slot.
  message_header* batch_ = nullptr;        // FIFO: urgent messages taken, then the normal batch
  message_header* local_ = nullptr;        // the consumer's messages to itself, newest first
  std::atomic<std::uintptr_t> urgent_{0};  // a stack of urgent messages, or closed_tag
  std::uint32_t popped_ = 0;               // pops not yet subtracted from size_ (modulo 2^32)
};

}  // namespace courier::detail
