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
/// Thread-safety: `push` from any thread; everything else only from the consumer (the actor's
/// resume), except `close`, which the consumer calls when the actor stops.

#include <atomic>
#include <cstdint>

#include "courier/message.hpp"

namespace courier::detail {

enum class push_result : std::uint8_t {
  queued,       ///< the consumer is already scheduled or running
  woke_reader,  ///< the consumer was idle: the caller must schedule it
  closed,       ///< the mailbox is closed: the message was not taken
};

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
      if (head_.compare_exchange_weak(top, reinterpret_cast<std::uintptr_t>(msg), std::memory_order_release,
                                      std::memory_order_relaxed))
        return top == idle_tag ? push_result::woke_reader : push_result::queued;
    }
  }

  /// The next message in FIFO order, or null when the mailbox is empty right now.
  message_header* pop() noexcept {
    if (message_header* m = batch_) {
      batch_ = m->next;
      return m;
    }
    if (head_.load(std::memory_order_relaxed) <= idle_tag) return nullptr;
    std::uintptr_t taken = head_.exchange(empty_tag, std::memory_order_acquire);
    if (taken <= idle_tag || taken == closed_tag) return nullptr;
    message_header* fifo = nullptr;
    for (auto* m = reinterpret_cast<message_header*>(taken); m != nullptr;) {
      message_header* next = m->next;
      m->next = fifo;
      fifo = m;
      m = next;
    }
    batch_ = fifo->next;
    return fifo;
  }

  bool has_batch() const noexcept { return batch_ != nullptr; }

  /// Marks the mailbox idle if nothing arrived; false means a message is waiting and the consumer
  /// must keep running. After `true`, the next push reports `woke_reader`.
  bool try_block() noexcept {
    if (batch_ != nullptr) return false;
    std::uintptr_t expected = empty_tag;
    return head_.compare_exchange_strong(expected, idle_tag, std::memory_order_acq_rel, std::memory_order_relaxed);
  }

  /// Refuses all later pushes and hands back what was queued, FIFO first, for the caller to discard.
  message_header* close() noexcept {
    std::uintptr_t taken = head_.exchange(closed_tag, std::memory_order_acq_rel);
    message_header* fifo = nullptr;
    if (taken > idle_tag && taken != closed_tag) {
      for (auto* m = reinterpret_cast<message_header*>(taken); m != nullptr;) {
        message_header* next = m->next;
        m->next = fifo;
        fifo = m;
        m = next;
      }
    }
    // The unconsumed batch comes first: it was pushed before anything still on the stack.
    if (batch_ != nullptr) {
      message_header* tail = batch_;
      while (tail->next != nullptr) tail = tail->next;
      tail->next = fifo;
      fifo = batch_;
      batch_ = nullptr;
    }
    return fifo;
  }

  bool closed() const noexcept { return head_.load(std::memory_order_acquire) == closed_tag; }

 private:
  // Message slots are at least 16-byte aligned, so these small values never collide with a node.
  static constexpr std::uintptr_t empty_tag = 0;   // running or scheduled, nothing queued
  static constexpr std::uintptr_t idle_tag = 1;    // not scheduled: a push must wake the actor
  static constexpr std::uintptr_t closed_tag = 2;  // stopped: pushes are refused

  alignas(64) std::atomic<std::uintptr_t> head_{idle_tag};
  alignas(64) message_header* batch_ = nullptr;  // consumer-owned FIFO cache
};

}  // namespace courier::detail
