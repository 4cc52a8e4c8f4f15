#include "courier/wire/handshake.hpp"

#include <algorithm>

#include "courier/wire/encoder.hpp"

namespace courier::wire {

result<std::size_t> encode_handshake(out_buffer& out, const handshake_info& info) {
  frame_writer w(out, frame_header{1, kind::handshake, 0, 0, {}, 0, 0});
  w.add(info.min_version).add(info.max_version).add(info.capabilities).add(info.max_frame_size).add(info.peer_name);
  w.add(info.max_items).add(info.max_depth);
  if (info.nonce != 0 || info.max_child_contexts != 0) w.add(info.nonce);
  if (info.max_child_contexts != 0) w.add(info.max_child_contexts);
  return w.finish();
}

result<handshake_info> decode_handshake(const frame_view& frame) noexcept {
  if (frame.kind() != kind::handshake) return errc::bad_handshake;
  reader r = frame.items();
  handshake_info info;
  auto min_v = r.read<std::uint8_t>();
  auto max_v = r.read<std::uint8_t>();
  auto caps = r.read<std::uint64_t>();
  auto max_frame = r.read<std::uint32_t>();
  auto name = r.read<std::string_view>();
  if (!min_v || !max_v || !caps || !max_frame || !name) return errc::bad_handshake;
  info.min_version = *min_v;
  info.max_version = *max_v;
  info.capabilities = *caps;
  info.max_frame_size = *max_frame;
  info.peer_name = *name;
  // Items 6 and 7 are optional (a peer written to the first text of the spec sends five), but when present
  // they must be uint32.
  if (r.has_more()) {
    auto items = r.read<std::uint32_t>();
    if (!items) return errc::bad_handshake;
    info.max_items = *items;
    if (r.has_more()) {
      auto depth = r.read<std::uint32_t>();
      if (!depth) return errc::bad_handshake;
      info.max_depth = *depth;
      // Item 8 came after the first text of the spec, which told receivers to ignore items after the
      // seventh: one of another type is still ignored.
      if (r.peek() == item_type::uint64) {
        if (auto nonce = r.read<std::uint64_t>()) info.nonce = *nonce;
        // Item 9 came later still, on the same terms.
        if (r.peek() == item_type::uint32)
          if (auto children = r.read<std::uint32_t>()) info.max_child_contexts = *children;
      }
    }
  }
  if (info.min_version == 0 || info.min_version > info.max_version) return errc::bad_handshake;
  return info;
}

result<agreement> negotiate(const handshake_info& local, const handshake_info& remote) noexcept {
  if (remote.max_frame_size < min_max_frame_size || remote.max_items < min_max_items ||
      remote.max_depth < min_max_depth)
    return errc::bad_handshake;
  const std::uint8_t version = std::min(local.max_version, remote.max_version);
  if (version < std::max(local.min_version, remote.min_version)) return errc::unsupported_version;
  return agreement{version,
                   local.capabilities & remote.capabilities,
                   remote.max_frame_size,
                   remote.max_items,
                   remote.max_depth,
                   remote.max_child_contexts};
}

}  // namespace courier::wire
