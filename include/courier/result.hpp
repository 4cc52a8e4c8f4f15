#pragma once
/// @file
/// `courier::result<T, E>`: either a value of type T or an error of type E. It is the one result type
/// of Courier: the runtime's calls return `result<T>` (E = courier::error, see error.hpp) and the wire
/// codec's return `wire::result<T>` (E = wire::error, see wire/error.hpp).
///
/// It stores a union of T and E plus a flag, so a result of a scalar and a trivially copyable error is
/// itself trivially copyable and travels in registers: the codec's decoder returns one per item.
///
/// Construction, in the manner of std::expected:
///   result<int> r = 42;                            // a value, implicitly, when E cannot be made from it
///   result<int> r = errc::request_timeout;         // an error, implicitly, when T cannot be made from it
///   result<error> r{std::in_place, e};             // always a value, even when T and E are alike
///   result<error> r = failure(e);                  // always an error (or result(failure_tag, e))
///
/// Thread-safety: a plain value type. Distinct objects are independent; one object must not be modified
/// while another thread reads it. Nothing here allocates except what T's and E's own copies do.
///
/// This header depends on the standard library only, so that the wire codec can use it without the
/// actor runtime.

#include <concepts>
#include <new>
#include <system_error>
#include <type_traits>
#include <utility>

namespace courier {

struct error;

/// The reply of a handler that returns nothing; `result<void>` can be made from it.
struct unit {
  friend constexpr bool operator==(unit, unit) noexcept { return true; }
};

/// The tag that selects a result's error constructor: `result<T, E>(failure_tag, args...)`.
struct failure_t {
  explicit failure_t() = default;
};
inline constexpr failure_t failure_tag{};

namespace detail {

/// E can be made from Args: by a constructor, or (for an aggregate such as wire::error) by braces.
template <class E, class... Args>
concept initializable_from = std::is_constructible_v<E, Args...> ||
    (std::is_aggregate_v<E>&& requires(Args&&... args) { E{std::forward<Args>(args)...}; });

template <class E, class... Args>
constexpr void construct_at(E* p, Args&&... args) {
  if constexpr (std::is_constructible_v<E, Args...>)
    ::new (static_cast<void*>(p)) E(std::forward<Args>(args)...);
  else
    ::new (static_cast<void*>(p)) E{std::forward<Args>(args)...};
}

/// Whether making an E from Args can throw, by whichever form initializable_from found.
template <class E, class... Args>
consteval bool nothrow_initializable_from() {
  if constexpr (std::is_constructible_v<E, Args...>)
    return std::is_nothrow_constructible_v<E, Args...>;
  else
    return noexcept(E{std::declval<Args>()...});
}

template <class T>
concept copyable_member = std::is_copy_constructible_v<T>;
template <class T>
concept trivially_copyable_member = copyable_member<T> && std::is_trivially_copy_constructible_v<T>;
template <class T>
concept movable_member = std::is_move_constructible_v<T>;
template <class T>
concept trivially_movable_member = movable_member<T> && std::is_trivially_move_constructible_v<T>;
template <class T>
concept copy_assignable_member = copyable_member<T> && std::is_copy_assignable_v<T>;
template <class T>
concept trivially_copy_assignable_member = copy_assignable_member<T> && trivially_copyable_member<T> &&
    std::is_trivially_copy_assignable_v<T> && std::is_trivially_destructible_v<T>;
template <class T>
concept move_assignable_member = movable_member<T> && std::is_move_assignable_v<T>;
template <class T>
concept trivially_move_assignable_member = move_assignable_member<T> && trivially_movable_member<T> &&
    std::is_trivially_move_assignable_v<T> && std::is_trivially_destructible_v<T>;

/// "No error": what err() returns for a result that holds a value.
template <class E>
inline const E no_error{};

/// Throws the std::system_error that value() promises. An error type opts in with a function
/// `throw_result_error(const E&)` found by argument-dependent lookup (courier::error and wire::error
/// have one, out of line); any other E must convert to std::error_code.
template <class E>
[[noreturn]] void throw_bad_result_access(const E& e) {
  if constexpr (requires(const E& x) { throw_result_error(x); }) {
    throw_result_error(e);
    __builtin_unreachable();  // the hook is [[noreturn]]; this keeps the promise if one forgets to say so
  } else if constexpr (std::is_convertible_v<const E&, std::error_code>) {
    throw std::system_error(std::error_code(e), "result::value() called on an error");
  } else {
    static_assert(sizeof(E) == 0,
                  "courier::result<T, E>::value(): E needs throw_result_error(const E&) or a conversion to "
                  "std::error_code; use *r after checking has_value() instead");
  }
}

}  // namespace detail

/// An error on its way into a result: what `failure(e)` returns, like std::unexpected.
/// Thread-safety: a value type.
template <class E>
class failed {
 public:
  template <class G = E>
  requires(!std::is_same_v<std::remove_cvref_t<G>, failed> && std::is_constructible_v<E, G>) constexpr explicit failed(
      G&& g) noexcept(std::is_nothrow_constructible_v<E, G>)
      : error_(std::forward<G>(g)) {}

  [[nodiscard]] constexpr const E& error() const& noexcept { return error_; }
  [[nodiscard]] constexpr E&& error() && noexcept { return std::move(error_); }

 private:
  E error_;
};

/// Wraps `e` so that a result takes it as its error whatever T is: `return failure(err);`.
template <class E>
[[nodiscard]] constexpr failed<std::decay_t<E>> failure(E&& e) {
  return failed<std::decay_t<E>>(std::forward<E>(e));
}

template <class T, class E = error>
class result;

namespace detail {

template <class U>
inline constexpr bool is_failed = false;
template <class E>
inline constexpr bool is_failed<failed<E>> = true;
template <class U>
inline constexpr bool is_result = false;
template <class T, class E>
inline constexpr bool is_result<result<T, E>> = true;

/// Not a tag, not a result, not a failed<>: an argument the converting constructors may look at.
template <class U>
concept plain_argument =
    !is_result<std::remove_cvref_t<U>> && !is_failed<std::remove_cvref_t<U>> &&
    !std::is_same_v<std::remove_cvref_t<U>, std::in_place_t> && !std::is_same_v<std::remove_cvref_t<U>, failure_t>;

/// U makes a value and not an error: the implicit value constructor applies.
template <class T, class E, class U>
concept value_argument = plain_argument<U> && std::is_constructible_v<T, U> && !initializable_from<E, U>;

/// G makes an error and does not convert to a value: the implicit error constructor applies.
/// Implicit conversion, not constructibility, decides on the T side: courier::error has an explicit
/// operator bool, and `result<bool> r = error(...)` is meant as an error.
template <class T, class E, class G>
concept error_argument = plain_argument<G> && initializable_from<E, G> && !std::is_convertible_v<G, T>;

}  // namespace detail

/// A value of type T or an error of type E. See the file comment for how to make one.
///
/// `*r` and `r->` are unchecked (@pre has_value()), so the hot path pays for no test it has already
/// made; `value()` is checked and throws std::system_error naming the error. `err()` on a result that
/// holds a value returns a default-constructed E ("no error").
template <class T, class E>
class [[nodiscard]] result {
  static_assert(!std::is_reference_v<T> && !std::is_reference_v<E>, "courier::result: no references");
  static_assert(!std::is_same_v<std::remove_cv_t<T>, std::in_place_t> &&
                    !std::is_same_v<std::remove_cv_t<T>, failure_t>,
                "courier::result: T may not be a tag type");

 public:
  using value_type = T;
  using error_type = E;

  /// A value made from `v`; implicit when U converts to T. Not offered when E, too, can be made from U
  /// (then say which with std::in_place or failure()).
  template <class U = T>
  requires detail::value_argument<T, E, U>
  constexpr explicit(!std::is_convertible_v<U, T>) result(U&& v) noexcept(std::is_nothrow_constructible_v<T, U>)
      : value_(std::forward<U>(v)), ok_(true) {}

  /// An error made from `g` (`return errc::truncated;`); implicit. Not offered when G converts to T.
  template <class G>
  requires detail::error_argument<T, E, G>
  constexpr result(G&& g) noexcept(detail::nothrow_initializable_from<E, G>())  // NOLINT
      : ok_(false) {
    detail::construct_at(&error_, std::forward<G>(g));
  }

  /// Always a value, whatever E is.
  template <class... Args>
  requires std::is_constructible_v<T, Args...>
  constexpr explicit result(std::in_place_t, Args&&... args) noexcept(std::is_nothrow_constructible_v<T, Args...>)
      : value_(std::forward<Args>(args)...), ok_(true) {}

  /// Always an error, whatever T is.
  template <class... Args>
  requires detail::initializable_from<E, Args...>
  constexpr explicit result(failure_t, Args&&... args) noexcept(detail::nothrow_initializable_from<E, Args...>())
      : ok_(false) {
    detail::construct_at(&error_, std::forward<Args>(args)...);
  }

  /// The error of `failure(e)`.
  template <class G>
  requires detail::initializable_from<E, const G&>
  constexpr result(const failed<G>& f) noexcept(detail::nothrow_initializable_from<E, const G&>())  // NOLINT
      : ok_(false) {
    detail::construct_at(&error_, f.error());
  }
  template <class G>
  requires detail::initializable_from<E, G>
  constexpr result(failed<G>&& f) noexcept(detail::nothrow_initializable_from<E, G>())  // NOLINT
      : ok_(false) {
    detail::construct_at(&error_, std::move(f).error());
  }

  // Copy and move are trivial when T's and E's are, which keeps a result<int32_t, wire::error> in
  // registers; a std::variant's byte-wise index went through the stack and cost a store-forwarding
  // stall per item in the decode benchmark.
  constexpr result(const result&) requires detail::trivially_copyable_member<T> && detail::trivially_copyable_member<E>
  = default;
  constexpr result(const result& o) noexcept(
      std::is_nothrow_copy_constructible_v<T>&& std::is_nothrow_copy_constructible_v<E>) requires
      detail::copyable_member<T> && detail::copyable_member<E> : ok_(o.ok_) {
    if (ok_)
      ::new (static_cast<void*>(&value_)) T(o.value_);
    else
      ::new (static_cast<void*>(&error_)) E(o.error_);
  }
  constexpr result(result&&) requires detail::trivially_movable_member<T> && detail::trivially_movable_member<E>
  = default;
  constexpr result(result&& o) noexcept(
      std::is_nothrow_move_constructible_v<T>&& std::is_nothrow_move_constructible_v<E>) requires
      detail::movable_member<T> && detail::movable_member<E> : ok_(o.ok_) {
    if (ok_)
      ::new (static_cast<void*>(&value_)) T(std::move(o.value_));
    else
      ::new (static_cast<void*>(&error_)) E(std::move(o.error_));
  }

  constexpr result& operator=(
      const result&) requires detail::trivially_copy_assignable_member<T> && detail::trivially_copy_assignable_member<E>
  = default;
  constexpr result& operator=(
      const result& o) requires detail::copy_assignable_member<T> && detail::copy_assignable_member<E> {
    if (ok_ && o.ok_)
      value_ = o.value_;
    else if (!ok_ && !o.ok_)
      error_ = o.error_;
    else if (o.ok_)
      reinit(&value_, &error_, o.value_);
    else
      reinit(&error_, &value_, o.error_);
    ok_ = o.ok_;
    return *this;
  }
  constexpr result& operator=(
      result&&) requires detail::trivially_move_assignable_member<T> && detail::trivially_move_assignable_member<E>
  = default;
  constexpr result& operator=(result&& o) noexcept(
      std::is_nothrow_move_constructible_v<T>&& std::is_nothrow_move_assignable_v<T>&&
          std::is_nothrow_move_constructible_v<E>&& std::is_nothrow_move_assignable_v<E>) requires
      detail::move_assignable_member<T> && detail::move_assignable_member<E> {
    if (ok_ && o.ok_)
      value_ = std::move(o.value_);
    else if (!ok_ && !o.ok_)
      error_ = std::move(o.error_);
    else if (o.ok_)
      reinit(&value_, &error_, std::move(o.value_));
    else
      reinit(&error_, &value_, std::move(o.error_));
    ok_ = o.ok_;
    return *this;
  }

  constexpr ~result() requires std::is_trivially_destructible_v<T> && std::is_trivially_destructible_v<E>
  = default;
  constexpr ~result() {
    if (ok_)
      value_.~T();
    else
      error_.~E();
  }

  [[nodiscard]] constexpr bool has_value() const noexcept { return ok_; }
  constexpr explicit operator bool() const noexcept { return ok_; }

  /// The value. @pre has_value(): unchecked, like std::expected (check first, or use value()).
  constexpr T& operator*() & noexcept { return value_; }
  constexpr const T& operator*() const& noexcept { return value_; }
  /// By value from an rvalue: `for (auto x : *r.read<...>())` must not keep a reference into a dead temporary.
  constexpr T operator*() && noexcept(std::is_nothrow_move_constructible_v<T>) { return std::move(value_); }
  /// @pre has_value(): unchecked.
  constexpr T* operator->() noexcept { return &value_; }
  constexpr const T* operator->() const noexcept { return &value_; }

  /// The value; throws std::system_error carrying the error's code and text when there is none.
  [[nodiscard]] constexpr T& value() & {
    if (!ok_) [[unlikely]]
      detail::throw_bad_result_access(error_);
    return value_;
  }
  [[nodiscard]] constexpr const T& value() const& {
    if (!ok_) [[unlikely]]
      detail::throw_bad_result_access(error_);
    return value_;
  }
  [[nodiscard]] constexpr T value() && {
    if (!ok_) [[unlikely]]
      detail::throw_bad_result_access(error_);
    return std::move(value_);
  }

  /// The value, or `fallback` converted to T when there is none.
  template <class U>
  [[nodiscard]] constexpr T value_or(U&& fallback) const& {
    return ok_ ? value_ : static_cast<T>(std::forward<U>(fallback));
  }
  template <class U>
  [[nodiscard]] constexpr T value_or(U&& fallback) && {
    return ok_ ? std::move(value_) : static_cast<T>(std::forward<U>(fallback));
  }

  /// The error; a default-constructed E ("no error") when the result holds a value.
  [[nodiscard]] constexpr const E& err() const noexcept {
    if constexpr (std::is_default_constructible_v<E>) {
      return ok_ ? detail::no_error<E> : error_;
    } else {
      return error_;  // @pre !has_value() for an E without a "no error" state
    }
  }
  /// Same as err(), with std::expected's name.
  [[nodiscard]] constexpr const E& error() const noexcept { return err(); }

  /// The error's `code` member, or a value-initialized code when there is no error (for an E with a
  /// `code` member, such as courier::error and wire::error).
  [[nodiscard]] constexpr auto code() const noexcept requires requires(const E& e) { e.code; }
  {
    using code_type = std::remove_cvref_t<decltype(std::declval<const E&>().code)>;
    return ok_ ? code_type{} : error_.code;
  }

 private:
  // Replaces the active member `from` with a New made from args, leaving *this unchanged if that throws.
  template <class New, class Old, class... Args>
  static constexpr void reinit(New* to, Old* from, Args&&... args) {
    if constexpr (std::is_nothrow_constructible_v<New, Args...>) {
      from->~Old();
      ::new (static_cast<void*>(to)) New(std::forward<Args>(args)...);
    } else if constexpr (std::is_nothrow_move_constructible_v<New>) {
      New tmp(std::forward<Args>(args)...);
      from->~Old();
      ::new (static_cast<void*>(to)) New(std::move(tmp));
    } else {
      Old saved(std::move(*from));
      from->~Old();
      try {
        ::new (static_cast<void*>(to)) New(std::forward<Args>(args)...);
      } catch (...) {
        ::new (static_cast<void*>(from)) Old(std::move(saved));
        throw;
      }
    }
  }

  union {
    T value_;
    E error_;
  };
  bool ok_;
};

/// A call that succeeds with no value or fails with an E.
template <class E>
class [[nodiscard]] result<void, E> {
  static_assert(!std::is_reference_v<E>, "courier::result: no references");

 public:
  using value_type = void;
  using error_type = E;

  /// Success.
  constexpr result() noexcept : none_(), ok_(true) {}
  constexpr result(unit) noexcept : result() {}  // NOLINT: a unit reply is a success
  constexpr explicit result(std::in_place_t) noexcept : result() {}

  /// An error made from `g`; implicit.
  template <class G>
  requires(detail::plain_argument<G> && !std::is_same_v<std::remove_cvref_t<G>, unit> &&
           detail::initializable_from<
               E, G>) constexpr result(G&& g) noexcept(detail::nothrow_initializable_from<E, G>())  // NOLINT
      : ok_(false) {
    detail::construct_at(&error_, std::forward<G>(g));
  }
  template <class... Args>
  requires detail::initializable_from<E, Args...>
  constexpr explicit result(failure_t, Args&&... args) noexcept(detail::nothrow_initializable_from<E, Args...>())
      : ok_(false) {
    detail::construct_at(&error_, std::forward<Args>(args)...);
  }
  template <class G>
  requires detail::initializable_from<E, const G&>
  constexpr result(const failed<G>& f) noexcept(detail::nothrow_initializable_from<E, const G&>())  // NOLINT
      : ok_(false) {
    detail::construct_at(&error_, f.error());
  }
  template <class G>
  requires detail::initializable_from<E, G>
  constexpr result(failed<G>&& f) noexcept(detail::nothrow_initializable_from<E, G>())  // NOLINT
      : ok_(false) {
    detail::construct_at(&error_, std::move(f).error());
  }

  constexpr result(const result&) requires detail::trivially_copyable_member<E>
  = default;
  constexpr result(const result& o) noexcept(
      std::is_nothrow_copy_constructible_v<E>) requires detail::copyable_member<E> : none_(),
                                                                                     ok_(o.ok_) {
    if (!ok_) ::new (static_cast<void*>(&error_)) E(o.error_);
  }
  constexpr result(result&&) requires detail::trivially_movable_member<E>
  = default;
  constexpr result(result&& o) noexcept(std::is_nothrow_move_constructible_v<E>) requires detail::movable_member<E>
      : none_(), ok_(o.ok_) {
    if (!ok_) ::new (static_cast<void*>(&error_)) E(std::move(o.error_));
  }
  constexpr result& operator=(const result&) requires detail::trivially_copy_assignable_member<E>
  = default;
  constexpr result& operator=(const result& o) requires detail::copy_assignable_member<E> {
    if (!ok_ && !o.ok_) {
      error_ = o.error_;
    } else if (!o.ok_) {
      ::new (static_cast<void*>(&error_)) E(o.error_);
    } else if (!ok_) {
      error_.~E();
    }
    ok_ = o.ok_;
    return *this;
  }
  constexpr result& operator=(result&&) requires detail::trivially_move_assignable_member<E>
  = default;
  constexpr result& operator=(result&& o) noexcept(
      std::is_nothrow_move_constructible_v<E>&& std::is_nothrow_move_assignable_v<E>) requires
      detail::move_assignable_member<E> {
    if (!ok_ && !o.ok_) {
      error_ = std::move(o.error_);
    } else if (!o.ok_) {
      ::new (static_cast<void*>(&error_)) E(std::move(o.error_));
    } else if (!ok_) {
      error_.~E();
    }
    ok_ = o.ok_;
    return *this;
  }
  constexpr ~result() requires std::is_trivially_destructible_v<E>
  = default;
  constexpr ~result() {
    if (!ok_) error_.~E();
  }

  [[nodiscard]] constexpr bool has_value() const noexcept { return ok_; }
  constexpr explicit operator bool() const noexcept { return ok_; }

  /// @pre has_value(): unchecked, does nothing.
  constexpr void operator*() const noexcept {}
  /// Throws std::system_error carrying the error's code and text if there is an error.
  constexpr void value() const {
    if (!ok_) [[unlikely]]
      detail::throw_bad_result_access(error_);
  }

  /// The error; a default-constructed E ("no error") on success.
  [[nodiscard]] constexpr const E& err() const noexcept {
    if constexpr (std::is_default_constructible_v<E>) {
      return ok_ ? detail::no_error<E> : error_;
    } else {
      return error_;  // @pre !has_value() for an E without a "no error" state
    }
  }
  [[nodiscard]] constexpr const E& error() const noexcept { return err(); }

  [[nodiscard]] constexpr auto code() const noexcept requires requires(const E& e) { e.code; }
  {
    using code_type = std::remove_cvref_t<decltype(std::declval<const E&>().code)>;
    return ok_ ? code_type{} : error_.code;
  }

 private:
  struct empty {};
  union {
    empty none_;
    E error_;
  };
  bool ok_;
};

}  // namespace courier
