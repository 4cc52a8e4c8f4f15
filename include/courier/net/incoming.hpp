#pragma once
/// @file
/// A call of a dynamic service while its handler runs (incoming): its typed arguments, its reply,
/// its failure or deferral, and who made it; and the deferred_reply that answers it later, from
/// any thread. The table of services is services.hpp.
///
/// Thread-safety: incoming is used by its handler only, in that call. A deferred_reply may be
/// answered from any thread, once, before its system is destroyed (as any response_promise: a
/// thread that answers must be done before the system goes).

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "courier/actor_ref.hpp"
#include "courier/detail/message.hpp"
#include "courier/error.hpp"
#include "courier/net/context.hpp"
#include "courier/net/detail/wire_interface.hpp"
#include "courier/pool.hpp"
#include "courier/token.hpp"
#include "courier/wire/decoder.hpp"
#include "courier/wire/encoder.hpp"
#include "courier/wire/message.hpp"
#include "courier/wire/signature.hpp"

namespace courier::net {

class incoming;
template <class Out, class In>
class connection;
namespace detail {
class connection_core;
class local_context;
}  // namespace detail

/// A dynamic service's handler: reads the call's arguments and writes its reply.
using service_handler = std::function<void(incoming&)>;

namespace detail {

/// A reply a deferred_reply carries to its connection: the call's ids and the reply's items (or an
/// error), answered in the connection's turn.
struct deferred_answer {
  std::uint64_t transaction_id = 0;
  std::uint64_t context_id = 0;
  courier::token token{};
  std::shared_ptr<wire::out_buffer> items;  // one frame whose items are the reply's; null: `failure`
  courier::error failure;
};

}  // namespace detail

/// Answers a call later, from any thread, once: with items written by a function, or an error.
/// Dropped unanswered, the call is answered with errc::broken_promise.
class deferred_reply {
 public:
  deferred_reply() = default;
  deferred_reply(deferred_reply&& other) noexcept = default;
  deferred_reply& operator=(deferred_reply&& other) noexcept {
    if (this != &other) {
      drop();
      connection_ = std::move(other.connection_);
      answer_ = std::move(other.answer_);
      post_ = other.post_;
    }
    return *this;
  }
  deferred_reply(const deferred_reply&) = delete;
  deferred_reply& operator=(const deferred_reply&) = delete;
  ~deferred_reply() { drop(); }

  /// Answers with the items `write` adds to the reply (false when already answered or when the
  /// items do not make a frame; then the call is answered with the error).
  template <class Write>
  bool deliver(Write&& write) {
    if (!connection_) return false;
    auto out = std::make_shared<wire::out_buffer>();
    wire::frame_writer w(*out, wire::frame_header{});
    write(w);
    if (auto ok = w.finish(); !ok) {
      fail(courier::error(errc::handler_failed, "the deferred reply does not make a frame: " + ok.err().message()));
      return false;
    }
    answer_.items = std::move(out);
    return post();
  }
  /// Answers with ERROR `e` (false when already answered).
  bool fail(courier::error e) {
    if (!connection_) return false;
    answer_.items.reset();
    answer_.failure = std::move(e);
    return post();
  }
  /// Whether it still has to answer.
  [[nodiscard]] bool pending() const noexcept { return static_cast<bool>(connection_); }

 private:
  friend class incoming;
  using poster = bool (*)(const courier::detail::actor_base*, detail::deferred_answer&&);
  deferred_reply(courier::detail::actor_base* connection, detail::deferred_answer answer, poster post)
      : connection_(connection), answer_(std::move(answer)), post_(post) {
    connection->add_ref();
  }

  struct release {
    void operator()(courier::detail::actor_base* a) const noexcept { a->release(); }
  };

  bool post() {
    const bool sent = post_(connection_.get(), std::move(answer_));
    connection_.reset();
    return sent;
  }
  void drop() noexcept {
    if (!connection_) return;
    try {
      (void)fail(courier::error(errc::broken_promise, "a deferred reply was dropped without an answer"));
    } catch (...) {
      connection_.reset();  // out of memory for the error's text: the connection's close answers it
    }
  }

  std::unique_ptr<courier::detail::actor_base, release> connection_;
  detail::deferred_answer answer_;
  poster post_ = nullptr;
};

/// A call (or a send) of a dynamic service, while its handler runs.
class incoming {
 public:
  [[nodiscard]] courier::token token() const noexcept { return token_; }
  [[nodiscard]] std::uint64_t context() const noexcept { return context_; }
  /// A send: nothing will be answered (reply() is not available).
  [[nodiscard]] bool one_way() const noexcept { return transaction_id_ == 0; }

  /// The next argument as T (a scalar, std::string_view, std::span<const std::byte>). A wrong item
  /// type, or no item left, fails the call (with type_mismatch / no_more_items, naming the expected
  /// and the actual item type and the argument's position) unless the handler answers otherwise.
  template <class T>
  courier::result<T> read() {
    ++position_;
    if constexpr (wire::detail::scalar<T>) {
      T out;
      if (items_.try_read(out)) [[likely]]
        return courier::result<T>(std::in_place, out);
    }
    auto v = items_.read<T>();
    if (v) return *v;
    note_fault(v.err());
    return fault_;
  }
  /// The arguments as message struct M, one item per field in order; a field that does not fit
  /// fails the call as read<T> does (its position is the field's).
  template <class M>
  courier::result<M> read_message() {
    M msg{};
    bool ok = true;
    std::apply([&](auto&... field) { ((ok = ok && read_field(field)), ...); }, msg.fields());
    if (!ok) return fault_;
    return msg;
  }
  /// The arguments as the codec reads them (lists: begin_list / end_list), for what read<T> lacks.
  [[nodiscard]] wire::reader& items() noexcept { return items_; }
  /// Whether arguments are left unread (a call whose handler returns with some fails with
  /// trailing_items, unless it answered).
  [[nodiscard]] bool has_more() const noexcept { return items_.has_more(); }

  /// The reply's items (a call only): add to it; the reply goes out when the handler returns.
  wire::frame_writer& reply() noexcept { return *reply_; }
  /// Answers with ERROR `e` instead of the reply.
  void fail(courier::error e) { failure_ = std::move(e); }
  /// The context this call came in, as the peer that made it serves it: a call to it goes back
  /// over the same connection to the services the peer registered there (libmsgque's callbacks
  /// from server to client). From the handler, use call(...).then with defer(): the handler must
  /// not block, so call_wait is refused here (would_deadlock). Empty for a call in this process
  /// (local_context.hpp): a local caller serves nothing.
  [[nodiscard]] context_ref peer() const {
    if (caller_ != nullptr) return context_ref(*caller_, caller_context_);
    if (peer_map_ == nullptr) return {};
    connection_->add_ref();
    return context_ref(actor_ref<detail::context_calls>::adopt(connection_, peer_map_), context_);
  }
  /// Answers later: the handler returns, and the deferred_reply answers from any thread.
  deferred_reply defer() {
    deferred_ = true;
    return deferred_reply(connection_, detail::deferred_answer{transaction_id_, context_, token_, nullptr, {}}, post_);
  }

 private:
  // What the connections and the local context actor use to run a call and answer it; a handler
  // sees only the members above.
  friend class detail::connection_core;
  friend class detail::local_context;
  template <class Out, class In>
  friend class net::connection;

  incoming(const wire::frame_view& f, wire::frame_writer* reply, courier::detail::actor_base* connection,
           deferred_reply::poster post, const std::uint16_t* peer_map) noexcept
      : incoming(f.token(), f.kind() == wire::kind::call ? f.transaction_id() : 0, f.context_id(), f.body(), reply,
                 connection, post, peer_map) {}
  /// A call that is no frame (the local path): `transaction_id` 0 for a send.
  incoming(courier::token token, std::uint64_t transaction_id, std::uint64_t context, std::span<const std::byte> items,
           wire::frame_writer* reply, courier::detail::actor_base* connection, deferred_reply::poster post,
           const std::uint16_t* peer_map) noexcept
      : items_(items),
        token_(token),
        transaction_id_(transaction_id),
        context_(context),
        reply_(reply),
        connection_(connection),
        post_(post),
        peer_map_(peer_map) {}
  [[nodiscard]] bool deferred() const noexcept { return deferred_; }
  /// Runs `handler` on this call; a throw fails the call with handler_failed, naming the token.
  void run(const service_handler& handler) {
    try {
      handler(*this);
    } catch (const std::exception& e) {
      fail(courier::error(errc::handler_failed, std::string(token_.view()) + ": " + e.what()));
    } catch (...) {
      fail(courier::error(errc::handler_failed, std::string(token_.view()) + ": an exception"));
    }
  }
  /// The poster a deferred_reply uses to reach `Actor` (a connection or a context actor, which
  /// takes detail::deferred_answer): queued as a message; false once the actor has stopped.
  template <class Actor>
  static bool post_to(const courier::detail::actor_base* actor, detail::deferred_answer&& answer) {
    auto* slot = courier::detail::make_message<detail::deferred_answer>(
        Actor::template type_index<detail::deferred_answer>, nullptr, std::move(answer));
    if (const_cast<courier::detail::actor_base*>(actor)->enqueue(slot)) return true;
    pool::destroy(slot);  // stopped: a connection's peer has its answer from the close
    return false;
  }
  /// The caller, when the call was handed on by a connection (the local path: none).
  void set_caller(const actor_ref<detail::context_calls>* caller, std::uint64_t context) noexcept {
    caller_ = caller != nullptr && *caller ? caller : nullptr;
    caller_context_ = context;
  }
  /// What the call is answered with instead of its reply, if anything: the handler's fail(), else
  /// the first argument that did not fit, else arguments left unread.
  [[nodiscard]] std::optional<courier::error> outcome() const {
    if (failure_) return failure_;
    if (fault_) return fault_;
    if (items_.has_more()) {
      return courier::error(
          wire::make_error_code(wire::errc::trailing_items),
          std::string(token_.view()) + ": items left over after argument " + std::to_string(position_));
    }
    return std::nullopt;
  }

  template <class T>
  bool read_field(T& value) {
    ++position_;
    wire::error e;
    if (wire::detail::read_value(items_, value, e)) return true;
    note_fault(e);
    return false;
  }
  void note_fault(const wire::error& e) {
    if (fault_) return;
    fault_ = courier::error(wire::make_error_code(e.code), std::string(token_.view()) + ": argument " +
                                                               std::to_string(position_) + ": " + e.message());
  }

  wire::reader items_;
  courier::token token_;
  std::uint64_t transaction_id_;
  std::uint64_t context_;
  wire::frame_writer* reply_;
  courier::detail::actor_base* connection_;
  deferred_reply::poster post_;
  const std::uint16_t* peer_map_;  // the connection's type indices for context_calls
  const actor_ref<detail::context_calls>* caller_ = nullptr;
  std::uint64_t caller_context_ = 0;
  unsigned position_ = 0;
  courier::error fault_;
  std::optional<courier::error> failure_;
  bool deferred_ = false;
};

}  // namespace courier::net
