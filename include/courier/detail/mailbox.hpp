#pragma once
/// @file
/// The mailbox: an intrusive multi-producer, single-consumer queue whose nodes are the pooled
/// message slots themselves, with the actor's idle/scheduled/closed state folded into the same
/// word (CAF's lifo_inbox design).
///
/// A push is one CAS on `head_`; it also tells the producer whether the consumer was idle and so
/// must be scheduled. The consumer takes the whole stack with one exchange and reverses it into
/// FIFO order on its own cache line, then works through that batch without touching shared state.
/// Because each producer's pushes are ordered by its CASes, messages from one sender arrive in the
/// order they were sent.
///
/// The layout keeps producers and the consumer apart without wasting a line: the producers' word
/// shares the first cache line only with `Shared`, fields that are written rarely (an actor's
/// identity and reference count); the consumer's cursor starts the second line, and whatever
/// follows the mailbox in its owner (the actor's own state) fills the rest of that line. The
/// owner must therefore be allocated 64-byte aligned, as `system::spawn` does.
///
/// Messages the consumer sends to itself skip the shared word: `push_local` appends them to a
/// consumer-only list that is served after the messages already taken from the producers, so a
/// self-sending actor cannot starve its other senders.
///
/// Thread-safety: `push` from any thread; everything else only from the consumer (the actor's
/// resume), including `close`, which the consumer calls when the actor stops.

#include <atomic>
#include <cstdint>

#include "courier/detail/message.hpp"

namespace courier::detail {

enum class push_result : std::uint8_t {
  queued,       ///< the consumer is already scheduled or running
  woke_reader,  ///< the consumer was idle: the caller must schedule it
  closed,       ///< the mailbox is closed: the message was not taken
};

struct no_shared_fields {};

template <class Shared = no_shared_fields>
class mailbox {
 public:
  /// Mailboxes start idle: the first push schedules the actor.
  mailbox() noexcept = default;
  mailbox(const mailbox&) = delete;
  mailbox& operator=(const mailbox&) = delete;

  push_result push(message_header* msg) noexcept {
    std::uintptr_t top = head_.load(std::memory_order_relaxed);
    for (;;) {
      if (top == closed_tag) return push_result::closed;
      msg->next = top <= idle_tag ? nullptr : reinterpret_cast<message_header*>(top);
      // acq_rel, not release: a push that wakes the reader must acquire the consumer's last
      // try_block, so the thread that runs the actor next (scheduled by this producer) sees the
      // consumer-side fields (batch_, local list) the previous run left behind.
      if (head_.compare_exchange_weak(top, reinterpret_cast<std::uintptr_t>(msg), std::memory_order_acq_rel,
                                      std::memory_order_relaxed))
        return top == idle_tag ? push_result::woke_reader : push_result::queued;
    }
  }

  /// Consumer only: a message from the consumer to itself, with no atomic operation.
  void push_local(message_header* msg) noexcept {
    msg->next = nullptr;
    if (local_tail_ != nullptr)
      local_tail_->next = msg;
    else
      local_head_ = msg;
    local_tail_ = msg;
  }

  /// The next message in FIFO order, or null when the mailbox is empty right now.
  message_header* pop() noexcept {
    if (message_header* m = batch_) [[likely]] {
      batch_ = m->next;
      return m;
    }
    message_header* fifo = nullptr;
    message_header* fifo_tail = nullptr;
    if (std::uintptr_t top = head_.load(std::memory_order_relaxed); top > idle_tag && top != closed_tag) {
      // Only producers change a non-empty head, and never to closed: the exchange takes a list.
      std::uintptr_t taken = head_.exchange(empty_tag, std::memory_order_acquire);
      if (taken > idle_tag && taken != closed_tag) {
        fifo_tail = reinterpret_cast<message_header*>(taken);
        fifo = reverse(fifo_tail);
      }
    }
    if (local_head_ != nullptr) {
      if (fifo_tail != nullptr)
        fifo_tail->next = local_head_;
      else
        fifo = local_head_;
      local_head_ = local_tail_ = nullptr;
    }
    if (fifo == nullptr) return nullptr;
    batch_ = fifo->next;
    return fifo;
  }

  /// Marks the mailbox idle if nothing arrived; false means a message is waiting and the consumer
  /// must keep running. After `true`, the next push reports `woke_reader`.
  bool try_block() noexcept {
    if (batch_ != nullptr || local_head_ != nullptr) return false;
    std::uintptr_t expected = empty_tag;
    return head_.compare_exchange_strong(expected, idle_tag, std::memory_order_acq_rel, std::memory_order_relaxed);
  }

  /// Refuses all later pushes and hands back what was queued, FIFO first, for the caller to discard.
  message_header* close() noexcept {
    std::uintptr_t taken = head_.exchange(closed_tag, std::memory_order_acq_rel);
    message_header* shared = nullptr;
    if (taken > idle_tag && taken != closed_tag) shared = reverse(reinterpret_cast<message_header*>(taken));
    // The unconsumed batch comes first: it was pushed before anything still on the stack.
    message_header* all = append(batch_, shared);
    all = append(all, local_head_);
    batch_ = local_head_ = local_tail_ = nullptr;
    return all;
  }

  bool closed() const noexcept { return head_.load(std::memory_order_acquire) == closed_tag; }

 private:
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

  std::atomic<std::uintptr_t> head_{idle_tag};

 public:
  Shared shared;

 private:
  char pad_[64 - sizeof(std::atomic<std::uintptr_t>) - sizeof(Shared)];
  // Second cache line: the consumer's.
  message_header* batch_ = nullptr;  // taken from head_, in FIFO order
  message_header* local_head_ = nullptr;
  message_header* local_tail_ = nullptr;
};

}  // namespace courier::detail
