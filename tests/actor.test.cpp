#include "courier/actor.hpp"

#include <catch2/catch.hpp>

TEST_CASE("actor placeholder", "[actor]") { SUCCEED(); }
