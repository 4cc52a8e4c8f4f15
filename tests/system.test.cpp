#include "courier/system.hpp"

#include <catch2/catch.hpp>

TEST_CASE("system placeholder", "[system]") { SUCCEED(); }
