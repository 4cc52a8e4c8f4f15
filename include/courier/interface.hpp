#pragma once
/// @file
/// Interfaces: the messages an actor accepts and what each one replies, declared without the actor.
///
///     using counter_api = courier::interface<void(add), int(get)>;   // counter_api.hpp
///     courier::actor_ref<counter_api> c = sys.spawn<counter>();      // checked at compile time
///
/// A client includes only the interface's header. `actor_ref<counter_api>` converts from
/// `actor_ref<counter>` when `counter` accepts every message of the interface and replies to each
/// with the declared type (`void` declares a `unit` reply); otherwise the conversion fails to compile
/// naming `actor_does_not_implement<Actor, Interface, Message>`. A send through the interface of a
/// message it does not declare fails to compile naming `interface_does_not_declare<Interface, Message>`.
///
/// An interface ref carries, beside the actor pointer, a pointer to a static table that maps the
/// interface's message positions to the actor's type indices: a send through it costs one extra load,
/// never a virtual call. A remote peer (the transports) gets a ref of the same type.
///
/// Thread-safety: interfaces are types; nothing here has state.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "courier/detail/type_list.hpp"
#include "courier/error.hpp"

namespace courier {

template <class... Signatures>
struct interface;

template <class R>
class response_promise;
template <class R>
class delegated;

namespace detail {

/// The reply a handler's return type stands for: `void` replies `unit`, a deferred reply
/// (`response_promise<R>`, `delegated<R>`) replies `R`, anything else its decayed type.
template <class R>
struct reply_of {
  using type = std::remove_cvref_t<R>;
};
template <>
struct reply_of<void> {
  using type = unit;
};
template <class R>
struct reply_of<response_promise<R>> {
  using type = typename reply_of<R>::type;
};
template <class R>
struct reply_of<delegated<R>> {
  using type = typename reply_of<R>::type;
};
template <class R>
using reply_of_t = typename reply_of<std::remove_cvref_t<R>>::type;

template <class T>
inline constexpr bool is_interface = false;
template <class... Signatures>
inline constexpr bool is_interface<interface<Signatures...>> = true;

}  // namespace detail

template <class... Rs, class... Ms>
struct interface<Rs(Ms)...> {
  static_assert(detail::all_distinct<std::remove_cvref_t<Ms>...>(),
                "courier: an interface declares a message type twice");

  using message_types = detail::type_list<std::remove_cvref_t<Ms>...>;

  template <class M>
  static constexpr bool accepts = detail::index_of<M, std::remove_cvref_t<Ms>...>() < sizeof...(Ms);

  /// The message's position in the interface (not the implementing actor's type index).
  template <class M>
  static constexpr std::size_t position = detail::index_of<M, std::remove_cvref_t<Ms>...>();

  template <class M>
  using reply_type = detail::nth_type<position<M>, detail::reply_of_t<Rs>...>;
};

namespace detail {

/// Names the actor, the interface and the first message it fails in the compiler's trail.
template <class Actor, class Interface, class Message>
struct actor_does_not_implement {
  static_assert(sizeof(Actor*) == 0,
                "courier: this actor does not implement the interface: it does not accept this message, or "
                "replies to it with another type (see actor_does_not_implement<Actor, Interface, Message> "
                "in the instantiation trail above)");
};

template <class Actor, class Interface, class Message>
constexpr bool implements_one() {
  if constexpr (!Actor::template accepts<Message>) {
    return false;
  } else {
    using actual = reply_of_t<decltype(std::declval<Actor&>().on(std::declval<Message&>()))>;
    return std::is_same_v<actual, typename Interface::template reply_type<Message>>;
  }
}

template <class Actor, class Interface, class Message>
constexpr bool check_implements_one() {
  if constexpr (!implements_one<Actor, Interface, Message>()) {
    (void)actor_does_not_implement<Actor, Interface, Message>{};
    return false;
  } else {
    return true;
  }
}

template <class Actor, class Interface>
struct implementation;

template <class Actor, class... Rs, class... Ms>
struct implementation<Actor, interface<Rs(Ms)...>> {
  using api = interface<Rs(Ms)...>;
  static constexpr bool value = (implements_one<Actor, api, std::remove_cvref_t<Ms>>() && ...);
  /// Evaluates to false after a static_assert that names the first message that does not fit.
  static constexpr bool check() { return (check_implements_one<Actor, api, std::remove_cvref_t<Ms>>() && ...); }
  /// The actor's type index for each of the interface's messages, in the interface's order.
  static constexpr std::uint16_t indices[] = {Actor::template type_index<std::remove_cvref_t<Ms>>...};
};

}  // namespace detail

/// What a request for `M` to `T` (an actor or an interface) replies with: the handler's return type
/// (`unit` for void, `R` for a deferred `response_promise<R>` or `delegated<R>`), or the interface's.
template <class T, class M>
struct reply_type {
  using type = detail::reply_of_t<decltype(std::declval<T&>().on(std::declval<M&>()))>;
};
template <class... Signatures, class M>
struct reply_type<interface<Signatures...>, M> {
  using type = typename interface<Signatures...>::template reply_type<M>;
};
template <class T, class M>
using reply_type_t = typename reply_type<T, M>::type;

/// True when `Actor` accepts every message of `Interface` and replies to each with the declared type.
template <class Actor, class Interface>
inline constexpr bool implements = detail::implementation<Actor, Interface>::value;

}  // namespace courier
