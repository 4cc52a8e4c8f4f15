#pragma once
/// @file
/// Deferred replies: a handler that cannot answer before it returns (a proxy, a service that asks a
/// database actor first) declares its reply as `response_promise<R>` and answers later, or hands the
/// request on with `delegate`.
///
///     courier::response_promise<int> on(const get& m) {
///       auto answer = make_response_promise<int>();          // takes over this request's reply
///       db_.request(lookup{m.key}).then(
///           [answer](int v) mutable { answer.deliver(v); },   // from any thread, exactly once
///           [answer](const courier::error& e) mutable { answer.fail(e); });
///       return answer;
///     }
///     courier::delegated<int> on(const get& m) { return delegate(db_, lookup{m.key}); }
///
/// A promise is a pointer to the request's pooled pending record: making, copying and answering one
/// allocates nothing. Copies share the one answer: the first `deliver` or `fail` wins, the later ones
/// return false. When the last copy goes away unanswered, the request fails with
/// `errc::broken_promise`, so a forgotten promise is an error at the requester, never a hang.
/// A promise made for a one-way message (no one waits) is empty: answering it does nothing.
///
/// Thread-safety: distinct promise objects, including copies of one promise, may be used from any
/// threads at once; one promise object is not safe for concurrent use (like std::shared_ptr).

#include <atomic>
#include <cstdint>
#include <exception>
#include <utility>

#include "courier/detail/pending.hpp"
#include "courier/error.hpp"
#include "courier/interface.hpp"

namespace courier {

namespace detail {

/// The request whose handler runs on this thread, set only around handlers that reply later
/// (those returning `response_promise<R>` or `delegated<R>`): `make_response_promise` and
/// `delegate` take its reply route from here.
inline thread_local message_header* current_request = nullptr;

/// Takes the reply route of the request being handled; null for a one-way message, outside a
/// deferring handler, or when it was already taken.
inline pending_base* take_current_reply() noexcept {
  message_header* m = current_request;
  return m != nullptr ? std::exchange(m->reply_to, nullptr) : nullptr;
}

}  // namespace detail

/// The answer a handler owes to one request, given later and from any thread. `R` is the reply
/// type (`unit` for a request whose handler returns nothing).
template <class R>
class response_promise {
 public:
  using value_type = R;

  /// An empty promise: it answers nothing.
  response_promise() noexcept = default;

  response_promise(const response_promise& other) noexcept : pending_(other.pending_) {
    if (pending_ != nullptr) {
      pending_->refs.fetch_add(1, std::memory_order_relaxed);
      pending_->promises.fetch_add(1, std::memory_order_relaxed);
    }
  }
  response_promise(response_promise&& other) noexcept : pending_(std::exchange(other.pending_, nullptr)) {}
  response_promise& operator=(response_promise other) noexcept {
    std::swap(pending_, other.pending_);
    return *this;
  }
  /// The last copy of an unanswered promise fails the request with errc::broken_promise.
  ~response_promise() { reset(); }

  /// True while a requester still waits for this answer.
  bool pending() const noexcept { return pending_ != nullptr && !pending_->answered.load(std::memory_order_acquire); }
  explicit operator bool() const noexcept { return pending(); }

  /// True once the requester no longer waits: the request was answered, failed or timed out. A
  /// promise that is not yet answered but whose request timed out is settled: answering it does
  /// nothing (a remote connection counts such late replies as dropped).
  bool settled() const noexcept { return pending_ == nullptr || pending_->state.load(std::memory_order_acquire) != 0; }

  /// True once nobody can receive an answer any more, so work towards one can stop: the request
  /// timed out, the `ask` caller gave up waiting, or the requesting actor has stopped (its
  /// continuation can never run). Also true for an empty promise. False while the requester
  /// still waits, including a plain thread's `then` (its continuation runs even after shutdown).
  /// For a promise not yet answered; answering an abandoned one does nothing anyone sees.
  /// Thread-safe and cheap (a few atomic loads, no allocation): a handler may poll it between
  /// steps of long work while the requester stops on another thread.
  bool abandoned() const noexcept { return pending_ == nullptr || detail::requester_gone(pending_); }

  /// Answers the request with `value`. False, doing nothing, when the promise is empty or was
  /// already answered (by this copy or another).
  bool deliver(R value) {
    if (!claim_answer()) return false;
    detail::reply_value(pending_, std::move(value));
    return true;
  }

  /// For a `unit` reply (the handler's declared reply is `void`).
  bool deliver() requires std::is_same_v<R, unit> { return deliver(unit{}); }

  /// Fails the request with `why`; the requester's error continuation (or `ask`) sees it.
  bool fail(error why) noexcept {
    if (!claim_answer()) return false;
    detail::reply_error(pending_, why);
    return true;
  }

  /// Drops this copy (the last unanswered one fails the request with errc::broken_promise).
  void reset() noexcept {
    detail::pending_base* p = std::exchange(pending_, nullptr);
    if (p == nullptr) return;
    if (p->promises.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
        !p->answered.exchange(true, std::memory_order_acq_rel))
      detail::reply_error(
          p, error(errc::broken_promise, std::uncaught_exceptions() > 0
                                             ? "the promise was dropped by an exception before it was answered"
                                             : "the promise was dropped before it was answered"));
    detail::release(p);
  }

  /// Adopts the reply route of a request (the request message's reference on `p` becomes the
  /// answer's). Used by `actor::make_response_promise`.
  static response_promise adopt(detail::pending_base* p) noexcept {
    response_promise r;
    if (p != nullptr) {
      p->refs.fetch_add(1, std::memory_order_relaxed);  // this copy's own hold on the record
      p->promises.store(1, std::memory_order_relaxed);
      r.pending_ = p;
    }
    return r;
  }

 private:
  bool claim_answer() noexcept {
    return pending_ != nullptr && !pending_->answered.exchange(true, std::memory_order_acq_rel);
  }

  detail::pending_base* pending_ = nullptr;
};

/// What a handler returns after `delegate(ref, msg)`: the other actor's reply goes straight to the
/// original requester. `R` is the reply type, checked against the delegate target's at compile time.
template <class R>
class [[nodiscard]] delegated {
 public:
  using value_type = R;
};

}  // namespace courier
