#include "courier/system.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>

#include "system_core.hpp"

namespace courier {
namespace detail {

// ---------------------------------------------------------------------------------------------
// actor_base: the parts that do not depend on the message list

bool actor_base::add_monitor(monitor_link* link) noexcept {
  monitor_link* top = monitors_.load(std::memory_order_acquire);
  do {
    if (top == monitors_closed) return false;
    link->next = top;
  } while (!monitors_.compare_exchange_weak(top, link, std::memory_order_release, std::memory_order_acquire));
  return true;
}

error actor_base::exit_reason() const { return exit_reason_ != nullptr ? *exit_reason_ : error{}; }

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
      errc reason = slot->reason;
      pool::destroy(slot);
      if (exit_reason_ == nullptr) exit_reason_ = new error(reason);
      stop_requested_ = true;
      break;
    }
    default:
      pool::destroy(msg);  // unreachable: no other system types are ever sent
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
    case exit_type:
      pool::destroy(static_cast<exit_slot*>(msg));
      break;
    default:
      break;
  }
}

void actor_base::terminate(const error& reason) noexcept {
  if (reason && exit_reason_ == nullptr) exit_reason_ = new error(reason);
  if (message_header* m = mailbox_.close()) {
    // Built only when something was queued: a normal stop allocates nothing.
    const error dropped(errc::actor_stopped,
                        reason ? "the actor stopped before handling the message: " + reason.describe()
                               : "the actor stopped before handling the message");
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
      auto* msg = make_message<down>(links->down_type, nullptr, id(), reason);
      if (!links->watcher->enqueue_urgent(msg)) pool::destroy(msg);
    } catch (...) {
      // Out of memory while stopping: the watcher misses this down, nothing else is lost.
    }
    links->watcher->release();
    pool::destroy(links);
    links = next;
  }
  unregister_actor(core(), this);
}

// ---------------------------------------------------------------------------------------------
// Registry and dead letters

void register_actor(system_core* core, actor_base* a) {
  a->identity().id = core->next_id.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(core->registry_mutex);
  a->identity().registry_next = core->registry_head;
  if (core->registry_head != nullptr) core->registry_head->identity().registry_prev = a;
  core->registry_head = a;
  ++core->live;
}

void unregister_actor(system_core* core, actor_base* a) noexcept {
  std::lock_guard lock(core->registry_mutex);
  actor_identity& self = a->identity();
  if (self.registry_prev != nullptr)
    self.registry_prev->identity().registry_next = self.registry_next;
  else
    core->registry_head = self.registry_next;
  if (self.registry_next != nullptr) self.registry_next->identity().registry_prev = self.registry_prev;
  self.registry_prev = self.registry_next = nullptr;
  if (--core->live == 0) core->registry_empty.notify_all();
}

void dead_letter(system_core* core, std::uint64_t target_id, const char* message_type,
                 dead_letter_reason reason) noexcept {
  core->dead_letters.fetch_add(1, std::memory_order_relaxed);
  if (core->cfg.on_dead_letter != nullptr)
    core->cfg.on_dead_letter({target_id, message_type, reason}, core->cfg.dead_letter_context);
}

// ---------------------------------------------------------------------------------------------
// system_core

system_core::system_core(const config& c)
    : cfg(c), manual(c.mode != scheduling::threaded), injection(1024), timers(this, c.mode == scheduling::deterministic) {
  if (cfg.throughput == 0) cfg.throughput = 1;
  if (cfg.mode == scheduling::embedded) event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (!manual) start_workers();
}

system_core::~system_core() {
  if (event_fd >= 0) ::close(event_fd);
}

namespace {

// Cores whose workers were left running past a shutdown deadline; kept reachable on purpose,
// since a stuck handler may still touch its core when it returns.
std::mutex abandoned_mutex;
std::vector<system_core*>* abandoned_cores = nullptr;

}  // namespace

}  // namespace detail

// -------------------------------------------------------------------------------------------------
// system

system::system(config cfg) : core_(new detail::system_core(cfg)), settings_(core_->cfg) {}

system::~system() {
  if (core_ == nullptr) return;
  if (!core_->shut_down) {
    shutdown_report report = shutdown();
    if (!report.clean) {
      std::fprintf(stderr, "courier: %zu actor(s) did not stop before the shutdown deadline:", report.unfinished.size());
      for (const auto& name : report.unfinished) std::fprintf(stderr, " %s", name.c_str());
      std::fprintf(stderr, "\n");
    }
  }
}

shutdown_report system::shutdown(timespan deadline) {
  shutdown_report report;
  if (core_ == nullptr || core_->shut_down) return report;
  core_->shut_down = true;
  {
    std::lock_guard lock(core_->registry_mutex);
    for (detail::actor_base* a = core_->registry_head; a != nullptr; a = a->identity().registry_next)
      a->request_exit(errc::system_shutdown);
  }
  const auto until = std::chrono::steady_clock::now() + deadline;
  if (core_->manual) {
    while (live_actors() > 0 && std::chrono::steady_clock::now() < until)
      if (!core_->run_one(core_->cfg.throughput)) break;
  } else {
    std::unique_lock lock(core_->registry_mutex);
    core_->registry_empty.wait_until(lock, until, [this] { return core_->live == 0; });
  }
  {
    std::lock_guard lock(core_->registry_mutex);
    for (detail::actor_base* a = core_->registry_head; a != nullptr; a = a->identity().registry_next)
      report.unfinished.push_back(std::string(a->name()) + "#" + std::to_string(a->id()));
  }
  report.clean = report.unfinished.empty();
  core_->timers.stop();
  dead_letters_at_shutdown_ = core_->dead_letters.load(std::memory_order_relaxed);
  if (report.clean) {
    core_->stop_workers(true);
    // Actors stopped and workers gone: what is left in the queues are references to stopped actors.
    detail::actor_base* a = nullptr;
    while (core_->injection.try_dequeue(a)) {
    }
    delete core_;
  } else {
    core_->stop_workers(false);
    std::lock_guard lock(detail::abandoned_mutex);
    if (detail::abandoned_cores == nullptr) detail::abandoned_cores = new std::vector<detail::system_core*>();
    detail::abandoned_cores->push_back(core_);
  }
  core_ = nullptr;
  return report;
}

bool system::run_one() { return core_ != nullptr && core_->run_one(1); }

std::size_t system::poll() {
  if (core_ == nullptr) return 0;
  core_->drain_wake_fd();
  std::size_t ran = 0;
  for (std::size_t ready = core_->injection.size_approx(); ran < ready; ++ran)
    if (!core_->run_one(core_->cfg.throughput)) break;
  return ran;
}

std::size_t system::run_until_idle() {
  if (core_ == nullptr) return 0;
  core_->drain_wake_fd();
  std::size_t ran = 0;
  while (core_->run_one(core_->cfg.throughput)) ++ran;
  return ran;
}

std::size_t system::advance_time(timespan by) { return core_ != nullptr ? core_->timers.advance(by) : 0; }

int system::wake_fd() const noexcept { return core_ != nullptr ? core_->event_fd : -1; }

std::uint64_t system::dead_letters() const noexcept {
  return core_ != nullptr ? core_->dead_letters.load(std::memory_order_relaxed) : dead_letters_at_shutdown_;
}

std::size_t system::live_actors() const noexcept {
  if (core_ == nullptr) return 0;
  std::lock_guard lock(core_->registry_mutex);
  return core_->live;
}

std::size_t system::worker_count() const noexcept { return core_ != nullptr ? core_->workers.size() : 0; }
const config& system::settings() const noexcept { return settings_; }

}  // namespace courier
