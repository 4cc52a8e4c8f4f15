// actor_base's out-of-line code: the parts of every actor that do not depend on its message
// list. System messages (replies, stop requests, start, child exits), the watcher list
// (monitors and parent-child links) and the actor's termination. Each runs on the actor's own
// thread, except add_monitor and exit_reason (any thread; see actor_base).

#include "courier/actor.hpp"
#include "system_core.hpp"

namespace courier {
namespace detail {

bool actor_base::add_monitor(monitor_link* link) noexcept {
  monitor_link* top = monitors_.load(std::memory_order_acquire);
  do {
    if (top == monitors_closed) return false;
    link->next = top;
  } while (!monitors_.compare_exchange_weak(top, link, std::memory_order_release, std::memory_order_acquire));
  return true;
}

error actor_base::exit_reason() const { return exit_reason_ != nullptr ? *exit_reason_ : error{}; }

error stopped_error(const error* reason, const stop_context& context) {
  if (reason == nullptr || !*reason) return error(errc::actor_stopped, context.alone);
  std::string text = reason->text.empty() ? reason->code.message() : reason->text;
  text += "; ";
  text += context.then;
  return error(reason->code, std::move(text));
}

error actor_base::refused_request_error() const { return refused_request_error(request_refused); }

error actor_base::refused_request_error(const stop_context& context) const {
  // exit_reason_ is written before terminate closes the mailbox; the acquire load in closed()
  // pairs with close()'s exchange, so a producer that saw the mailbox closed may read it. The
  // other refusal, a self-send from a stopping handler, is on this actor's own thread.
  const bool readable = this == current_actor || mailbox_.closed();
  return stopped_error(readable ? exit_reason_ : nullptr, context);
}

void actor_base::handle_system(message_header* msg) {
  switch (msg->type) {
    case response_type: {
      pending_base* p = msg->reply_to;
      struct releaser {
        pending_base* p;
        ~releaser() { detail::release(p); }
      } guard{p};
      if (claim(p))
        p->ops->deliver(p, msg);
      else
        p->ops->discard_reply(msg);
      break;
    }
    case error_response_type: {
      auto* slot = static_cast<error_slot*>(msg);
      struct releaser {
        error_slot* slot;
        ~releaser() {
          pending_base* p = slot->reply_to;
          pool::destroy(slot);
          detail::release(p);
        }
      } guard{slot};
      if (claim(slot->reply_to)) slot->reply_to->ops->fail(slot->reply_to, slot->err);
      break;
    }
    case exit_type: {
      auto* slot = static_cast<exit_slot*>(msg);
      if (exit_reason_ == nullptr) {
        if (slot->reason_with_text == nullptr) {
          exit_reason_ = new error(slot->reason);
        } else if (*slot->reason_with_text) {  // an empty one stops the actor as a normal stop does
          exit_reason_ = slot->reason_with_text;
          slot->reason_with_text = nullptr;
        }
      }
      pool::destroy(slot);
      stop_requested_ = true;
      break;
    }
    case child_exit_type: handle_child_exit(static_cast<child_exit_slot*>(msg)); break;
    case start_type:  // unreachable: only actors with on_start() are sent one, and they handle it
      pool::destroy(static_cast<start_slot*>(msg));
      break;
    default: pool::destroy(msg);  // unreachable: no other system types are ever sent
  }
}

void actor_base::discard_system(message_header* msg) noexcept {
  switch (msg->type) {
    case response_type: {
      pending_base* p = msg->reply_to;
      p->ops->discard_reply(msg);
      detail::release(p);
      break;
    }
    case error_response_type: {
      auto* slot = static_cast<error_slot*>(msg);
      pending_base* p = slot->reply_to;
      pool::destroy(slot);
      detail::release(p);
      break;
    }
    case exit_type: pool::destroy(static_cast<exit_slot*>(msg)); break;
    case child_exit_type:  // the parent's link to the child is released by its own terminate
      pool::destroy(static_cast<child_exit_slot*>(msg));
      break;
    case start_type: pool::destroy(static_cast<start_slot*>(msg)); break;
    default: break;
  }
}

void actor_base::terminate(const error& reason) noexcept {
  // A handler that threw left this unset: without it, what the actor sends itself while stopping
  // (a self-monitor's down, the failure of a request it queued to itself) would take the
  // self-send shortcut into a list that close() has already drained.
  stop_requested_ = true;
  if (reason && exit_reason_ == nullptr) exit_reason_ = new error(reason);
  if (message_header* m = mailbox_.close()) {
    // Built only when something was queued: a normal stop allocates nothing.
    const error dropped = stopped_error(&reason, message_dropped);
    while (m != nullptr) {
      message_header* next = m->next;
      // A dropped request tells its requester; a dropped one-way message is a dead letter.
      if (m->reply_to == nullptr && m->type < first_system_type)
        dead_letter(core(), id(), mailbox_.shared.ops->message_name(m->type));
      mailbox_.shared.ops->discard(m, dropped);
      m = next;
    }
  }
  monitor_link* links = monitors_.exchange(monitors_closed, std::memory_order_acq_rel);
  while (links != nullptr) {
    monitor_link* next = links->next;
    try {
      switch (links->kind) {
        case link_kind::monitor: {
          auto* msg = make_message<down>(links->down_type, nullptr, id(), reason);
          if (!links->watcher->enqueue_urgent(msg)) pool::destroy(msg);
          break;
        }
        case link_kind::notify_parent: notify_parent(links, reason); break;
        case link_kind::stop_child: links->watcher->request_exit(errc::parent_stopped, true); break;
      }
    } catch (...) {
      // Out of memory while stopping: the watcher misses this down, nothing else is lost.
    }
    links->watcher->release();
    pool::destroy(links);
    links = next;
  }
  unregister_actor(core(), this);
}

void actor_base::link_child(actor_base* child, std::uint16_t down_type) {
  // Both links are allocated before either is published, so a failed allocation leaves no half link.
  auto* to_parent = pool::make<monitor_link>(nullptr, this, down_type, link_kind::notify_parent);
  monitor_link* to_child;
  try {
    to_child = pool::make<monitor_link>(nullptr, child, no_down_type, link_kind::stop_child);
  } catch (...) {
    pool::destroy(to_parent);
    throw;
  }
  add_ref();  // held by the child's link to this parent
  if (!child->add_monitor(to_parent)) {
    // Stopped already (a shutdown reached it first): nothing to link.
    pool::destroy(to_parent);
    release();
    pool::destroy(to_child);
    return;
  }
  child->add_ref();  // held by this parent's link to the child
  if (!add_monitor(to_child)) {
    // This parent stopped already (not reachable from a handler, on_start or on_stop; kept safe).
    child->release();
    pool::destroy(to_child);
    child->request_exit(errc::parent_stopped, true);
  }
}

void actor_base::notify_parent(monitor_link* link, const error& reason) {
  auto* slot = pool::make<child_exit_slot>();
  slot->type = child_exit_type;
  slot->reply_to = nullptr;
  slot->child = this;  // kept alive by the parent's link until the parent handles this
  slot->id = id();
  slot->reason = reason;
  slot->down_type = link->down_type;
  if (!link->watcher->enqueue(slot)) pool::destroy(slot);  // the parent stopped: its terminate drops its link
}

void actor_base::unlink_child(actor_base* child) noexcept {
  auto is_link = [child](const monitor_link* l) { return l->kind == link_kind::stop_child && l->watcher == child; };
  // Other threads only push at the head; only this actor's thread unlinks or closes the list, so
  // a node below the head can be unlinked with plain writes.
  monitor_link* found = nullptr;
  for (;;) {
    monitor_link* head = monitors_.load(std::memory_order_acquire);
    if (head == nullptr || head == monitors_closed) return;
    if (is_link(head)) {
      if (monitors_.compare_exchange_strong(head, head->next, std::memory_order_acq_rel, std::memory_order_acquire)) {
        found = head;
        break;
      }
      continue;  // a watcher was pushed meanwhile: the link is below the head now
    }
    for (monitor_link* prev = head; prev->next != nullptr; prev = prev->next) {
      if (is_link(prev->next)) {
        found = prev->next;
        prev->next = found->next;
        break;
      }
    }
    break;
  }
  if (found == nullptr) return;
  pool::destroy(found);
  child->release();
}

void actor_base::handle_child_exit(child_exit_slot* slot) {
  actor_base* child = slot->child;
  const std::uint64_t child_id = slot->id;
  error reason = std::move(slot->reason);
  const std::uint16_t down_type = slot->down_type;
  pool::destroy(slot);
  unlink_child(child);  // may free the child
  if (down_type != no_down_type) {
    auto* msg = make_message<down>(down_type, nullptr, child_id, std::move(reason));
    if (!enqueue(msg)) pool::destroy(msg);
  } else if (reason) {
    // No down handler: an abnormal child exit takes this actor down with the same reason.
    if (exit_reason_ == nullptr) exit_reason_ = new error(std::move(reason));
    stop_requested_ = true;
  }
}

}  // namespace detail
}  // namespace courier
