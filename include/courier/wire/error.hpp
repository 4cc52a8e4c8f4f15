#pragma once
/// @file
/// The wire codec's error model: errc (the protocol error numbers, category "courier.wire"), item_type
/// (the item tags, which error reports name), error (a code with where and what the codec found) and
/// wire::result<T>, an alias of courier::result<T, wire::error> (courier/result.hpp).
///
/// Thread-safety: value types; wire_category() is an immutable singleton, safe anywhere.

#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "courier/result.hpp"

namespace courier::wire {

/// The wire codec's error codes, in the `std::error_category` named "courier.wire".
///
/// The numeric values are part of the protocol: an ERROR frame that reports a protocol violation carries
/// one of them as its code (docs/protocol.md, "Error codes"). Never renumber; only append.
enum class errc : std::uint8_t {
  // Not a failure: the decoder has consumed all input and waits for more bytes.
  need_more = 1,
  truncated = 2,             // the input ended inside a frame
  bad_magic = 3,             // the first four bytes are not "COUR"
  unsupported_version = 4,   // a version this peer does not speak, or no common version in the handshake
  bad_header_length = 5,     // header length field is not 32
  bad_flags = 6,             // a flag bit that is reserved in this version is set
  unknown_kind = 7,          // the frame kind byte names no kind
  bad_token = 8,             // a send/call frame whose token is not four printable ASCII characters
  frame_too_large = 9,       // header + body exceed the receiver's maximum frame size
  unknown_type_tag = 10,     // an item tag that names no type
  length_past_end = 11,      // an item (or a string/binary length) extends past the end of the body
  invalid_bool = 12,         // a bool item whose byte is neither 0 nor 1
  invalid_utf8 = 13,         // a string item that is not well-formed UTF-8
  nesting_too_deep = 14,     // lists nested deeper than the limit
  too_many_items = 15,       // more items in one frame than the limit
  unterminated_list = 16,    // the body ends while a list is open
  unbalanced_list_end = 17,  // a list end with no open list
  type_mismatch = 18,        // the reader asked for one type and found another
  no_more_items = 19,        // the reader asked for an item past the last one (of the body or the list)
  trailing_items = 20,       // a typed message was decoded and items were left over
  token_mismatch = 21,       // a typed message was decoded from a frame with another token
  bad_handshake = 22,        // a handshake frame whose body does not follow the protocol, or none in time
  unexpected_frame = 23,     // a frame the connection's state does not allow (a second handshake): fatal
  bad_transaction_id = 24,   // a call, context_open or context_close with transaction id 0
  bad_context_id = 25,  // a context_open for context 0, of the receiver's parity or still open; a context_close for 0
};

/// The category of `errc`; its name() is "courier.wire". Thread-safety: immutable singleton, safe anywhere.
[[nodiscard]] const std::error_category& wire_category() noexcept;

[[nodiscard]] inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), wire_category()}; }

/// The enumerator's name ("bad_magic"), as used in the test vectors and by the frame printer.
[[nodiscard]] const char* to_string(errc e) noexcept;

/// Item type tags; the numeric values are the tag bytes on the wire (docs/protocol.md, "Items").
enum class item_type : std::uint8_t {
  none = 0x00,  // never on the wire: "no item here" in a type_mismatch/no_more_items report
  boolean = 0x01,
  int8 = 0x02,
  int16 = 0x03,
  int32 = 0x04,
  int64 = 0x05,
  uint8 = 0x06,
  uint16 = 0x07,
  uint32 = 0x08,
  uint64 = 0x09,
  float32 = 0x0a,
  float64 = 0x0b,
  string = 0x0c,
  binary = 0x0d,
  list = 0x0e,
  list_end = 0x0f,
};

/// "int32", "list_end"...; an unknown tag gives "unknown".
[[nodiscard]] const char* to_string(item_type t) noexcept;

/// A codec failure: the code plus what the codec knew when it failed, so a type mismatch reports the
/// expected and the actual item type rather than just "mismatch".
///
/// Thread-safety: a value type.
struct error {
  errc code{};                           // errc{} (0, no enumerator) means "no error"
  item_type expected = item_type::none;  // meaningful for type_mismatch / no_more_items
  item_type actual = item_type::none;    // for type_mismatch; for unknown_type_tag the raw tag byte
  std::uint32_t offset = 0;              // byte offset in the frame body (or in the input for header errors)
  std::uint32_t left_over = 0;           // for trailing_items: how many items follow the last field (0: not counted)

  [[nodiscard]] std::error_code error_code() const noexcept { return make_error_code(code); }
  /// A sentence for a log or the text of an ERROR frame; allocates, so not for the hot path.
  [[nodiscard]] std::string message() const;

  friend bool operator==(const error&, const error&) noexcept = default;
  friend bool operator==(const error& e, errc c) noexcept { return e.code == c; }
};

/// What result<T>::value() throws for this error: a std::system_error with error_code(), whose
/// what() holds message(). result.hpp finds it by argument-dependent lookup.
[[noreturn]] void throw_result_error(const error& e);

/// A value or a wire::error: courier::result with the codec's error type. An errc converts to it
/// implicitly (`return errc::truncated;`), as does an error; `failure(e)` always makes an error.
///
/// Thread-safety: a value type.
template <class T>
using result = courier::result<T, error>;

}  // namespace courier::wire

template <>
struct std::is_error_code_enum<courier::wire::errc> : std::true_type {};
