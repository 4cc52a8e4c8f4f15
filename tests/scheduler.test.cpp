#include "courier/scheduler.hpp"

#include <catch2/catch.hpp>

TEST_CASE("scheduler placeholder", "[scheduler]") { SUCCEED(); }
