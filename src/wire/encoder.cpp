#include "courier/wire/encoder.hpp"

namespace courier::wire {

result<std::size_t> encode_error(out_buffer& out, std::uint64_t transaction_id, std::uint64_t context_id,
                                 std::uint32_t code, std::string_view text, token tok) {
  frame_writer w(out, frame_header{protocol_version, kind::error, 0, 0, tok, transaction_id, context_id});
  w.add(code).add(text);
  return w.finish();
}

}  // namespace courier::wire
