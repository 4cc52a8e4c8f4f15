#pragma once

// The wire codec (docs/protocol.md): frames with a fixed little-endian header and typed items.
//
//   out_buffer          a growable byte buffer, many frames back to back (detail/wire_buffer.hpp)
//   frame_writer        appends one frame to an out_buffer (detail/wire_encoder.hpp)
//   decoder, reader     incremental zero-copy decoding and typed reading (detail/wire_decoder.hpp)
//   encode/decode<M>    typed messages with a token and fields() (detail/wire_message.hpp)
//   print, to_text      any frame as text (detail/wire_print.hpp)
//   errc, error, result the error model, category "courier.wire" (detail/wire_error.hpp)
//
// It depends on nothing else in Courier, so a client or a tool can use it alone (target courier::wire).

#include "courier/detail/wire_buffer.hpp"    // IWYU pragma: export
#include "courier/detail/wire_decoder.hpp"   // IWYU pragma: export
#include "courier/detail/wire_encoder.hpp"   // IWYU pragma: export
#include "courier/detail/wire_error.hpp"     // IWYU pragma: export
#include "courier/detail/wire_format.hpp"    // IWYU pragma: export
#include "courier/detail/wire_handshake.hpp" // IWYU pragma: export
#include "courier/detail/wire_message.hpp"   // IWYU pragma: export
#include "courier/detail/wire_print.hpp"     // IWYU pragma: export
#include "courier/token.hpp"                 // IWYU pragma: export
