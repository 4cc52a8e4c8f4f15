// The actor's own context: its system, linked children, and waiting for every actor to stop.

#include <chrono>
#include <mutex>
#include <thread>

#include "courier/system.hpp"
#include "system_core.hpp"

namespace courier {
namespace detail {

courier::system* system_of(const system_core* core) noexcept { return core->owner; }

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

bool system::await_all_stopped(timespan deadline) {
  if (finished()) return report_.clean;
  if (detail::current_actor != nullptr || detail::on_worker_thread()) return live_actors() == 0;
  // Saturates, as shutdown does: a deadline past the clock's range waits without limit.
  const auto start = std::chrono::steady_clock::now();
  const bool forever = deadline >= std::chrono::steady_clock::time_point::max() - start;
  const auto until = forever ? std::chrono::steady_clock::time_point::max() : start + deadline;
  if (core_->manual) {
    for (;;) {
      if (live_actors() == 0) return true;
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) return false;
      if (core_->run_one(core_->cfg.throughput)) continue;
      // Nothing ready: another thread may still send, so poll briefly instead of giving up.
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(1)));
    }
  }
  std::unique_lock lock(core_->registry_mutex);
  auto all_stopped = [this] { return core_->live == 0; };
  if (forever) {
    core_->registry_empty.wait(lock, all_stopped);
    return true;
  }
  return core_->registry_empty.wait_until(lock, until, all_stopped);
}

}  // namespace courier
