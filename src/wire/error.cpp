#include "courier/wire/error.hpp"

#include "courier/wire/format.hpp"

namespace courier::wire {
namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "courier.wire"; }
  std::string message(int code) const override {
    switch (static_cast<errc>(code)) {
      case errc::need_more: return "more input needed";
      case errc::truncated: return "input ends inside a frame";
      case errc::bad_magic: return "bad magic: not a Courier frame";
      case errc::unsupported_version: return "unsupported protocol version";
      case errc::bad_header_length: return "bad header length";
      case errc::bad_flags: return "reserved flag bits set";
      case errc::unknown_kind: return "unknown frame kind";
      case errc::bad_token: return "service token is not four printable ASCII characters";
      case errc::frame_too_large: return "frame exceeds the maximum frame size";
      case errc::unknown_type_tag: return "unknown item type tag";
      case errc::length_past_end: return "item extends past the end of the body";
      case errc::invalid_bool: return "bool item is neither 0 nor 1";
      case errc::invalid_utf8: return "string is not valid UTF-8";
      case errc::nesting_too_deep: return "lists nested deeper than the limit";
      case errc::too_many_items: return "more items than the limit";
      case errc::unterminated_list: return "list not terminated before the end of the body";
      case errc::unbalanced_list_end: return "list end without an open list";
      case errc::type_mismatch: return "item type mismatch";
      case errc::no_more_items: return "no more items";
      case errc::trailing_items: return "items left over after the last field";
      case errc::token_mismatch: return "frame token does not match the message";
      case errc::bad_handshake: return "malformed handshake";
      case errc::unexpected_frame: return "frame not allowed in this state of the connection";
      case errc::bad_transaction_id: return "call with transaction id 0";
      case errc::bad_context_id: return "context id not allowed here";
    }
    return "unknown courier.wire error";
  }
};

}  // namespace

const std::error_category& wire_category() noexcept {
  static const category instance;
  return instance;
}

const char* to_string(errc e) noexcept {
  switch (e) {
    case errc::need_more: return "need_more";
    case errc::truncated: return "truncated";
    case errc::bad_magic: return "bad_magic";
    case errc::unsupported_version: return "unsupported_version";
    case errc::bad_header_length: return "bad_header_length";
    case errc::bad_flags: return "bad_flags";
    case errc::unknown_kind: return "unknown_kind";
    case errc::bad_token: return "bad_token";
    case errc::frame_too_large: return "frame_too_large";
    case errc::unknown_type_tag: return "unknown_type_tag";
    case errc::length_past_end: return "length_past_end";
    case errc::invalid_bool: return "invalid_bool";
    case errc::invalid_utf8: return "invalid_utf8";
    case errc::nesting_too_deep: return "nesting_too_deep";
    case errc::too_many_items: return "too_many_items";
    case errc::unterminated_list: return "unterminated_list";
    case errc::unbalanced_list_end: return "unbalanced_list_end";
    case errc::type_mismatch: return "type_mismatch";
    case errc::no_more_items: return "no_more_items";
    case errc::trailing_items: return "trailing_items";
    case errc::token_mismatch: return "token_mismatch";
    case errc::bad_handshake: return "bad_handshake";
    case errc::unexpected_frame: return "unexpected_frame";
    case errc::bad_transaction_id: return "bad_transaction_id";
    case errc::bad_context_id: return "bad_context_id";
  }
  return "unknown";
}

const char* to_string(item_type t) noexcept {
  switch (t) {
    case item_type::none: return "none";
    case item_type::boolean: return "bool";
    case item_type::int8: return "int8";
    case item_type::int16: return "int16";
    case item_type::int32: return "int32";
    case item_type::int64: return "int64";
    case item_type::uint8: return "uint8";
    case item_type::uint16: return "uint16";
    case item_type::uint32: return "uint32";
    case item_type::uint64: return "uint64";
    case item_type::float32: return "float32";
    case item_type::float64: return "float64";
    case item_type::string: return "string";
    case item_type::binary: return "binary";
    case item_type::list: return "list";
    case item_type::list_end: return "end";
  }
  return "unknown";
}

const char* to_string(kind k) noexcept {
  switch (k) {
    case kind::handshake: return "handshake";
    case kind::send: return "send";
    case kind::call: return "call";
    case kind::reply: return "reply";
    case kind::error: return "error";
    case kind::context_open: return "context_open";
    case kind::context_close: return "context_close";
    case kind::ping: return "ping";
    case kind::pong: return "pong";
    case kind::close: return "close";
  }
  return "unknown";
}

std::string error::message() const {
  std::string m = wire_category().message(static_cast<int>(code));
  if (code == errc::type_mismatch || code == errc::no_more_items) {
    m += ": expected ";
    m += to_string(expected);
    m += ", found ";
    m += to_string(actual);
  } else if (code == errc::trailing_items) {
    if (left_over != 0)
      m = std::to_string(left_over) + (left_over == 1 ? " item" : " items") + " left over after the last field";
    if (actual != item_type::none) {
      m += ", the first a ";
      m += to_string(actual);
    }
  } else if (code == errc::unknown_type_tag) {
    m += ": tag " + std::to_string(static_cast<unsigned>(actual));
  }
  m += " (offset " + std::to_string(offset) + ")";
  return m;
}

void throw_result_error(const error& e) {
  throw std::system_error(e.error_code(), "courier::wire::result::value() on an error: " + e.message());
}

}  // namespace courier::wire
