#pragma once
/// @file
/// The wire codec's umbrella header: include this one.
//
// The wire codec (docs/protocol.md): frames with a fixed little-endian header and typed items.
//
//   out_buffer          a growable byte buffer, many frames back to back (wire/buffer.hpp)
//   frame_writer        appends one frame to an out_buffer (wire/encoder.hpp)
//   decoder, reader     incremental zero-copy decoding and typed reading (wire/decoder.hpp)
//   encode/decode<M>    typed messages with a token and fields() (wire/message.hpp)
//   print, to_text      any frame as text (wire/print.hpp)
//   engine              the connection state machine, sans I/O: handshake, contexts, ping, close (wire/engine.hpp)
//   errc, error, result the error model, category "courier.wire" (wire/error.hpp)
//
// It depends on nothing else in Courier but courier/result.hpp and courier/token.hpp (both standard-library
// only), so a client or a tool can use it alone (target courier::wire).
//
// Thread-safety: see each header; in short, value types and free functions, and no object is safe to use
// from two threads at once.

#include "courier/token.hpp"               // IWYU pragma: export
#include "courier/wire/buffer.hpp"         // IWYU pragma: export
#include "courier/wire/copy.hpp"           // IWYU pragma: export
#include "courier/wire/decoder.hpp"        // IWYU pragma: export
#include "courier/wire/encoder.hpp"        // IWYU pragma: export
#include "courier/wire/engine.hpp"         // IWYU pragma: export
#include "courier/wire/error.hpp"          // IWYU pragma: export
#include "courier/wire/format.hpp"         // IWYU pragma: export
#include "courier/wire/handshake.hpp"      // IWYU pragma: export
#include "courier/wire/message.hpp"        // IWYU pragma: export
#include "courier/wire/print.hpp"          // IWYU pragma: export
#include "courier/wire/shared_buffer.hpp"  // IWYU pragma: export
