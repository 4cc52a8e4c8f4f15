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
/// A handler's call (incoming) and its later answer (deferred_reply) are incoming.hpp.
///
/// Thread-safety: a service_table is filled before it is served and read-only afterwards (shared by
/// every connection that serves it).

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
#include "courier/net/incoming.hpp"
#include "courier/pool.hpp"
#include "courier/token.hpp"
#include "courier/wire/decoder.hpp"
#include "courier/wire/encoder.hpp"
#include "courier/wire/message.hpp"
#include "courier/wire/signature.hpp"

namespace courier::net {

namespace detail {

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

template <class Handler>
service_table& service_table::on(Handler handler) {
  using traits = detail::typed_service<Handler>;
  using message = typename traits::message;
  using returned = typename traits::returned;
  using reply = typename detail::typed_reply<returned>::type;
  static_assert(
      wire::message<message>,
      "service_table::on: the handler takes a message struct (a token and fields(), see courier/wire/message.hpp)");
  static_assert(!wire::views_frame<message>,
                "service_table::on: a typed service's fields own their bytes (std::string, not std::string_view)");
  constexpr bool returns = !std::is_void_v<reply> && !std::is_same_v<reply, courier::unit>;
  using reported = std::conditional_t<returns, reply, courier::unit>;
  service_signature signature{wire::arguments_signature<message>(), wire::result_signature<reported>(),
                              std::string(wire::description_of<message>()), returns};
  return add(
      courier::token(message::token),
      [h = std::move(handler)](incoming& call) {
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
      },
      std::move(signature));
}

}  // namespace courier::net
