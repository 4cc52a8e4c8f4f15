#pragma once
/// @file
/// Decoding: reader (a typed cursor over a frame's items), frame_view (a validated frame, viewed in
/// place), parse_header/validate_frame/decode_frame, and the incremental decoder. Part of the wire
/// codec (courier/wire.hpp).
///
/// Thread-safety: the free functions are safe anywhere; reader, frame_view and decoder objects are
/// independent of each other, but one object is not safe to use from two threads at once.

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "courier/wire/buffer.hpp"
#include "courier/wire/error.hpp"
#include "courier/wire/format.hpp"
#include "courier/wire/items.hpp"

namespace courier::wire {

/// A typed cursor over the items of a frame body: read<int32_t>(), read<std::string_view>(),
/// begin_list()/end_list(), has_more(), skip().
///
/// A read that finds another type than it asks for fails with type_mismatch and names both types; a read
/// at the end of the body or of the current list fails with no_more_items. Neither moves the cursor, so a
/// caller may peek() and try another type. Every read is bounds-checked, whatever the bytes; the UTF-8 of
/// strings is guaranteed only for bodies that passed validate_body() (every frame_view has).
///
/// Views it returns (string_view, span) point into the frame: they live as long as the frame's bytes.
///
/// Thread-safety: distinct objects are independent; a shared object is not safe to use concurrently.
class reader {
 public:
  reader() noexcept = default;
  explicit reader(std::span<const std::byte> body) noexcept
      : begin_(body.data()), pos_(body.data()), end_(body.data() + body.size()) {}

  /// True if an item follows at the current level (not the end of the body, not the end of the list).
  [[nodiscard]] bool has_more() const noexcept {
    return pos_ != end_ && *pos_ != static_cast<std::byte>(item_type::list_end);
  }

  /// The type of the next item, item_type::none at the end of the body, list_end at the end of a list.
  [[nodiscard]] item_type peek() const noexcept {
    return pos_ == end_ ? item_type::none : static_cast<item_type>(*pos_);
  }

  /// Reads one scalar item into `out` when it is the next item and of T's type; false (and nothing
  /// read) otherwise, where read<T> tells why. The hot path of read<T> without a result to build:
  /// a result copied on its way out cost a store-forwarding stall per item.
  template <detail::scalar T>
  [[nodiscard]] bool try_read(T& out) noexcept {
    constexpr item_type tag = detail::tag_of<T>();
    constexpr std::size_t n = 1 + (std::is_same_v<T, bool> ? 1 : sizeof(T));
    if (static_cast<std::size_t>(end_ - pos_) < n || *pos_ != static_cast<std::byte>(tag)) [[unlikely]]
      return false;
    if constexpr (std::is_same_v<T, bool>) {
      const auto b = static_cast<std::uint8_t>(pos_[1]);
      if (b > 1) [[unlikely]]
        return false;
      out = b != 0;
    } else {
      out = detail::load_le<T>(pos_ + 1);
    }
    pos_ += n;
    return true;
  }

  /// Reads one item of type T: a scalar (bool, int8_t..uint64_t, float, double), std::string_view or
  /// std::string (string), std::span<const std::byte> or std::vector<std::byte> (binary).
  template <class T>
  [[nodiscard]] result<T> read() noexcept(detail::scalar<T> || std::is_same_v<T, std::string_view> ||
                                          std::is_same_v<T, std::span<const std::byte>>) {
    if constexpr (detail::scalar<T>) {
      constexpr item_type tag = detail::tag_of<T>();
      constexpr std::size_t n = 1 + (std::is_same_v<T, bool> ? 1 : sizeof(T));
      if (static_cast<std::size_t>(end_ - pos_) < n || *pos_ != static_cast<std::byte>(tag)) [[unlikely]]
        return mismatch(tag);
      T v;
      if constexpr (std::is_same_v<T, bool>) {
        auto b = static_cast<std::uint8_t>(pos_[1]);
        if (b > 1) [[unlikely]]
          return error{errc::invalid_bool, tag, tag, offset()};
        v = b != 0;
      } else {
        v = detail::load_le<T>(pos_ + 1);
      }
      pos_ += n;
      return v;
    } else if constexpr (std::is_same_v<T, std::string_view> || std::is_same_v<T, std::string>) {
      auto r = read_sized(item_type::string);
      if (!r) return r.err();
      return T(reinterpret_cast<const char*>(r->data()), r->size());
    } else if constexpr (std::is_same_v<T, std::span<const std::byte>>) {
      return read_sized(item_type::binary);
    } else if constexpr (std::is_same_v<T, std::vector<std::byte>>) {
      auto r = read_sized(item_type::binary);
      if (!r) return r.err();
      return std::vector<std::byte>(r->begin(), r->end());
    } else {
      static_assert(sizeof(T) == 0, "courier::wire::reader::read<T>: T has no item type");
    }
  }

  /// Enters a list: the next item must be a list.
  [[nodiscard]] result<void> begin_list() noexcept {
    if (pos_ == end_ || *pos_ != static_cast<std::byte>(item_type::list)) [[unlikely]]
      return mismatch(item_type::list);
    ++pos_;
    ++depth_;
    return {};
  }

  /// Leaves the current list: the next item must be its end (so a list with unread items is a
  /// type_mismatch whose `actual` names the first unread one).
  [[nodiscard]] result<void> end_list() noexcept {
    if (depth_ == 0 || pos_ == end_ || *pos_ != static_cast<std::byte>(item_type::list_end)) [[unlikely]]
      return error{pos_ == end_ ? errc::no_more_items : errc::type_mismatch, item_type::list_end, peek(), offset()};
    ++pos_;
    --depth_;
    return {};
  }

  /// Steps over the next item, a whole list at once.
  [[nodiscard]] result<void> skip() noexcept;

  /// Byte offset of the cursor in the body.
  [[nodiscard]] std::uint32_t offset() const noexcept { return static_cast<std::uint32_t>(pos_ - begin_); }
  /// Lists entered and not yet left.
  [[nodiscard]] std::uint32_t depth() const noexcept { return depth_; }
  /// The bytes not yet read.
  [[nodiscard]] std::span<const std::byte> rest() const noexcept {
    return {pos_, static_cast<std::size_t>(end_ - pos_)};
  }

 private:
  [[nodiscard]] error mismatch(item_type expected) const noexcept;
  [[nodiscard]] result<std::span<const std::byte>> read_sized(item_type tag) noexcept;

  const std::byte* begin_ = nullptr;
  const std::byte* pos_ = nullptr;
  const std::byte* end_ = nullptr;
  std::uint32_t depth_ = 0;
};

/// A complete, validated frame: its header, decoded, and a view of its bytes (not a copy).
///
/// Thread-safety: a value type; the bytes it views must outlive it and stay unchanged.
class frame_view {
 public:
  frame_view() noexcept = default;
  frame_view(const frame_header& header, const std::byte* frame) noexcept : header_(header), data_(frame) {}

  [[nodiscard]] const frame_header& header() const noexcept { return header_; }
  [[nodiscard]] wire::kind kind() const noexcept { return header_.kind; }
  [[nodiscard]] courier::token token() const noexcept { return header_.token; }
  [[nodiscard]] std::uint64_t transaction_id() const noexcept { return header_.transaction_id; }
  [[nodiscard]] std::uint64_t context_id() const noexcept { return header_.context_id; }

  /// Header and body, exactly as received.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, header_size + header_.body_length}; }
  [[nodiscard]] std::span<const std::byte> body() const noexcept { return {data_ + header_size, header_.body_length}; }
  [[nodiscard]] reader items() const noexcept { return reader(body()); }

 private:
  frame_header header_{};
  const std::byte* data_ = nullptr;
};

/// Whether the `n` bytes at `p` (any n; at most the first four are looked at) may begin a frame: they
/// match the magic as far as they go. Lets a receiver report bad_magic before 32 bytes have arrived.
[[nodiscard]] inline bool magic_prefix_ok(const std::byte* p, std::size_t n) noexcept {
  return std::memcmp(p, magic, n < sizeof magic ? n : sizeof magic) == 0;
}

/// Checks and decodes the fixed header at the start of `bytes` (which must hold header_size bytes).
/// Fails only for the errors after which the byte stream cannot be trusted (bad_magic,
/// unsupported_version, bad_header_length, frame_too_large): see is_fatal().
[[nodiscard]] result<frame_header> parse_header(std::span<const std::byte, header_size> bytes,
                                                const limits& lim = limits{}) noexcept;

/// The checks that need the whole frame: kind, flags, token, then every item of the body (tags,
/// lengths, bools, UTF-8, nesting, item count, balanced lists).
[[nodiscard]] result<void> validate_frame(const frame_header& header, std::span<const std::byte> body,
                                          const limits& lim = limits{}) noexcept;

/// Only the body checks of validate_frame().
[[nodiscard]] result<void> validate_body(std::span<const std::byte> body, const limits& lim = limits{}) noexcept;

/// True for the errors after which a receiver cannot find the next frame and must close the connection;
/// false for those that spoil one frame only (the decoder skips it and goes on).
[[nodiscard]] constexpr bool is_fatal(errc e) noexcept {
  return e == errc::bad_magic || e == errc::unsupported_version || e == errc::bad_header_length ||
         e == errc::frame_too_large || e == errc::truncated;
}

/// Decodes the single frame at the start of `bytes` (more bytes may follow; frame.bytes().size() says how
/// many it took). Fails with truncated if `bytes` ends inside the frame.
[[nodiscard]] result<frame_view> decode_frame(std::span<const std::byte> bytes, const limits& lim = limits{}) noexcept;

/// The incremental decoder: fed byte chunks of any size, it yields complete, validated frames.
///
/// A frame that lies wholly inside the chunk given to feed() is returned as a view into that chunk (no
/// copy). Only a frame split across chunks is copied, into a buffer of the decoder's own that grows to at
/// most limits::max_frame_size, and only after the header has been checked against that limit.
///
/// Usage: feed(chunk); then call next() until it fails with errc::need_more (not a failure: feed the next
/// chunk) or another error. A frame_view is valid until the next call to next() or feed(), and no longer
/// than the chunk it came from.
///
/// After a fatal error (is_fatal()) every later next() repeats it: the connection is beyond saving. After
/// a frame error the bad frame has been consumed, last_header() describes it (so the caller can answer
/// its transaction with ERROR), and next() goes on with the following frame.
///
/// Thread-safety: distinct objects are independent; a shared object is not safe to use concurrently.
class decoder {
 public:
  explicit decoder(const limits& lim = limits{}, buffer_hooks hooks = {}) noexcept : limits_(lim), staging_(hooks) {}

  // next() may grow the decoder's buffer for a split frame (bounded by max_frame_size), which throws
  // std::bad_alloc if memory is exhausted; that is the only exception it lets through.

  /// Hands the decoder the next chunk. Precondition: the previous chunk is used up (next() said need_more).
  void feed(std::span<const std::byte> chunk) noexcept {
    assert(pos_ == end_ && "decoder::feed before next() used up the previous chunk");
    pos_ = chunk.data();
    end_ = chunk.data() + chunk.size();
  }

  [[nodiscard]] result<frame_view> next() {
    if (failed_ != errc{}) [[unlikely]]
      return error{failed_};
    if (staged_ != 0 || staging_.size() != 0) [[unlikely]]
      return next_staged();
    const auto avail = static_cast<std::size_t>(end_ - pos_);
    if (avail >= header_size) [[likely]] {
      auto h = parse_header(std::span<const std::byte, header_size>(pos_, header_size), limits_);
      if (!h) [[unlikely]]
        return fail(h.err());
      const std::size_t size = header_size + h->body_length;
      if (avail >= size) [[likely]] {
        const std::byte* frame = pos_;
        pos_ += size;
        return checked(*h, frame);
      }
    }
    return stash();
  }

  /// At the end of the stream: fails with truncated if a partial frame is left over.
  [[nodiscard]] result<void> finish() const noexcept {
    if (failed_ != errc{}) return error{failed_};
    if (staging_.size() != staged_ || pos_ != end_) return errc::truncated;
    return {};
  }

  /// The header of the last frame rejected by a frame error.
  [[nodiscard]] const frame_header& last_header() const noexcept { return last_header_; }
  /// Bytes of an incomplete frame held in the decoder's own buffer.
  [[nodiscard]] std::size_t buffered() const noexcept { return staging_.size() - staged_; }
  [[nodiscard]] const limits& frame_limits() const noexcept { return limits_; }
  /// Changes the largest frame accepted from the next header on (the engine raises it once the
  /// handshake is done). The frame being assembled keeps the limit its header was checked against;
  /// the buffer keeps its capacity, so this allocates nothing.
  void set_max_frame_size(std::uint32_t n) noexcept { limits_.max_frame_size = n; }

 private:
  [[nodiscard]] result<frame_view> checked(const frame_header& h, const std::byte* frame) noexcept {
    auto ok = validate_frame(h, {frame + header_size, h.body_length}, limits_);
    if (!ok) [[unlikely]] {
      last_header_ = h;
      return ok.err();
    }
    return frame_view(h, frame);
  }
  [[nodiscard]] error fail(error e) noexcept {
    failed_ = e.code;
    return e;
  }
  [[nodiscard]] result<frame_view> stash();
  [[nodiscard]] result<frame_view> next_staged();

  limits limits_;
  const std::byte* pos_ = nullptr;
  const std::byte* end_ = nullptr;
  out_buffer staging_;
  std::size_t staged_ = 0;  // size of a frame already delivered from staging_, dropped on the next call
  frame_header last_header_{};
  errc failed_{};
};

}  // namespace courier::wire
