#pragma once
/// @file
/// Everything a Courier program needs: actors, references, the system and its configuration, the
/// named registry and the plain thread's inbox.

#include "courier/actor.hpp"
#include "courier/actor_ref.hpp"
#include "courier/error.hpp"
#include "courier/message.hpp"
#include "courier/pool.hpp"
#include "courier/receive.hpp"
#include "courier/registry.hpp"
#include "courier/scheduler.hpp"
#include "courier/system.hpp"
