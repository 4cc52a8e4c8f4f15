#pragma once
/// @file
/// Copies items from a reader to a frame writer as they are, each read with its own type (lists and
/// everything in them too): what a service that echoes whatever it is given does. Part of the wire
/// codec (courier/wire.hpp).
///
/// Thread-safety: functions over their arguments.

#include <cstddef>
#include <span>
#include <string_view>

#include "courier/wire/decoder.hpp"
#include "courier/wire/encoder.hpp"
#include "courier/wire/items.hpp"

namespace courier::wire {

/// Copies the next item (a list with everything in it); false, copying nothing, at the end of the
/// items or of the list being read.
inline bool copy_item(reader& in, frame_writer& out) {
  if (with_scalar_type(in.peek(), [&]<class T>() { out.add(*in.read<T>()); })) return true;
  switch (in.peek()) {
    case item_type::string: out.add(*in.read<std::string_view>()); return true;
    case item_type::binary: out.add_binary(*in.read<std::span<const std::byte>>()); return true;
    case item_type::list:
      (void)in.begin_list();
      out.begin_list();
      while (copy_item(in, out)) {
      }
      (void)in.end_list();
      out.end_list();
      return true;
    default: return false;
  }
}

/// Copies every item left (at the top level, or to the end of the list being read).
inline void copy_items(reader& in, frame_writer& out) {
  while (copy_item(in, out)) {
  }
}

}  // namespace courier::wire
