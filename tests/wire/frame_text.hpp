#pragma once

// Reads the text form that wire::print() writes (tests/vectors/README.md) back into frames, so a golden
// vector's meaning can be encoded and compared with its bytes. Test code: failures throw.
#include <bit>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "courier/wire.hpp"

namespace courier::wire::test {

inline std::string unquote(std::string_view s) {
  if (s.size() < 2 || s.front() != '"' || s.back() != '"') throw std::runtime_error("not quoted: " + std::string(s));
  std::string out;
  for (std::size_t i = 1; i + 1 < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
    } else if (s[i + 1] == 'x') {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 2, 2)), nullptr, 16));
      i += 3;
    } else {
      out += s[++i];
    }
  }
  return out;
}

template <class T>
T parse_number(std::string_view s) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) throw std::runtime_error("bad number: " + std::string(s));
  return v;
}

template <class F>
F parse_float(std::string_view s) {
  using bits_t = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
  if (s == "nan") return std::bit_cast<F>(sizeof(F) == 4 ? bits_t(0x7fc00000u) : bits_t(0x7ff8000000000000ull));
  if (s.starts_with("nan:0x"))
    return std::bit_cast<F>(static_cast<bits_t>(std::stoull(std::string(s.substr(6)), nullptr, 16)));
  if (s == "inf") return std::numeric_limits<F>::infinity();
  if (s == "-inf") return -std::numeric_limits<F>::infinity();
  return parse_number<F>(s);
}

/// Appends every frame described by `text` to `out`.
inline void encode_text(out_buffer& out, const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::optional<frame_writer> w;
  auto finish = [&] {
    if (w && !w->finish()) throw std::runtime_error("frame did not encode");
    w.reset();
  };
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] != ' ') {
      finish();
      std::istringstream h(line);
      std::string kind_name, tok, txn, ctx;
      h >> kind_name >> tok >> txn >> ctx;
      frame_header hdr;
      hdr.kind = kind{0};
      for (std::uint8_t k = 1; k <= max_kind; ++k)
        if (kind_name == to_string(static_cast<kind>(k))) hdr.kind = static_cast<kind>(k);
      const std::string t = unquote(std::string_view(tok).substr(6));
      if (t.size() != 4) throw std::runtime_error("token: " + tok);
      hdr.token = token::from_chars(t[0], t[1], t[2], t[3]);
      hdr.transaction_id = parse_number<std::uint64_t>(std::string_view(txn).substr(4));
      hdr.context_id = parse_number<std::uint64_t>(std::string_view(ctx).substr(4));
      w.emplace(out, hdr);
      continue;
    }
    const auto first = line.find_first_not_of(' ');
    const auto space = line.find(' ', first);
    const std::string type = line.substr(first, space - first);
    const std::string_view value =
        space == std::string::npos ? std::string_view{} : std::string_view(line).substr(space + 1);
    if (!w) throw std::runtime_error("item before a header");
    if (type == "bool")
      w->add(value == "true");
    else if (type == "int8")
      w->add(static_cast<std::int8_t>(parse_number<int>(value)));
    else if (type == "int16")
      w->add(parse_number<std::int16_t>(value));
    else if (type == "int32")
      w->add(parse_number<std::int32_t>(value));
    else if (type == "int64")
      w->add(parse_number<std::int64_t>(value));
    else if (type == "uint8")
      w->add(static_cast<std::uint8_t>(parse_number<unsigned>(value)));
    else if (type == "uint16")
      w->add(parse_number<std::uint16_t>(value));
    else if (type == "uint32")
      w->add(parse_number<std::uint32_t>(value));
    else if (type == "uint64")
      w->add(parse_number<std::uint64_t>(value));
    else if (type == "float32")
      w->add(parse_float<float>(value));
    else if (type == "float64")
      w->add(parse_float<double>(value));
    else if (type == "string")
      w->add(std::string_view(unquote(value)));
    else if (type == "binary") {
      std::vector<std::byte> b;
      for (std::size_t i = 2; i + 1 < value.size(); i += 2)
        b.push_back(static_cast<std::byte>(std::stoi(std::string(value.substr(i, 2)), nullptr, 16)));
      w->add_binary(b);
    } else if (type == "list")
      w->begin_list();
    else if (type == "end")
      w->end_list();
    else
      throw std::runtime_error("unknown item: " + line);
  }
  finish();
}

/// The bytes of a .hex file: hex digit pairs, whitespace ignored, '#' to the end of the line a comment.
inline std::vector<std::byte> parse_hex(const std::string& text) {
  std::vector<std::byte> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::string digits;
    for (char c : line)
      if (!std::isspace(static_cast<unsigned char>(c))) digits += c;
    if (digits.size() % 2) throw std::runtime_error("odd number of hex digits: " + line);
    for (std::size_t i = 0; i < digits.size(); i += 2)
      out.push_back(static_cast<std::byte>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  }
  return out;
}

}  // namespace courier::wire::test
