#pragma once
/// @file
/// Encoding: frame_writer, which appends one frame to an out_buffer item by item, and encode_error()
/// for ERROR frames. Part of the wire codec (courier/wire.hpp).
///
/// Thread-safety: a frame_writer is used by one thread; distinct writers on distinct buffers are
/// independent.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>

#include "courier/wire/buffer.hpp"
#include "courier/wire/error.hpp"
#include "courier/wire/format.hpp"
#include "courier/wire/items.hpp"

namespace courier::wire {

namespace detail {

/// The bytes a fixed-size item of type T takes: its tag, then its value.
template <scalar T>
inline constexpr std::size_t scalar_item_size = 1 + sizeof(T);

/// Writes a fixed-size item at `p` (scalar_item_size<T> bytes: the tag follows from the C++ type,
/// the value little-endian, a bool as 0 or 1); returns the byte after it.
template <scalar T>
std::byte* put_scalar(std::byte* p, T value) noexcept {
  p[0] = static_cast<std::byte>(tag_of<T>());
  if constexpr (std::is_same_v<T, bool>) {
    p[1] = std::byte{value ? std::uint8_t{1} : std::uint8_t{0}};
  } else {
    store_le<T>(p + 1, value);
  }
  return p + scalar_item_size<T>;
}

}  // namespace detail

/// Appends one frame to an out_buffer: the constructor writes the header, add()/begin_list()/end_list()
/// append items, finish() fills in the body length and checks the limits.
///
/// Errors (invalid UTF-8, too many items, unbalanced lists, a frame over the size limit) are sticky and
/// reported once, by finish(), which then removes the partial frame from the buffer; so a chain of add()
/// calls needs no checks in between. A frame_writer that is dropped without finish() leaves an invalid
/// frame behind: always call finish().
///
/// Thread-safety: distinct objects are independent; a shared object is not safe to use concurrently.
class frame_writer {
 public:
  frame_writer(out_buffer& out, const frame_header& header, const limits& lim = limits{})
      : out_(&out),
        start_(out.size()),
        max_frame_size_(lim.max_frame_size),
        max_depth_(lim.max_depth),
        max_items_(lim.max_items) {
    std::byte* p = out.extend(header_size);
    std::memcpy(p + offset::magic, magic, 4);
    p[offset::version] = std::byte{header.version};
    p[offset::header_length] = std::byte{header_size};
    p[offset::kind] = static_cast<std::byte>(header.kind);
    p[offset::flags] = std::byte{header.flags};
    detail::store_le<std::uint32_t>(p + offset::body_length, 0);
    detail::store_le<std::uint32_t>(p + offset::token, header.token.to_u32());
    detail::store_le<std::uint64_t>(p + offset::transaction_id, header.transaction_id);
    detail::store_le<std::uint64_t>(p + offset::context_id, header.context_id);
  }

  frame_writer(const frame_writer&) = delete;
  frame_writer& operator=(const frame_writer&) = delete;

  /// One fixed-size item; the tag follows from the C++ type (int32_t -> int32, double -> float64...).
  template <detail::scalar T>
  frame_writer& add(T value) {
    detail::put_scalar(out_->extend(detail::scalar_item_size<T>), value);
    count_item();
    return *this;
  }

  /// A string item; it must be valid UTF-8 (checked here, so no invalid frame ever leaves).
  frame_writer& add(std::string_view s) {
    if (!detail::is_valid_utf8(s.data(), s.size())) [[unlikely]] {
      fail(errc::invalid_utf8);
      return *this;
    }
    return add_bytes(item_type::string, s.data(), s.size());
  }
  frame_writer& add(const char* s) { return add(std::string_view(s)); }

  /// A binary item: any bytes.
  frame_writer& add_binary(std::span<const std::byte> b) { return add_bytes(item_type::binary, b.data(), b.size()); }

  frame_writer& begin_list() {
    *out_->extend(1) = static_cast<std::byte>(item_type::list);
    if (++depth_ > max_depth_) [[unlikely]]
      fail(errc::nesting_too_deep);
    count_item();
    return *this;
  }

  frame_writer& end_list() {
    if (depth_ == 0) [[unlikely]] {
      fail(errc::unbalanced_list_end);
      return *this;
    }
    --depth_;
    *out_->extend(1) = static_cast<std::byte>(item_type::list_end);
    return *this;
  }

  /// Completes the frame; returns its size in bytes, or the first error (and then the buffer is as it was
  /// before the constructor).
  [[nodiscard]] result<std::size_t> finish() noexcept {
    if (failed_ == errc{} && depth_ != 0) failed_ = errc::unterminated_list;
    const std::size_t size = out_->size() - start_;
    if (failed_ == errc{} && size > max_frame_size_) failed_ = errc::frame_too_large;
    if (failed_ != errc{}) [[unlikely]] {
      out_->truncate(start_);
      return error{failed_};
    }
    detail::store_le<std::uint32_t>(out_->data() + start_ + offset::body_length,
                                    static_cast<std::uint32_t>(size - header_size));
    return size;
  }

  [[nodiscard]] std::uint32_t depth() const noexcept { return depth_; }

 private:
  frame_writer& add_bytes(item_type tag, const void* data, std::size_t n) {
    // Checked before writing so that a huge length never reaches the buffer's allocator.
    if (n > max_frame_size_) [[unlikely]] {
      fail(errc::frame_too_large);
      return *this;
    }
    std::byte* p = out_->extend(5 + n);
    p[0] = static_cast<std::byte>(tag);
    detail::store_le<std::uint32_t>(p + 1, static_cast<std::uint32_t>(n));
    if (n != 0) std::memcpy(p + 5, data, n);
    count_item();
    return *this;
  }

  void count_item() noexcept {
    if (++items_ > max_items_) [[unlikely]]
      fail(errc::too_many_items);
  }

  void fail(errc e) noexcept {
    if (failed_ == errc{}) failed_ = e;
  }

  out_buffer* out_;
  std::size_t start_;
  std::uint32_t max_frame_size_;
  std::uint32_t max_depth_;
  std::uint32_t max_items_;
  std::uint32_t depth_ = 0;
  std::uint32_t items_ = 0;
  errc failed_{};
};

/// Appends an ERROR frame: `code` and `text` as its two items, in answer to `transaction_id` (0 when the
/// error is about the connection rather than one call).
[[nodiscard]] result<std::size_t> encode_error(out_buffer& out, std::uint64_t transaction_id, std::uint64_t context_id,
                                               std::uint32_t code, std::string_view text, token tok = {});

}  // namespace courier::wire
