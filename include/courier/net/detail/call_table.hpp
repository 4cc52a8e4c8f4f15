#pragma once
/// @file
/// The calls a connection made and still waits for, by transaction id (private to the network
/// layer). Each slot holds its caller's promise and the functions that settle it, chosen at compile
/// time for the promise's reply type: one table serves every interface on a connection, and calls
/// whose reply type is known only at the call.
///
/// Thread-safety: used by the connection actor only, in its turns.

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "courier/error.hpp"
#include "courier/net/detail/wire_interface.hpp"
#include "courier/response_promise.hpp"
#include "courier/wire/message.hpp"

namespace courier::net::detail {

/// The `courier::error` an ERROR frame carries (its code and text); protocol_error when the frame
/// has no code.
[[nodiscard]] inline courier::error error_of_frame(const wire::frame_view& f) {
  wire::reader r = f.items();
  auto code = r.read<std::uint32_t>();
  auto text = r.read<std::string_view>();
  if (!code) return courier::error(errc::protocol_error, "an ERROR frame without its code");
  return error_from_wire(*code, text ? *text : std::string_view{});
}

/// How one slot's promise is settled; one constant table per reply type.
struct settle_ops {
  /// The answer arrived (a reply or an error frame): the decoded value, or the error, goes to the caller.
  void (*answer)(void* promise, const wire::frame_view& f, wire::shared_block* owner);
  void (*fail)(void* promise, const courier::error& why);
  /// Whether the caller still waits (it may have timed out).
  bool (*waiting)(const void* promise) noexcept;
  void (*destroy)(void* promise) noexcept;
};

template <class R>
struct settle_ops_for {
  static response_promise<R>& of(void* p) noexcept { return *std::launder(static_cast<response_promise<R>*>(p)); }

  static void answer(void* p, const wire::frame_view& f, wire::shared_block* owner) {
    response_promise<R>& promise = of(p);
    if (f.kind() == wire::kind::error) {
      promise.fail(error_of_frame(f));
      return;
    }
    R value{};
    if (auto ok = decode_reply(f, value, owner); ok)
      promise.deliver(std::move(value));
    else
      promise.fail(courier::error(errc::protocol_error, "cannot decode the reply: " + ok.err().message()));
  }
  static void fail(void* p, const courier::error& why) { of(p).fail(why); }
  static bool waiting(const void* p) noexcept {
    return !std::launder(static_cast<const response_promise<R>*>(p))->settled();
  }
  static void destroy(void* p) noexcept { of(p).~response_promise<R>(); }

  static constexpr settle_ops ops{&answer, &fail, &waiting, &destroy};
};

/// What became of an answer frame.
enum class answer_outcome : std::uint8_t {
  settled,  // its caller got it
  late,     // its caller had given up (timed out): dropped
  unknown,  // no call of ours has that id: dropped
};

/// A fixed ring of call slots indexed by transaction id (capacity rounded up to a power of two),
/// made at the first call: a connection that only serves never pays for it. A slot whose caller
/// gave up may be reused, so a call that stays unanswered keeps its slot without holding up the
/// ids after it.
class call_table {
 public:
  explicit call_table(std::size_t capacity) : capacity_(round_up_pow2(capacity)) {}
  ~call_table() {
    for (slot& s : slots_)
      if (s.tid != 0) s.ops->destroy(s.storage);
  }
  call_table(const call_table&) = delete;
  call_table& operator=(const call_table&) = delete;

  /// The transaction id the next insert() takes: the next one whose slot is free (reclaiming the
  /// slots of callers that gave up). Ids count up from 1 and are never 0.
  std::uint64_t next_id() {
    if (slots_.empty()) slots_.resize(capacity_);
    for (;;) {
      slot& s = at(next_tid_);
      if (s.tid == 0) return next_tid_;
      if (s.ops->waiting(s.storage)) {
        ++next_tid_;
        continue;
      }
      release(s);  // its answer, if it ever comes, finds no call
    }
  }

  /// Keeps `promise` under next_id(), which is taken. Returns that id.
  template <class R>
  std::uint64_t insert(response_promise<R>&& promise) {
    static_assert(sizeof(response_promise<R>) <= sizeof(void*) && alignof(response_promise<R>) <= alignof(void*));
    const std::uint64_t tid = next_id();
    slot& s = at(tid);
    ::new (static_cast<void*>(s.storage)) response_promise<R>(std::move(promise));
    s.ops = &settle_ops_for<R>::ops;
    s.tid = tid;
    ++next_tid_;
    ++in_flight_;
    return tid;
  }

  /// The answer frame (reply or error) for transaction `tid`.
  answer_outcome answer(std::uint64_t tid, const wire::frame_view& f, wire::shared_block* owner) {
    slot* s = find(tid);
    if (s == nullptr) return answer_outcome::unknown;
    if (!s->ops->waiting(s->storage)) {
      release(*s);
      return answer_outcome::late;
    }
    s->ops->answer(s->storage, f, owner);
    release(*s);
    return answer_outcome::settled;
  }

  /// Fails the call `tid` with `why`, if it is ours; false if not.
  bool fail(std::uint64_t tid, const courier::error& why) {
    slot* s = find(tid);
    if (s == nullptr) return false;
    s->ops->fail(s->storage, why);
    release(*s);
    return true;
  }

  void fail_all(const courier::error& why) {
    for (slot& s : slots_) {
      if (s.tid == 0) continue;
      s.ops->fail(s.storage, why);
      release(s);
    }
  }

  /// Calls waiting for their answer (and slots of callers that gave up, until reclaimed).
  [[nodiscard]] std::size_t in_flight() const noexcept { return in_flight_; }

 private:
  struct slot {
    std::uint64_t tid = 0;
    const settle_ops* ops = nullptr;
    alignas(void*) unsigned char storage[sizeof(void*)];
  };

  static std::size_t round_up_pow2(std::size_t n) {
    std::size_t p = 1;
    while (p < n) p <<= 1;
    return p;
  }

  slot& at(std::uint64_t tid) noexcept { return slots_[tid & (slots_.size() - 1)]; }
  slot* find(std::uint64_t tid) noexcept {
    if (tid == 0 || slots_.empty()) return nullptr;
    slot& s = at(tid);
    return s.tid == tid ? &s : nullptr;
  }
  void release(slot& s) noexcept {
    s.ops->destroy(s.storage);
    s.tid = 0;
    s.ops = nullptr;
    --in_flight_;
  }

  std::size_t capacity_;
  std::vector<slot> slots_;
  std::uint64_t next_tid_ = 1;
  std::size_t in_flight_ = 0;
};

}  // namespace courier::net::detail
