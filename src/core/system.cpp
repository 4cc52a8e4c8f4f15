#include "courier/system.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "host_lane.hpp"
#include "system_core.hpp"

namespace courier {
namespace detail {

// ---------------------------------------------------------------------------------------------
// Registry and dead letters

void register_actor(system_core* core, actor_base* a) {
  std::lock_guard lock(core->registry_mutex);
  const auto phase = core->phase.load(std::memory_order_relaxed);
  if (phase == system_core::phase_t::finished)
    throw std::system_error(make_error_code(errc::system_shutdown), "courier: spawn after shutdown");
  if (phase == system_core::phase_t::stopping)
    throw std::system_error(make_error_code(errc::system_shutdown), "courier: spawn while the system shuts down");
  a->identity().id = core->next_id.fetch_add(1, std::memory_order_relaxed);
  a->identity().registry_next = core->registry_head;
  if (core->registry_head != nullptr) core->registry_head->identity().registry_prev = a;
  core->registry_head = a;
  ++core->live;
  core->refs.fetch_add(1, std::memory_order_relaxed);
}

void release_core(system_core* core) noexcept {
  if (core->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete core;
}

void retain_core(system_core* core) noexcept { core->refs.fetch_add(1, std::memory_order_relaxed); }

actor_base* host_lane_of(system_core* core) noexcept { return core->lane; }

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

void count_unawaited_request(system_core* core) noexcept {
  core->unawaited_requests.fetch_add(1, std::memory_order_relaxed);
}

void dead_letter(system_core* core, std::uint64_t target_id, const char* message_type,
                 dead_letter_reason reason) noexcept {
  core->dead_letters.fetch_add(1, std::memory_order_relaxed);
  if (core->cfg.on_dead_letter != nullptr && core->hooks_enabled.load(std::memory_order_acquire))
    core->cfg.on_dead_letter({target_id, message_type, reason}, core->cfg.dead_letter_user_data);
}

void continuation_failed(system_core* core, const char* what) noexcept {
  if (core == nullptr) {  // a continuation of a request through an empty ref: no system to tell
    std::fprintf(stderr, "courier: a request's continuation threw: %s\n", what);
    return;
  }
  core->continuation_failures.fetch_add(1, std::memory_order_relaxed);
  try {
    if (core->cfg.on_continuation_error != nullptr && core->hooks_enabled.load(std::memory_order_acquire)) {
      core->cfg.on_continuation_error(error(errc::handler_failed, std::string("a continuation threw: ") + what),
                                      core->cfg.continuation_error_user_data);
      return;
    }
  } catch (...) {
    // The hook itself threw, or out of memory: fall back to the line below.
  }
  std::fprintf(stderr, "courier: a request's continuation threw: %s\n", what);
}

// ---------------------------------------------------------------------------------------------
// system_core

namespace {

timer_service::clock_kind clock_for(scheduling mode) {
  switch (mode) {
    case scheduling::deterministic: return timer_service::clock_kind::virtual_clock;
    case scheduling::embedded: return timer_service::clock_kind::host;
    default: return timer_service::clock_kind::own_thread;
  }
}

}  // namespace

system_core::system_core(const config& c)
    : cfg(c), manual(c.mode != scheduling::threaded), injection(1024), timers(this, clock_for(c.mode)) {
  if (cfg.throughput == 0) cfg.throughput = 1;
  // A host that asked for a callback gets no descriptor: signalling then costs no system call,
  // which is the point of asking (a host that posts to its own loop from its own thread).
  if (cfg.mode == scheduling::embedded && cfg.on_wake == nullptr) {
    event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd < 0) throw std::system_error(errno, std::generic_category(), "courier: eventfd for wake_fd");
    // The host watches an epoll descriptor around the eventfd, not the eventfd itself: a node's
    // reactor joins it later (attach_io_poller) without the descriptor's number changing.
    wake_epoll = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event watch{};
    watch.events = EPOLLIN;  // level-triggered: readable exactly while the eventfd is
    if (wake_epoll < 0 || ::epoll_ctl(wake_epoll, EPOLL_CTL_ADD, event_fd, &watch) < 0) {
      const int e = errno;
      if (wake_epoll >= 0) ::close(wake_epoll);
      ::close(event_fd);
      throw std::system_error(e, std::generic_category(), "courier: epoll for wake_fd");
    }
  }
  lane = host_lane::create(this);
  if (!manual) start_workers();
}

system_core::~system_core() {
  host_lane::free(lane);
  if (wake_epoll >= 0) ::close(wake_epoll);  // an abandoned core's: ~system left them open
  if (event_fd >= 0) ::close(event_fd);
}

namespace {

// Cores whose workers were left running past a shutdown deadline; kept reachable on purpose,
// since a stuck handler may still touch its core when it returns.
std::mutex abandoned_mutex;
std::vector<system_core*>* abandoned_cores = nullptr;

}  // namespace

system_core* core_of(courier::system& sys) noexcept { return sys.core_; }

}  // namespace detail

// -------------------------------------------------------------------------------------------------
// system

namespace {

config checked(config cfg) {
  if (cfg.workers > 64) throw std::invalid_argument("courier: config::workers must be at most 64");
  return cfg;
}

}  // namespace

namespace {
std::atomic<std::size_t> systems_alive{0};
}  // namespace

system::system(config cfg) : core_(new detail::system_core(checked(cfg))), settings_(core_->cfg) {
  core_->owner = this;
  systems_alive.fetch_add(1, std::memory_order_relaxed);
}

std::size_t system::alive() noexcept { return systems_alive.load(std::memory_order_relaxed); }

system::~system() {
  systems_alive.fetch_sub(1, std::memory_order_relaxed);
  if (!shut_down_) {
    shutdown_report report = shutdown();
    if (!report.clean) {
      std::fprintf(stderr,
                   "courier: %zu actor(s) did not stop before the shutdown deadline:", report.unfinished.size());
      for (const auto& name : report.unfinished) std::fprintf(stderr, " %s", name.c_str());
      std::fprintf(stderr, "\n");
    }
  }
  // After an unclean shutdown the core stays reachable (abandoned), since stuck handlers may still
  // use it; after a clean one, the actors that refs keep alive hold the last references. The
  // wake descriptor goes with the system, as promised to the host: after a clean shutdown nothing
  // signals it any more (every mailbox, the host lane and the timer are closed).
  if (report_.clean) {
    if (core_->wake_epoll >= 0) {
      ::close(core_->wake_epoll);
      core_->wake_epoll = -1;
    }
    if (core_->event_fd >= 0) {
      ::close(core_->event_fd);
      core_->event_fd = -1;
    }
    detail::release_core(core_);
  }
}

void system::ask_everyone_to_stop() {
  if (shutdown_begun_) return;
  shutdown_begun_ = true;
  {
    // The stop requests schedule their actors; in the manual modes that would call the host's
    // on_wake under the registry lock (a hook that calls stopped() would deadlock), so this
    // thread counts as running the system and signals once, after the lock.
    detail::system_core* const previous = detail::running_core;
    if (core_->manual) detail::running_core = core_;
    std::lock_guard lock(core_->registry_mutex);
    core_->phase.store(detail::system_core::phase_t::stopping, std::memory_order_release);  // later spawns throw
    for (detail::actor_base* a = core_->registry_head; a != nullptr; a = a->identity().registry_next)
      a->request_exit(errc::system_shutdown);
    detail::running_core = previous;
  }
  if (core_->manual && core_->injection.size_approx() > 0) core_->signal_fd();
}

void system::begin_shutdown() {
  if (!shut_down_) ask_everyone_to_stop();
}

bool system::stopped() const noexcept {
  if (core_->phase.load(std::memory_order_acquire) == detail::system_core::phase_t::running) return false;
  if (finished()) return true;
  {
    std::lock_guard lock(core_->registry_mutex);
    if (core_->live != 0) return false;
  }
  return !core_->manual || core_->injection.size_approx() == 0;
}

shutdown_report system::shutdown(timespan deadline) {
  if (shut_down_) return report_;
  ask_everyone_to_stop();
  shut_down_ = true;
  using phase_t = detail::system_core::phase_t;
  // Saturates: `courier::infinite` (or anything past the clock's range) waits without limit.
  const auto now = std::chrono::steady_clock::now();
  const bool forever = deadline >= std::chrono::steady_clock::time_point::max() - now;
  const auto until = forever ? std::chrono::steady_clock::time_point::max() : now + deadline;
  shutdown_report report;
  if (core_->manual) {
    auto live = [this] {
      std::lock_guard lock(core_->registry_mutex);
      return core_->live;
    };
    detail::run_scope scope(core_);  // this thread drives the system until the end
    while (live() > 0 && (forever || std::chrono::steady_clock::now() < until)) {
      core_->timers.fire_due_now();
      if (!core_->run_one(core_->cfg.throughput)) break;
    }
  }
  {
    std::unique_lock lock(core_->registry_mutex);
    if (!core_->manual) {
      auto none_left = [this] { return core_->live == 0; };
      if (forever)
        core_->registry_empty.wait(lock, none_left);
      else
        core_->registry_empty.wait_until(lock, until, none_left);
    }
    core_->phase.store(phase_t::finished, std::memory_order_release);  // from here on spawn throws
    for (detail::actor_base* a = core_->registry_head; a != nullptr; a = a->identity().registry_next)
      report.unfinished.push_back(std::string(a->name()) + "#" + std::to_string(a->id()));
  }
  report.clean = report.unfinished.empty();
  core_->timers.stop();  // fails the requests it timed: their continuations go to the host lane
  // The host lane closes last, once what is queued for it ran: the host's continuations run in
  // the host's loop (this thread, manual modes) or on a worker, never dropped.
  core_->lane->close_after_queued();
  if (core_->manual) {
    detail::run_scope scope(core_);
    while (!core_->lane->closed() && core_->run_one(core_->cfg.throughput)) {
    }
  } else {
    // Also after an unclean stop: the workers not stuck in a handler run the lane.
    const auto now_after = std::chrono::steady_clock::now();
    const auto left = until > now_after ? until - now_after : std::chrono::steady_clock::duration::zero();
    // At least a moment: continuations queued by the stop itself (actor_stopped) are quick.
    core_->lane->wait_closed(std::max<std::chrono::nanoseconds>(left, std::chrono::milliseconds(100)));
  }
  if (report.clean) {
    core_->stop_workers(true);
    // Actors stopped and workers gone: what is left in the queues are references to stopped actors.
    detail::actor_base* a = nullptr;
    while (core_->injection.try_dequeue(a)) {
    }
  } else {
    core_->stop_workers(false);
    std::lock_guard lock(detail::abandoned_mutex);
    if (detail::abandoned_cores == nullptr) detail::abandoned_cores = new std::vector<detail::system_core*>();
    detail::abandoned_cores->push_back(core_);
  }
  core_->hooks_enabled.store(false, std::memory_order_release);
  report_ = report;
  registry_.clear();  // after the actors stopped, so that no handler puts a name back
  return report;
}

bool system::finished() const noexcept {
  return core_->phase.load(std::memory_order_acquire) == detail::system_core::phase_t::finished;
}

bool system::run_one() {
  if (finished()) return false;
  detail::run_scope scope(core_);
  core_->timers.fire_due_now();
  return core_->run_one(1);
}

std::optional<step> system::run_step() {
  if (settings_.mode != scheduling::deterministic)
    throw std::logic_error("courier: system::run_step is for deterministic mode only");
  if (finished()) return std::nullopt;
  detail::actor_base* a = nullptr;
  if (!core_->injection.try_dequeue(a)) return std::nullopt;
  // One thread drives a deterministic system, so this thread is the mailbox's consumer here.
  detail::run_scope scope(core_);
  step s;
  s.actor = a->id();
  s.host_continuation = a == core_->lane;
  if (const detail::message_header* m = a->mailbox_.peek(); m != nullptr) {
    s.system_message = m->type >= detail::first_system_type;
    s.message_type = a->mailbox_.shared.ops->message_name(m->type);
  }
  if (a->resume(1) == detail::resume_result::reschedule) core_->injection.enqueue(a);  // as run_one
  return s;
}

run_report system::poll(std::size_t budget) {
  run_report report;
  if (finished()) return report;
  detail::run_scope scope(core_);
  core_->timers.fire_due_now();
  while (report.messages < budget) {
    const std::size_t left = budget - report.messages;
    const auto turn = static_cast<std::uint32_t>(std::min<std::size_t>(left, core_->cfg.throughput));
    std::uint32_t ran = 0;
    if (!core_->run_turn(turn, ran)) break;
    report.messages += ran;
  }
  report.more = core_->injection.size_approx() > 0;
  return report;
}

std::size_t system::run_until_idle() {
  if (finished()) return 0;
  detail::run_scope scope(core_);
  core_->timers.fire_due_now();
  std::size_t messages = 0;
  std::uint32_t ran = 0;
  while (core_->run_turn(core_->cfg.throughput, ran)) {
    messages += ran;
    ran = 0;
  }
  return messages;
}

std::size_t system::fire_due_timers() {
  if (finished() || !core_->timers.host_driven()) return 0;
  detail::run_scope scope(core_);
  return core_->timers.fire_due_now();
}

std::chrono::steady_clock::time_point system::next_deadline() const noexcept {
  const std::int64_t ns = core_->timers.host_driven() ? core_->timers.earliest_ns() : INT64_MAX;
  if (ns == INT64_MAX) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::nanoseconds(ns)));
}

std::size_t system::advance_time(timespan by) { return !finished() ? core_->timers.advance(by) : 0; }

int system::wake_fd() const noexcept { return core_->wake_epoll; }

std::uint64_t system::dead_letters() const noexcept { return core_->dead_letters.load(std::memory_order_relaxed); }

std::uint64_t system::continuation_failures() const noexcept {
  return core_->continuation_failures.load(std::memory_order_relaxed);
}

std::uint64_t system::unawaited_requests() const noexcept {
  return core_->unawaited_requests.load(std::memory_order_relaxed);
}

std::size_t system::live_actors() const noexcept {
  if (finished()) return 0;
  std::lock_guard lock(core_->registry_mutex);
  return core_->live;
}

std::size_t system::worker_count() const noexcept { return !finished() ? core_->workers.size() : 0; }
const config& system::settings() const noexcept { return settings_; }

}  // namespace courier
