// Where a connection's inbound call goes when the typed shell does not take it: a context actor, a
// child context, reflection, a table of dynamic services, or ERROR no_such_service; and the
// session that serves an accepted connection's parent context (see connection_core.hpp).
#include <exception>
#include <string>
#include <utility>

#include "courier/net/detail/connection_core.hpp"
#include "courier/net/detail/node_core.hpp"
#include "courier/net/local_context.hpp"

namespace courier::net::detail {

// A call or send of the peer's in a context the typed shell does not serve (or with a token it
// does not know).
void connection_core::route_inbound(const wire::frame_view& f) {
  const bool is_call = f.kind() == wire::kind::call;
  if (!is_call && f.kind() != wire::kind::send) return;
  call_seen_ = true;
  if (context_ && f.context_id() == 0) {
    forward_to_context(context_, f, is_call);
    return;
  }
  if (f.context_id() != 0 && !child_contexts_.empty()) {
    if (auto it = child_contexts_.find(f.context_id()); it != child_contexts_.end()) {
      forward_to_context(it->second, f, is_call);
      return;
    }
  }
  if (f.token() == wire::reflection_token) {
    if (is_call) answer_reflection(f);
    return;
  }
  if (const service_handler* handler = router_.find(f.context_id(), f.token())) {
    run_service(*handler, f, is_call);
    return;
  }
  if (is_call) {
    write_error_frame(stream_, f.transaction_id(), f.context_id(), f.token(), context_router::no_service(f.token()));
    answered(f.context_id());
  }
}

// What this connection serves: the served interface's messages, described from their types, then
// the dynamic services with the signatures they declared.
void connection_core::answer_reflection(const wire::frame_view& f) {
  wire::frame_writer w(stream_.frames(),
                       wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, f.token(),
                                          f.transaction_id(), f.context_id()},
                       stream_.send_limits());
  if (f.context_id() == 0 && shell_.describe != nullptr) shell_.describe(w);
  router_.describe(f.context_id(), w);
  if (!w.finish())
    write_error_frame(stream_, f.transaction_id(), f.context_id(), f.token(), context_router::reflection_too_large());
  answered(f.context_id());
}

// A dynamic service runs here, in this turn: its reply is written straight into the output (no
// copy, no allocation), unless it fails, finds its arguments wrong, or defers.
void connection_core::run_service(const service_handler& handler, const wire::frame_view& f, bool is_call) {
  wire::out_buffer& out = is_call ? stream_.frames() : scratch_;
  const std::size_t start = out.size();
  wire::frame_writer reply(out,
                           wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, f.token(),
                                              f.transaction_id(), f.context_id()},
                           stream_.send_limits());
  incoming call(f, &reply, shell_.actor, shell_.post_answer, shell_.context_map);
  call.run(handler);
  if (!is_call) {
    scratch_.clear();
    return;
  }
  if (call.deferred()) {
    out.truncate(start);
    ++in_flight_;  // answered by a deferred_answer; counted like a call the served actor holds
    return;
  }
  if (auto failed = call.outcome()) {
    out.truncate(start);
    write_error_frame(stream_, f.transaction_id(), f.context_id(), f.token(), *failed);
  } else if (auto ok = reply.finish(); !ok) {
    write_error_frame(stream_, f.transaction_id(), f.context_id(), f.token(),
                      context_router::reply_not_encoded(ok.err()));
  }
  answered(f.context_id());
}

// A deferred dynamic reply (deferred_reply) arrived: answered now, in this turn.
void connection_core::on_deferred_answer(const deferred_answer& a) {
  if (!stream_.finished()) {
    bool written = false;
    if (a.items) {
      written = static_cast<bool>(append_frame(
          wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, a.token, a.transaction_id, a.context_id},
          a.items->view().subspan(wire::header_size)));
    }
    if (!written)
      write_error_frame(
          stream_, a.transaction_id, a.context_id, a.token,
          a.items ? courier::error(errc::handler_failed, "the reply is larger than the peer accepts") : a.failure);
    answered(a.context_id);
  }
  settled();
}

// A call in a context served by a context actor (the parent's, or a child's own): its items are
// copied into the call message (the frame's block is not held across the hop) and its reply's
// items written back. Counted in flight like a call the served actor holds.
void connection_core::forward_to_context(const context_ref& target, const wire::frame_view& f, bool is_call) {
  const std::uint64_t ctx = f.context_id();
  dynamic_call call{f.token(), target.id(), arguments::from_items(f.body()), self_as_context(), ctx};
  ++in_flight_;
  if (!is_call) {
    (void)target.connection().send(std::move(call));
    settled();
    return;
  }
  target.connection()
      .request(std::move(call))
      .then(
          [this, tid = f.transaction_id(), tok = f.token(), ctx](const wire::items_ref& reply) {
            if (!stream_.finished()) {
              if (!append_frame(wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, tok, tid, ctx},
                                reply.body()))
                write_error_frame(stream_, tid, ctx, tok,
                                  courier::error(errc::handler_failed, "the reply is larger than the peer accepts"));
              answered(ctx);
            }
            settled();
          },
          [this, tid = f.transaction_id(), tok = f.token(), ctx](const courier::error& e) {
            if (!stream_.finished()) {
              write_error_frame(stream_, tid, ctx, tok, e);
              answered(ctx);
            }
            settled();
          });
}

// The engine's questions about child contexts (docs/protocol.md section 6): a child the peer opens
// gets its services from the parent table's factory, for its kind (served by an actor of its own
// when the parent context is an actor's); it ends when its close is complete here.
wire::context_verdict connection_core::on_context_open(std::uint64_t id, courier::token kind, std::string_view name) {
  auto child = router_.make_child(kind, name);
  if (!child) return {static_cast<std::uint32_t>(child.err().code.value()), child.err().text};
  if (context_)
    child_contexts_[id] = serve_locally(node_->system(), std::move(*child));
  else
    router_.add_child(id, std::move(*child));
  return {};
}

// Child `id` ended here: its table is let go, its actor (if it has one) stopped.
void connection_core::child_ended(std::uint64_t id) {
  router_.remove_child(id);
  if (auto it = child_contexts_.find(id); it != child_contexts_.end()) {
    (void)it->second.close();
    child_contexts_.erase(it);
  }
}

// This connection as the context_calls a context actor's handler calls back (incoming::peer).
actor_ref<context_calls> connection_core::self_as_context() {
  shell_.actor->add_ref();
  return actor_ref<context_calls>::adopt(shell_.actor, shell_.context_map);
}

// One answer to a call received in context `id` went out: the engine may answer a child's close
// (and end it) after the last one.
void connection_core::answered(std::uint64_t id) {
  if (id == 0)
    stream_.reply_sent();
  else if (stream_.reply_sent(id))
    child_ended(id);
}

// ---- sessions

// The session's factory makes the parent context's services for this connection, with its peer
// and a ref to the client's side. A factory that throws ends the connection at once.
void connection_core::start_session() {
  if (!session_start_) return;
  session_start start = std::move(*session_start_);
  session_start_.reset();
  try {
    session_id_ = start.peer.id;
    session s = (*start.make)(start.peer, context_ref(self_as_context(), 0));
    router_.serve_parent(std::move(s.services));
    session_end_ = std::move(s.on_end);
    session_owned_ = std::move(s.owned);
    log_session(
        log_level::info,
        std::string("started for ").append(to_string(start.peer.transport)).append(" ").append(start.peer.address));
  } catch (const std::exception& e) {
    log_session(log_level::error, std::string("could not start: ").append(e.what()));
    stream_.fail(courier::error(errc::handler_failed, std::string("the session could not start: ") + e.what()));
  } catch (...) {
    log_session(log_level::error, "could not start");
    stream_.fail(courier::error(errc::handler_failed, "the session could not start"));
  }
}

void connection_core::log_session(log_level level, std::string_view what) noexcept {
  const auto& log = stream_.config().log;
  if (!logs(log, level)) return;
  try {
    std::string line("session ");
    line.append(std::to_string(session_id_)).append(" ").append(what);
    log->write(level, line);
  } catch (...) {  // no memory for the line: the session goes on without it
  }
}

// The connection ended: the session hears why, its actors stop (the last owned first), and its
// services go (with the state they capture, refs to this connection among it).
void connection_core::end_session() noexcept {
  if (session_end_) {
    courier::error reason = stream_.finished() ? exit_reason_of(why())
                                               : courier::error(errc::connection_lost, "the connection was stopped");
    if (idle_ended_)
      reason = courier::error(
          errc::connection_lost,
          "the session was idle for " + std::to_string(stream_.config().idle_timeout.count()) + " ms and was closed");
    if (logs(stream_.config().log, log_level::info)) {
      try {
        log_session(log_level::info, std::string("ended: ").append(reason.describe()));
      } catch (...) {  // no memory for the line: on_end is still told
      }
    }
    try {
      std::exchange(session_end_, nullptr)(reason);
    } catch (...) {  // the session is over either way
    }
  }
  for (auto it = session_owned_.rbegin(); it != session_owned_.rend(); ++it) (*it)();
  session_owned_.clear();
  router_.clear();
}

}  // namespace courier::net::detail
