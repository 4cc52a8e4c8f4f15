#include "courier/message.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

#include <catch2/catch.hpp>

namespace {

struct small {
  std::int32_t value;
};
struct alignas(32) wide {
  double values[4];
};
struct owns_text {
  std::string text;
};

}  // namespace

TEST_CASE("a message slot is the header followed by the message, in one pooled slot", "[message]") {
  using courier::detail::message_slot;
  auto* slot = courier::detail::make_message<small>(3, nullptr, small{42});
  CHECK(slot->type == 3);
  CHECK(slot->reply_to == nullptr);
  CHECK(slot->next == nullptr);
  CHECK(slot->value.value == 42);
  // The header is the queue node: no separate list node, no box around the message.
  CHECK(static_cast<void*>(static_cast<courier::detail::message_header*>(slot)) == static_cast<void*>(slot));
  CHECK(sizeof(message_slot<small>) <= 32);
  courier::pool::destroy(slot);
}

TEST_CASE("message slots respect the message's alignment", "[message]") {
  for (int i = 0; i < 64; ++i) {
    auto* slot = courier::detail::make_message<wide>(0, nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(&slot->value) % alignof(wide) == 0);
    courier::pool::destroy(slot);
  }
}

TEST_CASE("a message that owns memory is constructed and destroyed in place", "[message]") {
  const std::string long_text(200, 'x');  // past the small-string buffer: the string allocates
  auto* slot = courier::detail::make_message<owns_text>(1, nullptr, owns_text{long_text});
  CHECK(slot->value.text == long_text);
  courier::pool::destroy(slot);  // runs ~owns_text; ASan would report the string's memory otherwise
}

TEST_CASE("system message types stay clear of user indices", "[message]") {
  using namespace courier::detail;
  CHECK(response_type >= first_system_type);
  CHECK(error_response_type >= first_system_type);
  CHECK(exit_type >= first_system_type);
  CHECK(response_type != error_response_type);
  CHECK(error_response_type != exit_type);
}

TEST_CASE("down carries the stopped actor's id and its reason", "[message]") {
  courier::down normal{7, {}};
  CHECK(normal.id == 7);
  CHECK_FALSE(normal.reason);
  courier::down failed{8, courier::error(courier::errc::handler_failed, "boom")};
  CHECK(failed.reason == courier::errc::handler_failed);
  CHECK(failed.reason.text == "boom");
}
