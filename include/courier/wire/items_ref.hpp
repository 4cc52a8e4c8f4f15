#pragma once
/// @file
/// The items of a frame's body, kept alive across a mailbox hop: what a dynamic call's reply is
/// (courier/net/context.hpp), read with the codec's typed reader.
///
///     ctx.call("SUM_", courier::net::args(1, 2)).then([](const courier::wire::items_ref& reply) {
///       auto r = reply.items();
///       auto sum = r.read<std::int32_t>();   // a wrong item type says which, and where
///     }, on_error);
///
/// Decoded from a received frame it views the receive block the frame lies in and shares it, as
/// string_ref does (shared_buffer.hpp): kept for long, it keeps that block from being read into
/// again, so copy what must outlive the handler.
///
/// Thread-safety: as string_ref (the block's count is atomic; the bytes are read-only here).

#include <cstddef>
#include <span>

#include "courier/wire/decoder.hpp"
#include "courier/wire/shared_buffer.hpp"

namespace courier::wire {

class items_ref {
 public:
  items_ref() noexcept = default;

  /// A fresh reader over the items (each call starts at the first item).
  [[nodiscard]] reader items() const noexcept { return reader(body_.view()); }
  /// The body's bytes: the items as they came.
  [[nodiscard]] std::span<const std::byte> body() const noexcept { return body_.view(); }
  [[nodiscard]] bool empty() const noexcept { return body_.empty(); }

  /// Takes the body of `frame`, sharing `owner` when the bytes lie in it, else a copy of them.
  void assign_frame(const frame_view& frame, shared_block* owner) {
    const auto b = frame.body();
    body_ = owner != nullptr && !b.empty() && owner->holds(b.data()) ? bytes_ref::in(b, owner) : bytes_ref::copy_of(b);
  }

 private:
  bytes_ref body_;
};

}  // namespace courier::wire
