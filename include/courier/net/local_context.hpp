#pragma once
/// @file
/// The local path: dynamic services called in the same process, through the same context_ref as
/// over a connection, with no socket, engine or frame on a wire.
///
///     courier::system sys;
///     auto ctx = courier::net::serve_locally(sys, services);            // a context_ref
///     auto hello = ctx.call_wait(courier::token("HELO"), courier::net::args(std::string_view("you")), 1s);
///
/// The semantics are the remote ones: the arguments are copied at the call (arguments encodes
/// them), a handler reads them with the same typed reader (a mismatch is the same ERROR), replies,
/// fails or defers the same way, unknown tokens are no_such_service, `$SVC` lists the services,
/// children are opened from the table's factory and closed, calls in a child that is not open
/// fail with no_such_context, and time-outs are the request's. What differs: a local caller serves
/// nothing (incoming::peer() is empty), a child's close does not wait for deferred answers in it
/// (they still reach their callers), and there is no limit of children but memory.
///
/// The context is an actor (one per serve_locally): its handlers run one at a time in its turns,
/// on a worker, so a handler's state needs no lock. A reply is written into a block of the
/// context's own and viewed by the caller's items_ref; while a caller keeps a reply, the next one
/// takes another block (so a caller that drops each reply allocates nothing per call).
///
/// Thread-safety: the returned context_ref is an actor ref (any thread).

#include <memory>
#include <utility>

#include "courier/net/context.hpp"
#include "courier/net/detail/local_context.hpp"
#include "courier/net/services.hpp"
#include "courier/system.hpp"

namespace courier::net {

/// Serves `services` in this process: the context_ref of a new context actor in `sys` (its
/// parent context; children from the table's factory). Closing it (close()) stops the actor.
inline context_ref serve_locally(courier::system& sys, std::shared_ptr<const service_table> services) {
  return context_ref(actor_ref<detail::context_calls>(sys.spawn<detail::local_context>(std::move(services))), 0);
}

}  // namespace courier::net
