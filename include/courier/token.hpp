#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace courier {

/// The 4-character name of a service (libmsgque's "token"): `ADD_`, `GET_`, `PING`.
///
/// Built at compile time from a 5-character string literal, so a message type can name its token in a
/// `static constexpr` member; a literal of any other length does not compile. Text known only at run
/// time (a command line, a `const char*`) goes through `token::parse` (nothing when it is not four
/// characters) or the explicit `token(std::string_view)` (throws). On the wire it is the four bytes in
/// order, which is also its little-endian `uint32_t` value (see docs/protocol.md).
///
/// Thread-safety: a value type; distinct objects are independent, a shared object may be read concurrently.
class token {
 public:
  constexpr token() noexcept = default;

  // consteval: a token that is not exactly four characters is a compile error, never a run-time surprise.
  template <std::size_t N>
  consteval token(const char (&text)[N]) noexcept  // NOLINT(google-explicit-constructor)
      : chars_{text[0], text[1], text[2], text[3]} {
    static_assert(N == 5, "a token literal is exactly four characters, as in courier::token(\"ADD_\")");
  }

  /// A token from text known at run time; std::invalid_argument unless it is four characters.
  explicit token(std::string_view text) {
    if (text.size() != 4) throw std::invalid_argument("a token is four characters, not '" + std::string(text) + "'");
    chars_ = {text[0], text[1], text[2], text[3]};
  }

  /// The token of `text` when it is four characters; nothing otherwise.
  static constexpr std::optional<token> parse(std::string_view text) noexcept {
    if (text.size() != 4) return std::nullopt;
    return from_chars(text[0], text[1], text[2], text[3]);
  }

  /// Rebuilds a token from its four wire bytes; used by the decoder, which has already checked them.
  static constexpr token from_chars(char a, char b, char c, char d) noexcept {
    token t;
    t.chars_ = {a, b, c, d};
    return t;
  }

  /// The value whose little-endian bytes are the four characters in order.
  static constexpr token from_u32(std::uint32_t v) noexcept {
    return from_chars(static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff),
                      static_cast<char>((v >> 16) & 0xff), static_cast<char>((v >> 24) & 0xff));
  }

  [[nodiscard]] constexpr std::uint32_t to_u32() const noexcept {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(chars_[0])) |
           static_cast<std::uint32_t>(static_cast<unsigned char>(chars_[1])) << 8 |
           static_cast<std::uint32_t>(static_cast<unsigned char>(chars_[2])) << 16 |
           static_cast<std::uint32_t>(static_cast<unsigned char>(chars_[3])) << 24;
  }

  [[nodiscard]] constexpr std::string_view view() const noexcept { return {chars_.data(), chars_.size()}; }
  [[nodiscard]] constexpr const std::array<char, 4>& chars() const noexcept { return chars_; }

  /// True when all four bytes are printable ASCII (0x20..0x7E), as the protocol requires of service tokens.
  [[nodiscard]] constexpr bool is_printable() const noexcept {
    for (char c : chars_) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return false;
    }
    return true;
  }

  /// True for the all-zero token that control frames (handshake, ping, close...) carry.
  [[nodiscard]] constexpr bool is_null() const noexcept { return to_u32() == 0; }

  // One 32-bit compare: the defaulted comparison of the char array called memcmp, once per service
  // looked up on every frame a server dispatches.
  friend constexpr bool operator==(const token& a, const token& b) noexcept { return a.to_u32() == b.to_u32(); }
  friend constexpr auto operator<=>(const token& a, const token& b) noexcept { return a.view() <=> b.view(); }

  friend std::ostream& operator<<(std::ostream& os, const token& t) {
    if (t.is_printable()) return os << t.view();
    // Unprintable bytes would corrupt a log line; show them as escapes instead.
    static constexpr char hex[] = "0123456789abcdef";
    for (char c : t.chars_) {
      auto u = static_cast<unsigned char>(c);
      if (u >= 0x20 && u <= 0x7e) {
        os << c;
      } else {
        os << "\\x" << hex[u >> 4] << hex[u & 0xf];
      }
    }
    return os;
  }

 private:
  std::array<char, 4> chars_{};
};

}  // namespace courier
