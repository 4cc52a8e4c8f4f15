#include "courier/error.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <system_error>

using courier::errc;

TEST_CASE("error category: name and one message per code", "[error]") {
  const std::error_category& cat = courier::courier_category();
  CHECK(std::string(cat.name()) == "courier");
  CHECK(&cat == &courier::courier_category());  // a singleton: codes compare by category address

  CHECK(cat.message(static_cast<int>(errc::actor_stopped)) == "actor stopped");
  CHECK(cat.message(static_cast<int>(errc::request_timeout)) == "request timed out");
  CHECK(cat.message(static_cast<int>(errc::handler_failed)) == "handler failed");
  CHECK(cat.message(static_cast<int>(errc::would_deadlock)) == "blocking call would deadlock");
  CHECK(cat.message(static_cast<int>(errc::system_shutdown)) == "actor system shut down");
  CHECK(cat.message(static_cast<int>(errc::stopped_by_request)) == "stopped by request");
  CHECK(cat.message(static_cast<int>(errc::empty_reference)) == "empty actor reference");
  CHECK(cat.message(0) == "unknown courier error");
  CHECK(cat.message(999) == "unknown courier error");
}

TEST_CASE("errc converts implicitly to std::error_code in the courier category", "[error]") {
  std::error_code ec = errc::request_timeout;
  CHECK(ec.category() == courier::courier_category());
  CHECK(ec.value() == static_cast<int>(errc::request_timeout));
  CHECK(ec == courier::make_error_code(errc::request_timeout));
  CHECK(ec != courier::make_error_code(errc::actor_stopped));
  CHECK(static_cast<bool>(ec));
  // Same value, other category: not equal.
  CHECK(ec != std::error_code(static_cast<int>(errc::request_timeout), std::generic_category()));
}

TEST_CASE("error: default is no error, a code makes it true, == compares the code only", "[error]") {
  courier::error none;
  CHECK_FALSE(none);
  CHECK_FALSE(none.code);
  CHECK(none.text.empty());
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
  CHECK_FALSE(ok.err());

  courier::result<int> bad = courier::error(errc::request_timeout, "late");
  CHECK_FALSE(bad.has_value());
  CHECK_FALSE(static_cast<bool>(bad));
  CHECK(bad.err() == errc::request_timeout);
  CHECK(bad.err().text == "late");

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

TEST_CASE("result<void> and result<unit>", "[error][result]") {
  courier::result<void> ok;
  CHECK(ok.has_value());
  courier::result<void> from_unit = courier::unit{};
  CHECK(from_unit.has_value());
  courier::result<void> bad = courier::error(errc::actor_stopped);
  CHECK_FALSE(bad.has_value());
  CHECK(bad.err() == errc::actor_stopped);

  courier::result<courier::unit> u = courier::unit{};
  CHECK(u.has_value());
  CHECK(*u == courier::unit{});
}
