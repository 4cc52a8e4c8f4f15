#include "courier/actor_ref.hpp"

#include <catch2/catch.hpp>

TEST_CASE("actor_ref placeholder", "[actor_ref]") { SUCCEED(); }
