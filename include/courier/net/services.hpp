#pragma once
/// @file
/// Dynamic services, libmsgque style: a handler registered by token reads typed items from the call
/// and writes typed items into the reply, with no message struct shared with the caller.
///
///     courier::net::service_table services;
///     services.add(courier::token("HELO"), [](courier::net::incoming& call) {
///       auto name = call.read<std::string_view>();   // a wrong item type fails the call, naming it
///       if (name) call.reply().add("hello " + std::string(*name));
///     }, {"(string name)", "string", "says hello"});
///     services.on([](const calc::add& m) { return m.a + m.b; });   // a typed service, by its struct
///     net.serve(services, where);
///
/// A handler runs in its connection's turn, on the worker that runs the connection; it must not
/// block. It answers by writing reply() (a call whose handler writes nothing gets an empty RETURN),
/// by fail(error), or later by defer(): a deferred_reply answers from any thread. A wrong argument
/// (read<T>() of another item type, too few items, items left over) fails the call with the codec's
/// code, naming the expected and the actual item type and the argument's position. A table may
/// also have a catch-all (otherwise()) for tokens it has no entry for. A typed service (on()) is
/// one whose handler takes the message struct and returns its reply: the codec reads and writes
/// the items, and a typed client (connect<I>) calls it as it calls a typed server.
///
/// Thread-safety: a service_table is filled before it is served and read-only afterwards (shared by
/// every connection that serves it). incoming is used by its handler only, in that call. A
/// deferred_reply may be answered from any thread, once, before its system is destroyed (as any
/// response_promise: a thread that answers must be done before the system goes).

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

/// What a typed service's handler takes and returns: `R(const M&)`, a lambda or a function.
template <class F>
struct typed_service : typed_service<decltype(&F::operator())> {};
template <class C, class R, class A>
struct typed_service<R (C::*)(A) const> {
  using message = std::remove_cvref_t<A>;
  using returned = R;
};
template <class C, class R, class A>
struct typed_service<R (C::*)(A)> : typed_service<R (C::*)(A) const> {};
template <class R, class A>
struct typed_service<R (*)(A)> {
  using message = std::remove_cvref_t<A>;
  using returned = R;
};

/// The reply a typed handler's return type stands for: courier::result<T> answers T or fails.
template <class R>
struct typed_reply {
  using type = R;
};
template <class T>
struct typed_reply<courier::result<T>> {
  using type = T;
};

}  // namespace detail

/// What reflection says of a dynamic service (docs/protocol.md section 15); empty signatures mean
/// none declared.
struct service_signature {
  std::string arguments;
  std::string result;
  std::string description;
  bool returns = true;  // false: the service returns nothing (reflection's kind 0)
};

using service_handler = std::function<void(incoming&)>;

class service_table;
/// Makes the services of a child context the peer opens (docs/protocol.md section 6), from the
/// kind it asked for (the context_open token; zero: the default) and its name; null refuses the
/// child (no_such_service). Called on the connection's turn; each child gets its own table, so
/// state its handlers capture is the child's own.
using child_factory = std::function<std::shared_ptr<const service_table>(courier::token kind, std::string_view name)>;

/// Services by token. Filled before serving, read-only while served.
class service_table {
 public:
  struct entry {
    courier::token token;
    service_handler handler;
    service_signature signature;
  };

  /// Registers `handler` for `token` (printable, not `$`-reserved; a second add for a token replaces
  /// the first).
  service_table& add(courier::token token, service_handler handler, service_signature signature = {}) {
    for (entry& e : entries_) {
      if (e.token == token) {
        e.handler = std::move(handler);
        e.signature = std::move(signature);
        return *this;
      }
    }
    entries_.push_back({token, std::move(handler), std::move(signature)});
    return *this;
  }
  /// Registers a typed service: `handler` takes a message struct (its token and its fields, as
  /// on() of a typed actor does) and returns the reply: a value, void for none (a one-way service),
  /// or courier::result<T> to fail the call. The arguments are read into the struct by the codec
  /// (a field that does not fit fails the call, naming its position and both item types), and
  /// reflection reports the struct's signature, field names and description: the same service a
  /// typed server serves, called the same way by a typed client or by token.
  ///
  ///     services.on([](const calc::add& a) { return a.a + a.b; });
  template <class Handler>
  service_table& on(Handler handler);
  /// The handler for tokens the table has no entry for (not listed by reflection).
  service_table& otherwise(service_handler handler) {
    fallback_ = std::move(handler);
    return *this;
  }
  /// How child contexts opened by the peer get their services (a connection serves children only
  /// where its table has a factory, and up to connection_config::max_child_contexts).
  service_table& children(child_factory factory) {
    children_ = std::move(factory);
    return *this;
  }
  [[nodiscard]] const child_factory& children() const noexcept { return children_; }

  /// The entry for `token`, the catch-all's handler when there is none, or nothing.
  [[nodiscard]] const service_handler* find(courier::token token) const noexcept {
    for (const entry& e : entries_)
      if (e.token == token) return &e.handler;
    return fallback_ ? &fallback_ : nullptr;
  }
  [[nodiscard]] const std::vector<entry>& entries() const noexcept { return entries_; }

  /// Appends the table's services as reflection lists (docs/protocol.md section 15): token, kind
  /// (1 call, 0 one-way), argument and result signatures, description.
  void describe(wire::frame_writer& w) const {
    for (const entry& e : entries_) {
      w.begin_list();
      w.add(e.token.view()).add(static_cast<std::uint8_t>(e.signature.returns ? 1 : 0));
      w.add(std::string_view(e.signature.arguments)).add(std::string_view(e.signature.result));
      w.add(std::string_view(e.signature.description));
      w.end_list();
    }
  }

 private:
  std::vector<entry> entries_;
  service_handler fallback_;
  child_factory children_;
};

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

  // The connection's part.
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
      return courier::error(wire::make_error_code(wire::errc::trailing_items),
                            std::string(token_.view()) + ": items left over after argument " + std::to_string(position_));
    }
    return std::nullopt;
  }

 private:
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
    fault_ = courier::error(wire::make_error_code(e.code),
                            std::string(token_.view()) + ": argument " + std::to_string(position_) + ": " + e.message());
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

template <class Handler>
service_table& service_table::on(Handler handler) {
  using traits = detail::typed_service<Handler>;
  using message = typename traits::message;
  using returned = typename traits::returned;
  using reply = typename detail::typed_reply<returned>::type;
  static_assert(wire::message<message>,
                "service_table::on: the handler takes a message struct (a token and fields(), see courier/wire/message.hpp)");
  static_assert(!wire::views_frame<message>,
                "service_table::on: a typed service's fields own their bytes (std::string, not std::string_view)");
  constexpr bool returns = !std::is_void_v<reply> && !std::is_same_v<reply, courier::unit>;
  using reported = std::conditional_t<returns, reply, courier::unit>;
  service_signature signature{wire::arguments_signature<message>(), wire::result_signature<reported>(),
                              std::string(wire::description_of<message>()), returns};
  return add(courier::token(message::token), [h = std::move(handler)](incoming& call) {
    auto msg = call.read_message<message>();
    if (!msg) return;  // the call fails with the field that did not fit
    if constexpr (courier::detail::is_result<returned>) {
      auto r = h(std::as_const(*msg));
      if (!r) return call.fail(r.err());
      if constexpr (returns) {
        if (!call.one_way()) detail::write_reply_items(call.reply(), *r);
      }
    } else if constexpr (returns) {
      auto r = h(std::as_const(*msg));
      if (!call.one_way()) detail::write_reply_items(call.reply(), r);
    } else {
      (void)h(std::as_const(*msg));  // nothing to answer (void, courier::unit)
    }
  }, std::move(signature));
}

}  // namespace courier::net
