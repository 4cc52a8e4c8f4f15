#include "courier/wire/print.hpp"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ostream>
#include <sstream>

namespace courier::wire {
namespace {

constexpr char hex_digits[] = "0123456789abcdef";

// Quoted, with every byte outside printable ASCII escaped, so the text is exact and 7-bit clean.
void print_quoted(std::ostream& os, std::string_view s) {
  os << '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      os << '\\' << c;
    } else if (u >= 0x20 && u <= 0x7e) {
      os << c;
    } else {
      os << "\\x" << hex_digits[u >> 4] << hex_digits[u & 0xf];
    }
  }
  os << '"';
}

template <class F>
void print_float(std::ostream& os, F v) {
  using bits_t = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
  constexpr bits_t quiet_nan = sizeof(F) == 4 ? bits_t(0x7fc00000u) : bits_t(0x7ff8000000000000ull);
  if (std::isnan(v)) {
    // NaNs differ in sign and payload; only the canonical quiet NaN prints as plain "nan".
    const auto bits = std::bit_cast<bits_t>(v);
    if (bits == quiet_nan) {
      os << "nan";
    } else {
      os << "nan:0x" << std::hex << static_cast<std::uint64_t>(bits) << std::dec;
    }
    return;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  os.write(buf, end - buf);
}

void print_items(std::ostream& os, reader r) {
  int depth = 0;
  auto indent = [&] {
    for (int i = 0; i < depth + 1; ++i) os << "  ";
  };
  while (r.peek() != item_type::none) {
    const item_type t = r.peek();
    if (t == item_type::list_end) {
      if (!r.end_list()) break;
      --depth;
      indent();
      os << "end\n";
      continue;
    }
    indent();
    os << to_string(t);
    switch (t) {
      case item_type::boolean: os << ' ' << (*r.read<bool>() ? "true" : "false"); break;
      case item_type::int8: os << ' ' << int{*r.read<std::int8_t>()}; break;
      case item_type::int16: os << ' ' << *r.read<std::int16_t>(); break;
      case item_type::int32: os << ' ' << *r.read<std::int32_t>(); break;
      case item_type::int64: os << ' ' << *r.read<std::int64_t>(); break;
      case item_type::uint8: os << ' ' << unsigned{*r.read<std::uint8_t>()}; break;
      case item_type::uint16: os << ' ' << *r.read<std::uint16_t>(); break;
      case item_type::uint32: os << ' ' << *r.read<std::uint32_t>(); break;
      case item_type::uint64: os << ' ' << *r.read<std::uint64_t>(); break;
      case item_type::float32:
        os << ' ';
        print_float(os, *r.read<float>());
        break;
      case item_type::float64:
        os << ' ';
        print_float(os, *r.read<double>());
        break;
      case item_type::string:
        os << ' ';
        print_quoted(os, *r.read<std::string_view>());
        break;
      case item_type::binary: {
        os << " 0x";
        for (std::byte b : *r.read<std::span<const std::byte>>()) {
          const auto u = static_cast<unsigned>(b);
          os << hex_digits[u >> 4] << hex_digits[u & 0xf];
        }
        break;
      }
      case item_type::list:
        (void)r.begin_list();
        ++depth;
        break;
      default:
        // Only reachable for a body that skipped validation; stop rather than guess.
        os << " ?\n";
        return;
    }
    os << '\n';
  }
}

}  // namespace

void print(std::ostream& os, const frame_view& frame) {
  const frame_header& h = frame.header();
  os << to_string(h.kind) << " token=";
  print_quoted(os, h.token.view());
  os << " txn=" << h.transaction_id << " ctx=" << h.context_id << '\n';
  print_items(os, frame.items());
}

std::string to_text(const frame_view& frame) {
  std::ostringstream os;
  print(os, frame);
  return std::move(os).str();
}

std::string to_text(std::span<const std::byte> bytes, const limits& lim) {
  std::ostringstream os;
  while (!bytes.empty()) {
    auto f = decode_frame(bytes, lim);
    if (!f) {
      os << "error " << to_string(f.err().code) << '\n';
      break;
    }
    print(os, *f);
    bytes = bytes.subspan(f->bytes().size());
  }
  return std::move(os).str();
}

}  // namespace courier::wire
