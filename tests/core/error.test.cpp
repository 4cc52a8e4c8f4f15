#include "courier/error.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>

#include "courier/actor.hpp"
#include "courier/system.hpp"

using courier::errc;
using namespace std::chrono_literals;

// The numbers are the protocol's runtime codes (docs/protocol.md, section 9): an ERROR frame carries
// them as they are, so none may ever change.
static_assert(static_cast<int>(errc::no_such_service) == 256);
static_assert(static_cast<int>(errc::handler_failed) == 257);
static_assert(static_cast<int>(errc::no_such_context) == 258);
static_assert(static_cast<int>(errc::request_timeout) == 259);
static_assert(static_cast<int>(errc::system_shutdown) == 260);
static_assert(static_cast<int>(errc::actor_stopped) == 261);
static_assert(static_cast<int>(errc::would_deadlock) == 262);
static_assert(static_cast<int>(errc::stopped_by_request) == 263);
static_assert(static_cast<int>(errc::empty_reference) == 264);
static_assert(static_cast<int>(errc::broken_promise) == 265);
static_assert(static_cast<int>(errc::mailbox_full) == 266);
static_assert(static_cast<int>(errc::name_not_found) == 267);
static_assert(static_cast<int>(errc::interface_mismatch) == 268);
static_assert(static_cast<int>(errc::name_taken) == 269);
static_assert(static_cast<int>(errc::invalid_argument) == 270);
static_assert(static_cast<int>(errc::parent_stopped) == 271);
static_assert(static_cast<int>(errc::connection_lost) == 272);
static_assert(static_cast<int>(errc::protocol_error) == 273);

// Construction rules that are checked at compile time.
static_assert(std::is_constructible_v<courier::result<int>, int>);
static_assert(std::is_constructible_v<courier::result<int>, errc>);
static_assert(std::is_constructible_v<courier::result<int>, courier::error>);
// An error with an explicit operator bool is still an error for result<bool>.
static_assert(std::is_convertible_v<courier::error, courier::result<bool>>);
// result<error>: a bare error is ambiguous, so neither implicit constructor takes it...
static_assert(!std::is_convertible_v<courier::error, courier::result<courier::error>>);
// ...and the tagged forms always work.
static_assert(std::is_constructible_v<courier::result<courier::error>, std::in_place_t, courier::error>);
static_assert(std::is_constructible_v<courier::result<courier::error>, courier::failure_t, courier::error>);
static_assert(std::is_convertible_v<courier::failed<courier::error>, courier::result<courier::error>>);
// Cheap for scalars: trivially copyable, so it is returned in registers.
static_assert(std::is_trivially_copyable_v<courier::result<int, int>>);
static_assert(!std::is_copy_constructible_v<courier::result<std::unique_ptr<int>>>);

namespace {

const std::string all_texts[] = {"no such service",
                                 "handler failed",
                                 "no such context",
                                 "request timed out",
                                 "actor system shut down",
                                 "actor stopped",
                                 "blocking call would deadlock",
                                 "stopped by request",
                                 "empty actor reference",
                                 "reply promise dropped without a reply",
                                 "mailbox full",
                                 "no actor registered under that name",
                                 "actor does not implement the interface",
                                 "name already registered",
                                 "invalid argument",
                                 "parent actor stopped",
                                 "connection lost",
                                 "protocol error",
                                 "too many child contexts"};

}  // namespace

TEST_CASE("error category: name and one distinct message per code", "[error]") {
  const std::error_category& cat = courier::courier_category();
  CHECK(std::string(cat.name()) == "courier");
  for (int code = 256; code <= 274; ++code) {
    INFO("code " << code);
    CHECK(cat.message(code) == all_texts[code - 256]);
  }
  CHECK(cat.message(0) == "unknown courier error");
  CHECK(cat.message(1) == "unknown courier error");    // the old numbering is gone
  CHECK(cat.message(255) == "unknown courier error");  // protocol errors belong to courier.wire
  CHECK(cat.message(275) == "unknown courier error");
}

TEST_CASE("errc converts implicitly to std::error_code in the courier category", "[error]") {
  std::error_code ec = errc::request_timeout;
  CHECK(ec.category() == courier::courier_category());
  CHECK(ec.value() == 259);
  CHECK(ec == courier::make_error_code(errc::request_timeout));
  CHECK(ec != courier::make_error_code(errc::actor_stopped));
  CHECK(ec.message() == "request timed out");
  // Same value, other category: not equal.
  CHECK(ec != std::error_code(259, std::generic_category()));
}

TEST_CASE("error: default is no error, a code makes it true, == compares the code only", "[error]") {
  courier::error none;
  CHECK_FALSE(none);
  CHECK_FALSE(none == errc::actor_stopped);

  courier::error e(errc::handler_failed, "boom");
  CHECK(e);
  CHECK(e == errc::handler_failed);
  CHECK_FALSE(e == errc::actor_stopped);
  CHECK(e.text == "boom");

  courier::error foreign(std::make_error_code(std::errc::timed_out), "socket");
  CHECK(foreign);
  CHECK_FALSE(foreign == errc::request_timeout);
}

TEST_CASE("error::describe names category, message and text", "[error]") {
  CHECK(courier::error{}.describe() == "no error");
  CHECK(courier::error(errc::actor_stopped).describe() == "courier: actor stopped");
  CHECK(courier::error(errc::handler_failed, "division by zero").describe() ==
        "courier: handler failed (division by zero)");
  const std::string generic = courier::error(std::make_error_code(std::errc::timed_out), "x").describe();
  CHECK(generic.rfind("generic: ", 0) == 0);
  CHECK(generic.find("(x)") != std::string::npos);
}

TEST_CASE("result<T> holds a value or an error", "[error][result]") {
  courier::result<int> ok = 42;
  REQUIRE(ok.has_value());
  CHECK(static_cast<bool>(ok));
  CHECK(ok.value() == 42);
  CHECK(*ok == 42);
  CHECK_FALSE(ok.err());  // "no error" on a value
  CHECK_FALSE(ok.code());
  CHECK(ok.value_or(7) == 42);

  courier::result<int> bad = courier::error(errc::request_timeout, "late");
  CHECK_FALSE(bad.has_value());
  CHECK_FALSE(static_cast<bool>(bad));
  CHECK(bad.err() == errc::request_timeout);
  CHECK(bad.error().text == "late");
  CHECK(bad.code() == errc::request_timeout);
  CHECK(bad.value_or(7) == 7);

  courier::result<int> from_code = errc::mailbox_full;
  CHECK(from_code.err() == errc::mailbox_full);
  courier::result<bool> flag = courier::error(errc::name_not_found);
  CHECK_FALSE(flag.has_value());
  CHECK(flag.err() == errc::name_not_found);

  courier::result<std::string> s = std::string("hello");
  CHECK(s->size() == 5);
  s.value() += "!";
  std::string moved = std::move(s).value();
  CHECK(moved == "hello!");

  courier::result<std::unique_ptr<int>> owning = std::make_unique<int>(7);
  std::unique_ptr<int> p = std::move(owning).value();
  REQUIRE(p != nullptr);
  CHECK(*p == 7);
}

TEST_CASE("result<T>::value() on an error throws std::system_error with its code and text", "[error][result]") {
  const courier::result<int> bad = courier::error(errc::handler_failed, "division by zero");
  try {
    (void)bad.value();
    FAIL("value() did not throw");
  } catch (const std::system_error& e) {
    CHECK(e.code() == courier::make_error_code(errc::handler_failed));
    const std::string what = e.what();
    CHECK(what.find("division by zero") != std::string::npos);
    CHECK(what.find("handler failed") != std::string::npos);
  }

  courier::result<std::string> gone = errc::actor_stopped;
  CHECK_THROWS_MATCHES(std::move(gone).value(), std::system_error,
                       Catch::Matchers::Predicate<std::system_error>(
                           [](const std::system_error& e) { return e.code() == errc::actor_stopped; }));
  courier::result<void> failed_void = errc::request_timeout;
  CHECK_THROWS_AS(failed_void.value(), std::system_error);
  courier::result<void> fine;
  CHECK_NOTHROW(fine.value());
}

TEST_CASE("result copies, moves and assigns across value and error", "[error][result]") {
  courier::result<std::string> a = std::string(100, 'a');  // long enough to live on the heap
  courier::result<std::string> b = courier::error(errc::actor_stopped, std::string(100, 'b'));
  courier::result<std::string> c = a;
  CHECK(*c == std::string(100, 'a'));
  c = b;  // value -> error
  REQUIRE_FALSE(c.has_value());
  CHECK(c.err().text == std::string(100, 'b'));
  c = std::move(a);  // error -> value
  REQUIRE(c.has_value());
  CHECK(*c == std::string(100, 'a'));
  c = courier::result<std::string>(std::string("x"));  // value -> value
  CHECK(*c == "x");
  courier::result<std::string> d = b;
  d = courier::result<std::string>(errc::name_taken);  // error -> error
  CHECK(d.err() == errc::name_taken);
}

TEST_CASE("result<error>: a value and an error of the same type stay apart", "[error][result]") {
  courier::result<courier::error> v{std::in_place, errc::name_taken, "the value"};
  REQUIRE(v.has_value());
  CHECK(*v == errc::name_taken);
  CHECK(v->text == "the value");
  CHECK_FALSE(v.err());

  courier::result<courier::error> f = courier::failure(courier::error(errc::actor_stopped, "the error"));
  REQUIRE_FALSE(f.has_value());
  CHECK(f.err() == errc::actor_stopped);
  CHECK(f.err().text == "the error");

  courier::result<courier::error> t(courier::failure_tag, errc::would_deadlock);
  REQUIRE_FALSE(t.has_value());
  CHECK(t.err() == errc::would_deadlock);
}

TEST_CASE("result<void> and result<unit>", "[error][result]") {
  courier::result<void> ok;
  CHECK(ok.has_value());
  CHECK_FALSE(ok.err());
  courier::result<void> from_unit = courier::unit{};
  CHECK(from_unit.has_value());
  courier::result<void> bad = courier::error(errc::actor_stopped);
  CHECK_FALSE(bad.has_value());
  CHECK(bad.err() == errc::actor_stopped);
  ok = bad;
  CHECK_FALSE(ok.has_value());
  ok = courier::result<void>();
  CHECK(ok.has_value());

  courier::result<courier::unit> u = courier::unit{};
  CHECK(u.has_value());
  CHECK(*u == courier::unit{});
}

namespace {

struct check {
  int value;
};

/// A handler whose reply type is courier::error itself: result<error> must tell it from a failure.
class validator : public courier::actor<validator, check> {
 public:
  courier::error on(const check& c) {
    if (c.value < 0) return courier::error(errc::invalid_argument, "negative");
    return {};
  }
};

}  // namespace

TEST_CASE("ask on a handler that returns courier::error: the reply is the value", "[error][result]") {
  courier::system sys{courier::config::deterministic()};
  auto v = sys.spawn<validator>();
  courier::result<courier::error> r = v.ask(check{-1}, 1s);
  REQUIRE(r.has_value());  // the handler ran and replied; the reply happens to be an error object
  CHECK(*r == errc::invalid_argument);
  CHECK(r->text == "negative");

  courier::result<courier::error> fine = v.ask(check{1}, 1s);
  REQUIRE(fine.has_value());
  CHECK_FALSE(*fine);

  v.stop();
  sys.run_until_idle();
  courier::result<courier::error> stopped = v.ask(check{1}, 1s);
  REQUIRE_FALSE(stopped.has_value());
  CHECK(stopped.err() == errc::stopped_by_request);  // the reason it stopped with
  CHECK(stopped.err().text.find("the request was not sent") != std::string::npos);
}
