// libFuzzer target for the wire decoder: scripts/fuzz-wire builds and runs it with ASan and UBSan.
//
// The first input byte picks a chunk size, so one input exercises both whole-buffer decoding and frames
// split across chunks. Every frame that decodes is printed, skipped through, decoded as a typed message and
// re-encoded item by item, and must come back byte for byte.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "courier/wire.hpp"

namespace w = courier::wire;

namespace {

struct probe {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0;
  std::string s;
  std::vector<std::int64_t> v;
  auto fields() { return std::tie(a, s, v); }
  auto fields() const { return std::tie(a, s, v); }
};

// Copies every item of r into wr, checking each read against the type peek() announced (where
// wire::copy_items trusts peek(): this is the check on it).
void copy_checked(w::reader& r, w::frame_writer& wr) {
  for (;;) {
    const w::item_type t = r.peek();
    switch (t) {
      case w::item_type::none: return;
      case w::item_type::list_end:
        if (!r.end_list()) std::abort();
        wr.end_list();
        break;
      case w::item_type::list:
        if (!r.begin_list()) std::abort();
        wr.begin_list();
        break;
      case w::item_type::boolean: wr.add(r.read<bool>().value()); break;
      case w::item_type::int8: wr.add(r.read<std::int8_t>().value()); break;
      case w::item_type::int16: wr.add(r.read<std::int16_t>().value()); break;
      case w::item_type::int32: wr.add(r.read<std::int32_t>().value()); break;
      case w::item_type::int64: wr.add(r.read<std::int64_t>().value()); break;
      case w::item_type::uint8: wr.add(r.read<std::uint8_t>().value()); break;
      case w::item_type::uint16: wr.add(r.read<std::uint16_t>().value()); break;
      case w::item_type::uint32: wr.add(r.read<std::uint32_t>().value()); break;
      case w::item_type::uint64: wr.add(r.read<std::uint64_t>().value()); break;
      case w::item_type::float32: wr.add(r.read<float>().value()); break;
      case w::item_type::float64: wr.add(r.read<double>().value()); break;
      case w::item_type::string: wr.add(r.read<std::string_view>().value()); break;
      case w::item_type::binary: wr.add_binary(r.read<std::span<const std::byte>>().value()); break;
      default: std::abort();  // a validated body holds only known tags
    }
  }
}

void check_frame(const w::frame_view& f, const w::limits& lim) {
  (void)w::to_text(f);
  probe p;
  (void)w::decode(f, p);
  (void)w::decode_handshake(f);

  w::reader r = f.items();
  while (r.has_more()) {
    if (!r.skip()) std::abort();
  }
  if (r.peek() != w::item_type::none) std::abort();

  w::out_buffer out;
  w::frame_writer wr(out, f.header(), lim);
  w::reader items = f.items();
  copy_checked(items, wr);
  auto size = wr.finish();
  if (!size || out.size() != f.bytes().size() || std::memcmp(out.data(), f.bytes().data(), out.size()) != 0)
    std::abort();  // what decodes must re-encode to the same bytes
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  w::limits lim;
  lim.max_frame_size = 1 << 16;  // small, so the limit checks are reachable
  lim.max_depth = 8;
  lim.max_items = 256;
  const std::size_t chunk = data[0] == 0 ? size : data[0];
  const auto bytes = std::as_bytes(std::span(data + 1, size - 1));

  if (auto f = w::decode_frame(bytes, lim)) check_frame(*f, lim);
  (void)w::to_text(bytes, lim);

  w::decoder d(lim);
  for (std::size_t at = 0; at < bytes.size(); at += chunk) {
    d.feed(bytes.subspan(at, std::min(chunk, bytes.size() - at)));
    for (;;) {
      auto f = d.next();
      if (f) {
        check_frame(*f, lim);
        continue;
      }
      if (f.code() == w::errc::need_more) break;
      if (w::is_fatal(f.code())) return 0;
    }
  }
  (void)d.finish();
  return 0;
}
