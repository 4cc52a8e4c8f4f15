#pragma once
/// Deterministic protocol traces, in the style of CAF's `expect((int), from(a).to(b))`:
///
///   courier_test::expect<add>(sys).to(c);                       // c handled an `add`
///   courier_test::expect<courier_test::system_message>(sys).to(r);  // r got a reply (or error)
///   courier_test::expect_host_continuation(sys);                // the test's continuation ran
///   courier_test::expect_nothing(sys);                          // nothing is ready
///
/// Each `to` runs exactly one message with `system::run_step()` (deterministic systems only) and
/// checks that `ref`'s actor handled a message of type M. The message's content is not
/// checked: check what the handler did instead.

#include <catch2/catch.hpp>

#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "courier/system.hpp"

namespace courier_test {

/// For expect<system_message>: a reply, a failed request's error, a stop, on_start.
struct system_message {};

template <class M>
class expectation {
 public:
  explicit expectation(courier::system& sys) : sys_(sys) {}

  template <class Ref>
  void to(const Ref& ref) {
    const std::optional<courier::step> s = sys_.run_step();
    INFO("expected " << expected_name() << " to actor #" << ref.id());
    REQUIRE(s.has_value());  // something was ready to run
    INFO("ran " << (s->system_message ? "a system message" : s->message_type) << " in actor #" << s->actor);
    CHECK(s->actor == ref.id());
    if constexpr (std::is_same_v<M, system_message>) {
      CHECK(s->system_message);
    } else {
      CHECK_FALSE(s->system_message);
      CHECK(std::strcmp(s->message_type, typeid(M).name()) == 0);
    }
  }

 private:
  static std::string expected_name() {
    if constexpr (std::is_same_v<M, system_message>) return "a system message";
    return typeid(M).name();
  }
  courier::system& sys_;
};

template <class M>
expectation<M> expect(courier::system& sys) {
  return expectation<M>(sys);
}

/// Checks that the next step is the host lane running a continuation of a request the test
/// thread made (a reply, an error or a time-out): host code runs there, not in the replier.
inline void expect_host_continuation(courier::system& sys) {
  const std::optional<courier::step> s = sys.run_step();
  INFO("expected the host lane to run a continuation");
  REQUIRE(s.has_value());
  INFO("ran " << (s->system_message ? "a system message" : s->message_type) << " in actor #" << s->actor);
  CHECK(s->host_continuation);
  CHECK(s->system_message);
}

/// Checks that no actor is ready: the next run_step runs nothing.
inline void expect_nothing(courier::system& sys) {
  const std::optional<courier::step> s = sys.run_step();
  INFO("unexpected: actor #" << (s ? s->actor : 0) << " ran " << (s ? s->message_type : ""));
  CHECK_FALSE(s.has_value());
}

}  // namespace courier_test
