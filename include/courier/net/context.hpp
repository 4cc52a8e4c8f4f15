#pragma once
/// @file
/// Contexts, libmsgque style, from the calling side: a context_ref names a context at the peer (the
/// parent, context 0, which is the connection itself, or a child multiplexed over it) and calls its
/// services by token, with items written at the call and read from the reply.
///
///     auto parent = *net.connect(where);                                 // or incoming::peer()
///     parent.send("LOG_", courier::net::args(std::string_view("hi")));   // END: one-way
///     parent.call("SUM_", courier::net::args(1, 2), 2s)                  // END_AND_CALLBACK
///         .then([](const courier::wire::items_ref& r) { ... }, [](const courier::error& e) { ... });
///     auto sum = parent.call_wait("SUM_", courier::net::args(1, 2), 2s); // END_AND_WAIT
///     auto child = parent.open_child("counter");                         // its own services there
///
/// A reply is its items (wire::items_ref: read them with the codec's typed reader); an ERROR is the
/// same courier::error, code and text, as a typed call's. `call_wait` blocks its thread: refused with
/// errc::would_deadlock on a worker or in a handler, where `call(...).then` is the way. A plain
/// thread's call_wait drives the connection itself (the fast path of typed `ask`).
///
/// The calls are messages to the connection actor: encoded in its turn, answered through its call
/// table, each settled once (reply, ERROR, time-out, or the connection's loss with its reason).
/// A call in a child that is not open, or no longer, fails with errc::no_such_context.
///
/// Thread-safety: a context_ref is a value (an actor ref and an id); copies may be used from any
/// thread, as actor refs are. arguments are encoded where they are made and read-only after.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "courier/actor_ref.hpp"
#include "courier/error.hpp"
#include "courier/interface.hpp"
#include "courier/pool.hpp"
#include "courier/request.hpp"
#include "courier/token.hpp"
#include "courier/wire/encoder.hpp"
#include "courier/wire/items_ref.hpp"
#include "courier/wire/message.hpp"

namespace courier::net {

class service_table;

/// The items of a dynamic call, encoded when it is made (so the values need not outlive it). Up to
/// `inline_capacity` bytes of items live inside it; more go to a slot of the message pool (no heap
/// allocation up to pool::max_small_size). The inline part is kept small because a call's
/// arguments travel inside its message: every byte of it is a byte each send writes into a slot
/// and the connection reads back on another CPU (at 192 bytes, a one-way send of five int32 took
/// five cache lines; at 48, two).
class arguments {
 public:
  static constexpr std::size_t inline_capacity = 48;

  arguments() noexcept = default;
  // Inline bytes are copied whole: a call's arguments are moved several times on their way into
  // the connection's mailbox, and a fixed 48-byte copy is a few vector moves where copying only
  // the bytes in use was a call to memmove each time.
  arguments(const arguments& other) : size_(other.size_), inline_(other.inline_) {
    if (other.fault_) fault_ = std::make_unique<courier::error>(*other.fault_);
    if (other.spill_ != nullptr) {
      spill_ = static_cast<std::byte*>(pool::allocate(size_, 1));
      std::memcpy(spill_, other.spill_, size_);
    }
  }
  arguments(arguments&& other) noexcept
      : size_(std::exchange(other.size_, 0)),
        inline_(other.inline_),
        spill_(std::exchange(other.spill_, nullptr)),
        fault_(std::move(other.fault_)) {}
  arguments& operator=(arguments other) noexcept {
    release();
    size_ = std::exchange(other.size_, 0);
    inline_ = other.inline_;
    spill_ = std::exchange(other.spill_, nullptr);
    fault_ = std::move(other.fault_);
    return *this;
  }
  ~arguments() { release(); }

  /// The values as items, each as a typed message field would be (scalars, strings, binaries,
  /// vectors as lists, structs with fields() as nested lists).
  template <class... Ts>
  static arguments of(const Ts&... values) {
    if constexpr (sizeof...(Ts) != 0 && (wire::detail::scalar<Ts> && ...)) {
      if constexpr ((wire::detail::scalar_item_size<Ts> + ...) <= inline_capacity) {
        // Fixed-size items only: written straight into the inline bytes by the encoding that
        // frame_writer::add uses, with no frame to build and copy out of (building and copying
        // were about a fifth of the samples of a thread sending five int32 one way).
        arguments a;
        std::byte* p = a.inline_.data();
        ((p = wire::detail::put_scalar(p, values)), ...);
        a.size_ = static_cast<std::uint32_t>(p - a.inline_.data());
        return a;
      }
    }
    return written([&](wire::frame_writer& w) { (wire::detail::write_value(w, values), ...); });
  }
  /// Items as they came in a frame's body (already valid items).
  static arguments from_items(std::span<const std::byte> body) {
    arguments a;
    a.assign(body);
    return a;
  }
  /// Items that `write(wire::frame_writer&)` adds (lists, items chosen at run time).
  template <class Write>
  static arguments written(Write&& write) {
    thread_local wire::out_buffer scratch;
    scratch.clear();
    wire::frame_writer w(scratch, wire::frame_header{});
    write(w);
    arguments a;
    if (auto ok = w.finish(); !ok) {
      a.fault_ = std::make_unique<courier::error>(wire::make_error_code(ok.err().code),
                                                  "the arguments do not make a frame: " + ok.err().message());
      return a;
    }
    a.assign(scratch.view().subspan(wire::header_size));
    return a;
  }

  /// The items' bytes (a frame body).
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {spill_ != nullptr ? spill_ : inline_.data(), size_};
  }
  /// Why the values could not be encoded (invalid UTF-8, too deep...); null when they were.
  [[nodiscard]] const courier::error* fault() const noexcept { return fault_.get(); }

 private:
  void assign(std::span<const std::byte> body) {
    size_ = static_cast<std::uint32_t>(body.size());
    if (body.size() > inline_capacity) spill_ = static_cast<std::byte*>(pool::allocate(body.size(), 1));
    if (!body.empty()) std::memcpy(spill_ != nullptr ? spill_ : inline_.data(), body.data(), body.size());
  }
  void release() noexcept {
    if (spill_ != nullptr) pool::deallocate(std::exchange(spill_, nullptr), size_, 1);
  }

  std::uint32_t size_ = 0;
  std::array<std::byte, inline_capacity> inline_{};  // the first size_ bytes are the items, unless spilled
  std::byte* spill_ = nullptr;                       // a pool slot of size_ bytes, when they did not fit
  std::unique_ptr<courier::error> fault_;
};

/// arguments::of(values...): `ctx.call("SUM_", args(1, 2))`.
template <class... Ts>
arguments args(const Ts&... values) {
  return arguments::of(values...);
}

/// One service as reflection describes it (docs/protocol.md section 15).
struct service_description {
  courier::token token;
  bool returns = true;  // false: one-way (reflection's kind 0)
  std::string arguments, result, description;
};

/// The services a `$SVC` reply lists, or protocol_error naming what is malformed in it.
inline courier::result<std::vector<service_description>> read_service_list(const wire::items_ref& reply) {
  std::vector<service_description> out;
  auto r = reply.items();
  auto malformed = [&](const char* what) {
    return courier::error(errc::protocol_error, std::string("the service list is malformed: ") + what + " of entry " +
                                                    std::to_string(out.size() + 1));
  };
  while (r.has_more()) {
    if (!r.begin_list()) return malformed("no list");
    auto token = r.read<std::string_view>();
    auto kind = r.read<std::uint8_t>();
    auto arguments = r.read<std::string_view>();
    auto result = r.read<std::string_view>();
    auto description = r.read<std::string_view>();
    if (!token || token->size() != 4 || !kind || !arguments || !result || !description)
      return malformed("a wrong item");
    while (r.has_more())  // items a later version may add
      if (!r.skip()) return malformed("an unreadable item");
    if (!r.end_list()) return malformed("no end");
    const std::string_view t = *token;
    out.push_back({courier::token::from_chars(t[0], t[1], t[2], t[3]), *kind != 0, std::string(*arguments),
                   std::string(*result), std::string(*description)});
  }
  return out;
}

/// What open_child's request answers: the id of the child, open at both peers.
struct opened_context {
  std::uint64_t id = 0;
  /// The answer to a context_open names the child in its header (docs/protocol.md section 6).
  void assign_frame(const wire::frame_view& f, wire::shared_block*) noexcept { id = f.context_id(); }
};

namespace detail {

// The messages the connection actor takes for contexts (net/detail/connection.hpp handles them).
struct dynamic_call;
struct open_child;
struct close_child;

/// What every connection actor implements, whatever its typed interfaces (and a context actor).
using context_calls = courier::interface<wire::items_ref(dynamic_call), opened_context(open_child), unit(close_child)>;

struct dynamic_call {
  courier::token token;
  std::uint64_t context = 0;
  arguments items;
  // Who made the call, when a connection hands a peer's call on to a context actor: the
  // handler's incoming::peer() (empty: a local caller, who serves nothing).
  actor_ref<context_calls> caller{};
  std::uint64_t caller_context = 0;
};
struct open_child {
  courier::token kind;  // the context_open's token: zero for the peer's default kind
  std::string name;
  std::shared_ptr<const service_table> services;  // what this side serves in the child (may be null)
};
struct close_child {
  std::uint64_t context = 0;
};

}  // namespace detail

/// A context at the peer: the parent (id 0) or a child, on one connection. Empty by default.
class context_ref {
 public:
  context_ref() noexcept = default;
  context_ref(actor_ref<detail::context_calls> connection, std::uint64_t id) noexcept
      : connection_(std::move(connection)), id_(id) {}

  explicit operator bool() const noexcept { return static_cast<bool>(connection_); }
  /// 0 for the parent; odd for a child the connecting side opened, even for the accepting side's.
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  /// The connection actor (monitor it to hear of the connection's end; stop() ends it at once).
  [[nodiscard]] const actor_ref<detail::context_calls>& connection() const noexcept { return connection_; }
  /// The same connection's context `id` (a child whose id came from open_request()).
  [[nodiscard]] context_ref child(std::uint64_t id) const { return {connection_, id}; }

  /// END: a one-way send of `token` with `items`. False when the connection actor has stopped (a
  /// dead letter, as any send); a send the connection cannot put on the wire is a dead letter too.
  bool send(courier::token token, arguments items = {}) const {
    return connection_.send(detail::dynamic_call{token, id_, std::move(items)});
  }
  /// send(), refusing at the call rather than making a dead letter: send_result::full while the
  /// connection's mailbox or its output is above its mark (try again later: the message was not
  /// taken), stopped when the connection actor has stopped.
  [[nodiscard]] send_result try_send(courier::token token, arguments items = {}) const {
    return connection_.try_send(detail::dynamic_call{token, id_, std::move(items)});
  }
  /// END_AND_CALLBACK: `.then(on_reply(const wire::items_ref&), on_error(const courier::error&))`.
  [[nodiscard]] request_handle<detail::context_calls, detail::dynamic_call> call(courier::token token,
                                                                                 arguments items = {},
                                                                                 timespan timeout = infinite) const {
    return connection_.request(detail::dynamic_call{token, id_, std::move(items)}, timeout);
  }
  /// END_AND_WAIT: the reply's items, or the error. Blocks: errc::would_deadlock on a worker.
  [[nodiscard]] courier::result<wire::items_ref> call_wait(courier::token token, arguments items,
                                                           timespan timeout) const {
    return connection_.ask(detail::dynamic_call{token, id_, std::move(items)}, timeout);
  }

  /// The context's services, by reflection (`$SVC`). Blocks: errc::would_deadlock on a worker.
  [[nodiscard]] courier::result<std::vector<service_description>> services(timespan timeout) const {
    auto reply = call_wait(wire::reflection_token, {}, timeout);
    if (!reply) return reply.err();
    return read_service_list(*reply);
  }

  /// Opens a child context at the peer (of `kind`, zero for its default, named `name`) and waits
  /// for its answer: the child, or why the peer refused it (no_such_service: it has no such kind;
  /// too_many_contexts: its limit). `services` are what this side serves in the child (the peer
  /// may call them there). Blocks: errc::would_deadlock on a worker (use open_request there).
  [[nodiscard]] courier::result<context_ref> open_child(std::string_view name = {}, courier::token kind = {},
                                                        std::shared_ptr<const service_table> services = nullptr,
                                                        timespan timeout = std::chrono::seconds(5)) const {
    auto opened = connection_.ask(detail::open_child{kind, std::string(name), std::move(services)}, timeout);
    if (!opened) return opened.err();
    return child(opened->id);
  }
  /// The same, as a request: `.then([&](courier::net::opened_context c) { auto child = parent.child(c.id); }, ...)`.
  [[nodiscard]] request_handle<detail::context_calls, detail::open_child> open_request(
      std::string_view name = {}, courier::token kind = {}, std::shared_ptr<const service_table> services = nullptr,
      timespan timeout = infinite) const {
    return connection_.request(detail::open_child{kind, std::string(name), std::move(services)}, timeout);
  }

  /// Closes this child in order: the peer answers every call it received in it, then the close;
  /// calls made in the child after it fail with no_such_context. Closing the parent (id 0) is an
  /// orderly close of the connection, children and all (as node::stop does). One-way: false when
  /// the connection actor has stopped.
  bool close() const { return connection_.send(detail::close_child{id_}); }
  /// close(), as a request that settles once the close is complete (for the parent: once the
  /// connection has ended, with its reason unless the close was orderly).
  [[nodiscard]] request_handle<detail::context_calls, detail::close_child> close_request(
      timespan timeout = infinite) const {
    return connection_.request(detail::close_child{id_}, timeout);
  }
  /// close_request(), waiting for it. Blocks: errc::would_deadlock on a worker.
  courier::result<void> close_wait(timespan timeout) const {
    auto r = connection_.ask(detail::close_child{id_}, timeout);
    if (!r) return r.err();
    return {};
  }

 private:
  actor_ref<detail::context_calls> connection_;
  std::uint64_t id_ = 0;
};

}  // namespace courier::net
