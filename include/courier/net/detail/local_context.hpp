#pragma once
/// @file
/// The actor behind serve_locally (net/local_context.hpp), private to the network layer: a
/// context served in this process, whose calls run the service table's handlers in its turns,
/// with the remote path's semantics (see local_context.hpp).
///
/// Thread-safety: an actor; its state is touched only in its own turns.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "courier/actor.hpp"
#include "courier/net/context.hpp"
#include "courier/net/detail/context_router.hpp"
#include "courier/net/services.hpp"
#include "courier/system.hpp"
#include "courier/wire/shared_buffer.hpp"

namespace courier::net::detail {
/// The actor behind serve_locally.
class local_context : public courier::actor<local_context, dynamic_call, open_child, close_child, deferred_answer> {
 public:
  explicit local_context(std::shared_ptr<const service_table> services) : router_(std::move(services)) {}

  response_promise<wire::items_ref> on(const dynamic_call& c) {
    auto promise = make_response_promise<wire::items_ref>();
    const bool one_way = !promise.pending();
    auto refuse = [&](courier::error e) {
      if (one_way)
        courier::detail::dead_letter(core(), id(), "a dynamic send", dead_letter_reason::invalid_argument);
      else
        promise.fail(std::move(e));
    };
    if (c.items.fault() != nullptr) {
      refuse(*c.items.fault());
      return {};
    }
    const service_table* table = router_.services_of(c.context);
    if (table == nullptr) {
      refuse(context_router::no_context(c.context));
      return {};
    }
    const std::uint64_t tid = one_way ? 0 : ++next_tid_;
    if (c.token == wire::reflection_token) {
      if (!one_way) answer_reflection(*table, c, tid, promise);
      return {};
    }
    const service_handler* handler = router_.find(c.context, c.token);
    if (handler == nullptr) {
      refuse(context_router::no_service(c.token));
      return {};
    }
    reply_.clear();
    wire::frame_writer reply(
        reply_, wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, c.token, tid, c.context});
    incoming call(c.token, tid, c.context, c.items.bytes(), &reply, this, &incoming::post_to<local_context>, nullptr);
    call.set_caller(&c.caller, c.caller_context);
    call.run(*handler);
    if (one_way) return {};
    if (call.deferred()) {
      deferred_.emplace(tid, std::move(promise));
      return {};
    }
    if (auto failed = call.outcome()) {
      promise.fail(std::move(*failed));
    } else if (auto ok = reply.finish(); !ok) {
      promise.fail(context_router::reply_not_encoded(ok.err()));
    } else {
      deliver(reply_, promise);
    }
    return {};
  }

  // A deferred_reply's answer, from whichever thread gave it.
  void on(const deferred_answer& a) {
    auto it = deferred_.find(a.transaction_id);
    if (it == deferred_.end()) return;
    response_promise<wire::items_ref> promise = std::move(it->second);
    deferred_.erase(it);
    if (a.items)
      deliver(*a.items, promise);
    else
      promise.fail(a.failure);
  }

  response_promise<opened_context> on(const open_child& o) {
    auto promise = make_response_promise<opened_context>();
    auto child = router_.make_child(o.kind, o.name);
    if (!child) {
      promise.fail(child.err());
      return {};
    }
    const std::uint64_t id = next_child_;
    next_child_ += 2;  // odd, as a connecting side's
    router_.add_child(id, std::move(*child));
    promise.deliver(opened_context{id});
    return {};
  }

  response_promise<unit> on(const close_child& c) {
    auto promise = make_response_promise<unit>();
    if (c.context == 0) {
      promise.deliver(unit{});
      stop();
    } else if (!router_.remove_child(c.context)) {
      promise.fail(courier::error(errc::no_such_context, "context " + std::to_string(c.context) + " is not open here"));
    } else {
      promise.deliver(unit{});
    }
    return {};
  }

 private:
  void answer_reflection(const service_table& table, const dynamic_call& c, std::uint64_t tid,
                         response_promise<wire::items_ref>& promise) {
    reply_.clear();
    wire::frame_writer w(reply_,
                         wire::frame_header{wire::protocol_version, wire::kind::reply, 0, 0, c.token, tid, c.context});
    table.describe(w);
    if (!w.finish()) {
      promise.fail(context_router::reflection_too_large());
      return;
    }
    deliver(reply_, promise);
  }

  // The reply frame in `frame` goes to the caller as items viewing a block of ours: one that no
  // caller holds any more (a caller's continuation may still be letting go of the last reply when
  // the next call comes, so there are a few), else a new one in the place of the oldest.
  void deliver(const wire::out_buffer& frame, response_promise<wire::items_ref>& promise) {
    const auto bytes = frame.view();
    wire::block_ref* free = nullptr;
    for (wire::block_ref& b : blocks_) {
      if (b && b->use_count() == 1 && b->capacity() >= bytes.size()) {
        free = &b;
        break;
      }
    }
    if (free == nullptr) {
      free = &blocks_[next_block_++ % blocks_.size()];
      *free = wire::block_ref::adopt(wire::shared_block::make(bytes.size() < 4096 ? 4096 : bytes.size()));
    }
    wire::block_ref& block = *free;
    std::memcpy(block->data(), bytes.data(), bytes.size());
    wire::frame_header h{};
    h.kind = wire::kind::reply;
    h.body_length = static_cast<std::uint32_t>(bytes.size() - wire::header_size);
    wire::items_ref items;
    items.assign_frame(wire::frame_view(h, block->data()), block.get());
    promise.deliver(std::move(items));
  }

  context_router router_;
  std::unordered_map<std::uint64_t, response_promise<wire::items_ref>> deferred_;
  wire::out_buffer reply_;
  std::array<wire::block_ref, 4> blocks_;
  std::size_t next_block_ = 0;
  std::uint64_t next_tid_ = 0;
  std::uint64_t next_child_ = 1;
};

}  // namespace courier::net::detail
