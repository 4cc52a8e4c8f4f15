#pragma once
// The interface of the back-pressure flood (flood.test.cpp and its server, flood_server.cpp): a
// one-way message of ints, and a call that answers how many have been handled.
#include <cstdint>
#include <tuple>

#include "courier/interface.hpp"
#include "courier/token.hpp"

namespace flood {

struct drip {  // one-way
  static constexpr courier::token token{"DRIP"};
  std::int32_t n = 0;
  auto fields() { return std::tie(n); }
  auto fields() const { return std::tie(n); }
};
struct handled {  // how many drips were handled, and the sum of their n
  static constexpr courier::token token{"HNDL"};
  auto fields() { return std::tie(); }
  auto fields() const { return std::tie(); }
};

using api = courier::interface<void(drip), std::int64_t(handled)>;

}  // namespace flood
