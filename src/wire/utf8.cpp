#include <cstdint>
#include <cstring>

#include "courier/wire/items.hpp"

namespace courier::wire::detail {

bool is_valid_utf8(const char* s, std::size_t n) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  const auto* end = p + n;
  while (p != end) {
    // Most strings are ASCII: test eight bytes at a time before falling back to the state machine.
    if (end - p >= 8) {
      std::uint64_t w;
      std::memcpy(&w, p, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        p += 8;
        continue;
      }
    }
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    // Table 3-7 of the Unicode standard: the second byte's range depends on the first byte.
    std::size_t len;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;  // excludes the surrogates U+D800..U+DFFF
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
    } else {
      return false;  // continuation byte first, overlong lead (c0, c1) or f5..ff
    }
    if (static_cast<std::size_t>(end - p) < len) return false;
    if (p[1] < lo || p[1] > hi) return false;
    for (std::size_t i = 2; i < len; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
    }
    p += len;
  }
  return true;
}

}  // namespace courier::wire::detail
