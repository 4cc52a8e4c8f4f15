#pragma once
/// @file
/// Everything a Courier program needs: actors, references and requests, deferred replies, the
/// system and its configuration, the named registry and the plain thread's inbox. Each header
/// states its own thread-safety.

#include "courier/actor.hpp"
#include "courier/actor_ref.hpp"
#include "courier/config.hpp"
#include "courier/error.hpp"
#include "courier/executor.hpp"
#include "courier/interface.hpp"
#include "courier/pool.hpp"
#include "courier/receive.hpp"
#include "courier/registry.hpp"
#include "courier/request.hpp"
#include "courier/response_promise.hpp"
#include "courier/system.hpp"
#include "courier/system_messages.hpp"
