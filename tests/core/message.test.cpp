#include "courier/detail/message.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

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

// The header is the queue node (no separate list node, no box around the message), the message
// follows it in the same slot, and a small message fits a small pool class.
static_assert(std::is_base_of_v<courier::detail::message_header, courier::detail::message_slot<small>>);
static_assert(sizeof(courier::detail::message_slot<small>) <= 32);
static_assert(alignof(courier::detail::message_slot<wide>) == alignof(wide));
// System message types stay clear of user indices and of each other.
static_assert(courier::detail::response_type >= courier::detail::first_system_type);
static_assert(courier::detail::error_response_type >= courier::detail::first_system_type);
static_assert(courier::detail::exit_type >= courier::detail::first_system_type);
static_assert(courier::detail::response_type != courier::detail::error_response_type &&
              courier::detail::error_response_type != courier::detail::exit_type);

TEST_CASE("make_message builds header and message in place, from the arguments given", "[message]") {
  auto* slot = courier::detail::make_message<small>(3, nullptr, small{42});
  CHECK(slot->type == 3);
  CHECK(slot->reply_to == nullptr);
  CHECK(slot->next == nullptr);
  CHECK(slot->value.value == 42);
  // The message lives in the same slot, after the header's fields (possibly in its tail padding:
  // the header values checked above were written first and survived the message's construction).
  const auto offset = reinterpret_cast<char*>(&slot->value) - reinterpret_cast<char*>(slot);
  CHECK(offset > 0);
  CHECK(offset + sizeof(small) <= sizeof(courier::detail::message_slot<small>));
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
