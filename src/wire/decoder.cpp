#include "courier/wire/decoder.hpp"

#include <algorithm>
#include <cstring>

namespace courier::wire {
namespace {

constexpr auto end_tag = static_cast<std::byte>(item_type::list_end);

}  // namespace

result<frame_header> parse_header(std::span<const std::byte, header_size> bytes, const limits& lim) noexcept {
  const std::byte* p = bytes.data();
  if (std::memcmp(p + offset::magic, magic, 4) != 0) [[unlikely]]
    return error{errc::bad_magic};
  frame_header h;
  h.version = static_cast<std::uint8_t>(p[offset::version]);
  if (h.version != protocol_version) [[unlikely]]
    return error{errc::unsupported_version, item_type::none, item_type::none, offset::version};
  if (static_cast<std::uint8_t>(p[offset::header_length]) != header_size) [[unlikely]]
    return error{errc::bad_header_length, item_type::none, item_type::none, offset::header_length};
  h.kind = static_cast<wire::kind>(p[offset::kind]);
  h.flags = static_cast<std::uint8_t>(p[offset::flags]);
  h.body_length = detail::load_le<std::uint32_t>(p + offset::body_length);
  // Compared in 64 bits: header_size + a body length near 4 GiB must not wrap to a small number.
  if (std::uint64_t{header_size} + h.body_length > lim.max_frame_size) [[unlikely]]
    return error{errc::frame_too_large, item_type::none, item_type::none, offset::body_length};
  h.token = courier::token::from_u32(detail::load_le<std::uint32_t>(p + offset::token));
  h.transaction_id = detail::load_le<std::uint64_t>(p + offset::transaction_id);
  h.context_id = detail::load_le<std::uint64_t>(p + offset::context_id);
  return h;
}

result<void> validate_frame(const frame_header& h, std::span<const std::byte> body, const limits& lim) noexcept {
  const auto k = static_cast<std::uint8_t>(h.kind);
  if (k == 0 || k > max_kind) [[unlikely]]
    return error{errc::unknown_kind, item_type::none, item_type::none, offset::kind};
  if (h.flags != 0) [[unlikely]]
    return error{errc::bad_flags, item_type::none, item_type::none, offset::flags};
  if ((h.kind == kind::send || h.kind == kind::call) && !h.token.is_printable()) [[unlikely]]
    return error{errc::bad_token, item_type::none, item_type::none, offset::token};
  return validate_body(body, lim);
}

result<void> validate_body(std::span<const std::byte> body, const limits& lim) noexcept {
  const std::byte* const begin = body.data();
  const std::byte* p = begin;
  const std::byte* const end = p + body.size();
  std::uint32_t depth = 0;
  std::uint32_t items = 0;
  auto at = [&](const std::byte* q) { return static_cast<std::uint32_t>(q - begin); };
  while (p != end) {
    const std::byte* item = p;
    const auto tag = static_cast<item_type>(*p++);
    const auto left = static_cast<std::size_t>(end - p);
    switch (tag) {
      case item_type::boolean:
        if (left < 1) return error{errc::length_past_end, tag, tag, at(item)};
        if (static_cast<std::uint8_t>(*p) > 1) return error{errc::invalid_bool, tag, tag, at(item)};
        p += 1;
        break;
      case item_type::int8:
      case item_type::int16:
      case item_type::int32:
      case item_type::int64:
      case item_type::uint8:
      case item_type::uint16:
      case item_type::uint32:
      case item_type::uint64:
      case item_type::float32:
      case item_type::float64: {
        const std::size_t n = detail::fixed_size(tag);
        if (left < n) return error{errc::length_past_end, tag, tag, at(item)};
        p += n;
        break;
      }
      case item_type::string:
      case item_type::binary: {
        if (left < 4) return error{errc::length_past_end, tag, tag, at(item)};
        const std::uint32_t n = detail::load_le<std::uint32_t>(p);
        p += 4;
        if (static_cast<std::size_t>(end - p) < n) return error{errc::length_past_end, tag, tag, at(item)};
        if (tag == item_type::string && !detail::is_valid_utf8(reinterpret_cast<const char*>(p), n))
          return error{errc::invalid_utf8, tag, tag, at(item)};
        p += n;
        break;
      }
      case item_type::list:
        if (++depth > lim.max_depth) return error{errc::nesting_too_deep, tag, tag, at(item)};
        break;
      case item_type::list_end:
        if (depth == 0) return error{errc::unbalanced_list_end, tag, tag, at(item)};
        --depth;
        continue;  // an end marker is not an item
      default: return error{errc::unknown_type_tag, item_type::none, tag, at(item)};
    }
    if (++items > lim.max_items) return error{errc::too_many_items, tag, tag, at(item)};
  }
  if (depth != 0) return error{errc::unterminated_list, item_type::list_end, item_type::none, at(end)};
  return {};
}

result<frame_view> decode_frame(std::span<const std::byte> bytes, const limits& lim) noexcept {
  if (bytes.size() < header_size) {
    if (!magic_prefix_ok(bytes.data(), bytes.size())) return error{errc::bad_magic};
    return error{errc::truncated, item_type::none, item_type::none, static_cast<std::uint32_t>(bytes.size())};
  }
  auto h = parse_header(bytes.first<header_size>(), lim);
  if (!h) return h.err();
  if (bytes.size() - header_size < h->body_length)
    return error{errc::truncated, item_type::none, item_type::none, static_cast<std::uint32_t>(bytes.size())};
  if (auto ok = validate_frame(*h, bytes.subspan(header_size, h->body_length), lim); !ok) return ok.err();
  return frame_view(*h, bytes.data());
}

error reader::mismatch(item_type expected) const noexcept {
  if (pos_ == end_ || *pos_ == end_tag) return error{errc::no_more_items, expected, peek(), offset()};
  if (*pos_ == static_cast<std::byte>(expected)) return error{errc::length_past_end, expected, expected, offset()};
  return error{errc::type_mismatch, expected, peek(), offset()};
}

result<std::span<const std::byte>> reader::read_sized(item_type tag) noexcept {
  const auto left = static_cast<std::size_t>(end_ - pos_);
  if (left < 5 || *pos_ != static_cast<std::byte>(tag)) [[unlikely]]
    return mismatch(tag);
  const std::uint32_t n = detail::load_le<std::uint32_t>(pos_ + 1);
  if (left - 5 < n) [[unlikely]]
    return error{errc::length_past_end, tag, tag, offset()};
  std::span<const std::byte> s(pos_ + 5, n);
  pos_ += 5 + n;
  return s;
}

result<void> reader::skip() noexcept {
  std::uint32_t open = 0;
  do {
    if (pos_ == end_)
      return error{open ? errc::unterminated_list : errc::no_more_items, item_type::none, item_type::none, offset()};
    const auto tag = static_cast<item_type>(*pos_);
    const auto left = static_cast<std::size_t>(end_ - pos_) - 1;
    switch (tag) {
      case item_type::list:
        ++open;
        ++pos_;
        break;
      case item_type::list_end:
        if (open == 0) return error{errc::no_more_items, item_type::none, tag, offset()};
        --open;
        ++pos_;
        break;
      case item_type::string:
      case item_type::binary: {
        auto s = read_sized(tag);
        if (!s) return s.err();
        break;
      }
      default: {
        const std::size_t n = detail::fixed_size(tag);
        if (n == 0) return error{errc::unknown_type_tag, item_type::none, tag, offset()};
        if (left < n) return error{errc::length_past_end, tag, tag, offset()};
        pos_ += 1 + n;
      }
    }
  } while (open != 0);
  return {};
}

result<frame_view> decoder::stash() {
  const auto avail = static_cast<std::size_t>(end_ - pos_);
  if (avail == 0) return errc::need_more;
  if (avail < header_size) {
    // A peer that is not speaking this protocol at all is told so at once, not after 32 bytes.
    if (!magic_prefix_ok(pos_, avail)) return fail(error{errc::bad_magic});
  } else {
    // The header was checked by next(): the frame is within max_frame_size, so this reservation is bounded.
    staging_.reserve(header_size + detail::load_le<std::uint32_t>(pos_ + offset::body_length));
  }
  std::memcpy(staging_.extend(avail), pos_, avail);
  pos_ = end_;
  return errc::need_more;
}

result<frame_view> decoder::next_staged() {
  if (staged_ != 0) {
    // The frame delivered from staging_ by the previous call is no longer the caller's.
    staging_.clear();
    staged_ = 0;
    return next();
  }
  auto take = [this](std::size_t want) {
    const std::size_t n = std::min(want, static_cast<std::size_t>(end_ - pos_));
    if (n != 0) std::memcpy(staging_.extend(n), pos_, n);
    pos_ += n;
  };
  if (staging_.size() < header_size) {
    take(header_size - staging_.size());
    if (!magic_prefix_ok(staging_.data(), staging_.size())) return fail(error{errc::bad_magic});
    if (staging_.size() < header_size) return errc::need_more;
  }
  auto h = parse_header(std::span<const std::byte, header_size>(staging_.data(), header_size), limits_);
  if (!h) return fail(h.err());
  const std::size_t size = header_size + h->body_length;
  staging_.reserve(size);
  take(size - staging_.size());
  if (staging_.size() < size) return errc::need_more;
  staged_ = size;
  auto f = checked(*h, staging_.data());
  if (!f) {
    staging_.clear();
    staged_ = 0;
  }
  return f;
}

}  // namespace courier::wire
