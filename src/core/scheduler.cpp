#include "courier/config.hpp"

#include <linux/futex.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <ctime>
#include <thread>
#include <utility>

#include "system_core.hpp"

#if defined(__SANITIZE_THREAD__)
// moodycamel::ConcurrentQueue (the injection queue) publishes recycled blocks with relaxed loads
// plus std::atomic_thread_fence, which ThreadSanitizer does not model; it reports a race between
// an enqueue into a reused block and the dequeue that emptied it (upstream
// cameron314/concurrentqueue#254, #49: a known false positive). Only frames inside the queue are
// suppressed; races in Courier itself still fail. Weak, so a program's own suppressions win.
extern "C" __attribute__((weak)) const char* __tsan_default_suppressions() {
  return "race:moodycamel::ConcurrentQueue<*>::ImplicitProducer::enqueue\n"
         "race:moodycamel::ConcurrentQueue<*>::ImplicitProducer::dequeue\n";
}
#endif

namespace courier::detail {

// ---------------------------------------------------------------------------------------------
// futex

namespace {

long futex(const void* word, int op, std::uint32_t value, const timespec* timeout) noexcept {
  return syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

}  // namespace

bool futex_wait_for(const void* word, std::uint32_t expected, std::chrono::nanoseconds timeout) noexcept {
  if (timeout.count() <= 0) return false;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  return futex(word, FUTEX_WAIT_PRIVATE, expected, &ts) == 0;
}

void futex_wait(const void* word, std::uint32_t expected) noexcept {
  futex(word, FUTEX_WAIT_PRIVATE, expected, nullptr);
}
void futex_wake_all(const void* word) noexcept { futex(word, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr); }
void futex_wake_one(const void* word) noexcept { futex(word, FUTEX_WAKE_PRIVATE, 1, nullptr); }

// ---------------------------------------------------------------------------------------------
// Scheduling entry points used by the header templates.

bool on_worker_thread() noexcept { return this_worker != nullptr; }

bool is_manual(const system_core* core) noexcept { return core->manual; }

void poll_io_after_turn(const void* poller, std::uint64_t source) noexcept {
  if (worker* w = this_worker; w != nullptr) {
    w->poll_after_turn = true;
    w->answer_poller = poller;
    w->answer_source = source;
  }
}

bool drive_once(system_core* core) {
  run_scope scope(core, run_scope::kind::blocking_call);
  if (!scope.entered()) return false;  // the host's thread runs host code; this one only waits
  const bool fired = core->timers.fire_due_now() > 0;
  std::uint32_t ran = 0;
  bool did = core->run_turn(1, ran) || fired;
  // Sockets when nothing else is ready, and every 64th call while local work keeps coming (as a
  // busy worker does), so a wait that runs a chatty actor still hears its connection.
  if (!did || (++core->drive_turns & 63) == 0) did = core->poll_io_here() > 0 || did;
  return did;
}

bool wait_for_work(system_core* core, std::chrono::nanoseconds timeout) noexcept {
  const std::thread::id me = std::this_thread::get_id();
  if (core->wake_epoll < 0 || core->driver.load(std::memory_order_acquire) != me) return false;
  // Another thread inside a run call (the host handing over): drive_once could not enter, so
  // this thread must not skip its wait either.
  if (const std::thread::id in = core->active.load(std::memory_order_acquire); in != std::thread::id{} && in != me)
    return false;
  // No longer than the earliest timer: the caller's next drive_once fires it.
  const std::int64_t earliest = core->timers.earliest_ns();
  const std::int64_t now = steady_now_ns();
  std::int64_t ns = timeout.count();
  if (earliest != INT64_MAX) ns = std::min(ns, earliest - now);
  if (ns <= 0) return true;
  const timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  pollfd watch{core->wake_epoll, POLLIN, 0};
  ::ppoll(&watch, 1, &ts, nullptr);  // readable, timed out or interrupted: the caller looks again
  return true;
}

// ---------------------------------------------------------------------------------------------
// Plain threads that run (and drive) the actor their push woke

bool may_run_here(const system_core* core) noexcept {
  return this_worker == nullptr && current_actor == nullptr && !core->manual &&
         !core->stopping.load(std::memory_order_relaxed);
}

// The push gave this thread the right to run the actor (as it gives a worker that schedules it):
// running it here saves waking a worker, which on these hosts costs more than the turn. One turn
// only, so that a sender is not kept by what others queue behind it.
void woken_by_push(actor_base* actor, bool request) {
  if (actor == inline_call_target) {
    run_nested(actor);
  } else if (request && actor->drivable() && may_run_here(actor->core())) {
    if (actor->resume(actor->core()->cfg.throughput) == resume_result::reschedule) schedule(actor);
  } else {
    schedule(actor);
  }
}

void wake_holder(actor_base* actor) noexcept { actor->identity().ops->drive->signal(actor); }

// As the scheduler would run it, only here: the push that woke it is the claim, one message is
// the turn, and the handler that pushed goes on afterwards with its own actor and request.
void run_nested(actor_base* actor) {
  actor_base* const target = std::exchange(inline_call_target, nullptr);  // no deeper nesting
  message_header* const request = std::exchange(current_request, nullptr);
  struct restore {
    actor_base* target;
    message_header* request;
    ~restore() {
      inline_call_target = target;
      current_request = request;
    }
  } guard{target, request};
  if (actor->resume(1) == resume_result::reschedule) schedule(actor);
}

namespace {

std::int64_t io_spin_ns(const system_core* core) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(core->cfg.io_spin).count();
}

// Looking without sleeping pays only while the CPU would otherwise go idle. A sched_yield that
// comes back late means another thread held the CPU meanwhile (not the peer: its turn takes a few
// microseconds): the CPU is contended, a wake-up there costs little (the woken thread preempts),
// and every further yield would wait out another thread's whole time slice (milliseconds: under a
// CPU-bound neighbour, calls ran 20-30x slower). Then this thread sleeps at once for its next
// waits, twice as many each time it happens again, and tries looking again after them.
struct spin_budget {
  static constexpr std::int64_t late_yield_ns = 50'000;
  std::uint32_t skip = 0;      // waits left that sleep at once
  std::uint32_t backoff = 16;  // how many the next late yield sets

  bool allowed() noexcept {
    if (skip == 0) return true;
    --skip;
    return false;
  }
  /// Yields; false (and no more looking for a while) when the yield came back late. `now` is a
  /// clock reading taken shortly before (the caller has one: a clock read is not free on every
  /// host), and is the reading after the yield on return.
  bool yield(std::int64_t& now) noexcept {
    const std::int64_t before = now;
    ::sched_yield();
    now = steady_now_ns();
    if (now - before <= late_yield_ns) return true;
    skip = backoff;
    backoff = backoff < 4096 ? backoff * 2 : backoff;
    return false;
  }
  void answered() noexcept { backoff = 16; }  // looking paid: the CPU is not contended now

  // Where the peer shares this CPU, the answer cannot come before this thread gives the CPU up:
  // the first look after a write always misses, a system call for nothing on every round trip.
  // After a few waits whose first look missed, the waits yield first; one wait in sixteen looks
  // first again, to see whether answers now come while this thread runs (a peer on another
  // CPU, calls in flight), and looking first pays again.
  static constexpr std::uint32_t misses_before_yielding_first = 4;
  std::uint32_t first_look_misses = 0;
  std::uint32_t waits = 0;

  bool yield_first() noexcept { return first_look_misses >= misses_before_yielding_first && (++waits & 15) != 0; }
  /// What the first look of a wait that looked first found.
  void first_look(bool found) noexcept {
    if (found)
      first_look_misses = 0;
    else if (first_look_misses < misses_before_yielding_first)
      ++first_look_misses;
  }

  // A plain thread that waits on one socket: where the answer was there after every yield lately,
  // the socket is read after the yield without a look first (one system call fewer per call); a
  // read that finds nothing sends it back to looking.
  bool answer_follows_yield = false;
  void looked_after_yield(bool readable) noexcept { answer_follows_yield = readable; }
  void read_unlooked(bool answered) noexcept {
    if (!answered) answer_follows_yield = false;
  }
};

thread_local spin_budget this_thread_spin;

void drain_signal(int fd) noexcept {
  std::uint64_t value = 0;
  [[maybe_unused]] const ssize_t n = ::read(fd, &value, sizeof value);
}

}  // namespace

// What the read of a turn that await_answer started by a report found: whether reporting without
// a poll still pays.
void note_io_read(bool found) noexcept {
  if (worker* w = this_worker; w != nullptr && w->reported_unlooked) {
    w->reported_unlooked = false;
    this_thread_spin.read_unlooked(found);
  }
}

// libmsgque's END_AND_WAIT and Go's netpoller: the thread that waits for a reply reads it itself,
// so the reply costs the wake-up of that thread alone (a raw client's), not a worker's and then
// the caller's. Between turns the actor is held (see mailbox.hpp): no worker runs it and its
// socket is out of the poller, and whatever is pushed to it meanwhile (other callers' calls, its
// timers, a stop) signals this thread, which runs it. Every reply the turns read is delivered, to
// other callers too, as a worker's turn would. The actor goes back to the workers when this
// caller's reply came or its deadline passed.
void drive_while_waiting(actor_base* actor, const std::atomic<std::uint32_t>& ready, std::int64_t deadline_ns) {
  system_core* core = actor->core();
  const drive_ops* drive = actor->identity().ops->drive;
  const std::uint32_t budget = core->cfg.throughput;
  bool had_socket = false;  // once its stream has ended, the signal alone is waited on
  // Held (or running): no other thread runs the actor, so its descriptor is ours to hand back.
  // Released whether or not this loop took it: the actor may hold itself from its first turn.
  auto let_go = [&] {
    drive->release(actor);
    if (!actor->release_hold()) schedule(actor);  // pushed to meanwhile: the workers take it from here
  };
  bool unlooked = false;  // this round's turn read the socket without a look first
  for (;;) {
    hold_on_idle = actor;
    const resume_result r = actor->resume(budget);
    hold_on_idle = nullptr;
    if (r == resume_result::stopped) return;  // its calls failed as it stopped, this one too
    const bool answered = ready.load(std::memory_order_acquire) == 1;
    if (std::exchange(unlooked, false)) this_thread_spin.read_unlooked(answered);
    std::int64_t now = answered ? 0 : steady_now_ns();
    const bool done = answered || now >= deadline_ns;
    if (r == resume_result::reschedule) {
      if (!done) continue;
      drive->release(actor);
      schedule(actor);
      return;
    }
    if (done) {
      let_go();
      return;
    }
    // Asked every round: a stream that has ended stays readable (its hang-up), and polling it
    // would spin this thread while the actor waits for a message (a pipe server's exit).
    const auto [reading, signal] = drive->hold(actor);
    if (signal < 0 || (reading < 0 && !had_socket)) {  // nothing would wake this thread for a push
      let_go();
      return;
    }
    had_socket = had_socket || reading >= 0;
    pollfd watch[2] = {{reading, POLLIN, 0}, {signal, POLLIN, 0}};  // poll skips a negative descriptor
    // Looks without sleeping for config::io_spin, yielding the CPU between looks, as a worker
    // does after a write (the answer may be a few microseconds away; a sleep costs a wake-up).
    const std::int64_t spin_until = this_thread_spin.allowed() ? now + io_spin_ns(core) : 0;
    int got = 0;
    const bool yielded_first = spin_until != 0 && this_thread_spin.yield_first() && this_thread_spin.yield(now);
    if (yielded_first && reading >= 0 && this_thread_spin.answer_follows_yield) {
      // A push meanwhile needs no look either: the turn runs the mailbox, and the signal stays
      // readable for the next look.
      actor->take_hold();
      drive->readable(actor);
      unlooked = true;
      continue;
    }
    for (int look = 0;; ++look) {
      got = ::poll(watch, 2, 0);
      if (look == 0) {
        if (yielded_first)
          this_thread_spin.looked_after_yield((watch[0].revents & POLLIN) != 0);
        else
          this_thread_spin.first_look(got != 0);
      }
      if (got != 0) {
        this_thread_spin.answered();
        break;
      }
      if (now >= spin_until || !this_thread_spin.yield(now)) break;
    }
    while (got == 0) {
      const std::int64_t left = deadline_ns - steady_now_ns();
      if (left <= 0) break;
      const timespec ts{static_cast<time_t>(left / 1'000'000'000), static_cast<long>(left % 1'000'000'000)};
      got = ::ppoll(watch, 2, &ts, nullptr);
      if (got < 0 && errno != EINTR) break;
      if (got < 0) got = 0;
    }
    if (got <= 0) {  // the deadline passed
      let_go();
      return;
    }
    actor->take_hold();
    if ((watch[1].revents & POLLIN) != 0) drain_signal(signal);
    if ((watch[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) drive->readable(actor);
  }
}

run_scope::run_scope(system_core* core, kind k) noexcept : core_(core), blocking_(k == kind::blocking_call) {
  const std::thread::id me = std::this_thread::get_id();
  if (core->active.load(std::memory_order_acquire) != me) {  // not nested in a scope of this thread
    if (blocking_) {
      if (core->cfg.mode == scheduling::embedded && core->driver.load(std::memory_order_acquire) != me) return;
      std::thread::id none{};
      if (!core->active.compare_exchange_strong(none, me, std::memory_order_acq_rel)) return;
    } else {
      if (core->driver.load(std::memory_order_relaxed) != me) core->driver.store(me, std::memory_order_release);
      // A blocking call that entered as the driver just before runs one message: wait it out.
      for (std::thread::id none{}; !core->active.compare_exchange_weak(none, me, std::memory_order_acq_rel); none = {})
        std::this_thread::yield();
    }
    owner_ = true;
  }
  entered_ = true;
  previous_ = running_core;
  running_core = core;
  earliest_on_entry_ = core->timers.earliest_ns();
  core->drain_wake_fd();
  // The host's run calls look at the sockets first: wake_fd may be readable for them alone.
  if (owner_ && !blocking_) core->poll_io_here();
}

run_scope::~run_scope() {
  if (!entered_) return;
  running_core = previous_;
  // Level-triggered: readable now exactly when work is ready. Drain first, then look: a producer
  // that enqueues after the drain finds the flag clear and signals again.
  core_->drain_wake_fd();
  const bool new_deadline = blocking_ && owner_ && core_->timers.earliest_ns() < earliest_on_entry_;
  if (core_->injection.size_approx() > 0 || new_deadline) core_->signal_fd();
  if (owner_) core_->active.store(std::thread::id{}, std::memory_order_release);
}

void schedule(actor_base* actor) {
  system_core* core = actor->core();
  if (worker* w = this_worker; w != nullptr && w->core == core) {
    if (w->next != nullptr) w->push_local(w->next);
    w->next = actor;
    return;
  }
  core->injection.enqueue(actor);
  if (!core->manual)
    core->wake_one();
  else if (running_core != core)  // inside a run call, its scope signals on the way out if need be
    core->signal_fd();
}

// ---------------------------------------------------------------------------------------------
// Workers

void worker::push_local(actor_base* a) {
  if (!local.push(a)) core->injection.enqueue(a);
  // Someone idle could take this over; a worker that is already searching will find it.
  if (core->searching.load(std::memory_order_relaxed) == 0) core->wake_one();
}

void worker::requeue(actor_base* a) {
  core->injection.enqueue(a);
  if (core->searching.load(std::memory_order_relaxed) == 0) core->wake_one();
}

actor_base* worker::find_local_work(moodycamel::ConsumerToken& token) {
  actor_base* a = nullptr;
  // Look at the shared queue now and then even when busy, so injected actors are not starved.
  if (++tick % 61 == 0 && core->injection.try_dequeue(token, a)) return a;
  if (next != nullptr) {
    a = std::exchange(next, nullptr);
    // A ping-pong pair could keep the next slot forever; after a streak it goes to the back of
    // the shared queue, behind everything that waits here.
    if (++next_streak <= 64) return a;
    next_streak = 0;
    requeue(a);
  } else {
    next_streak = 0;
  }
  // Newest first: depth-first through spawn trees. Actors that used up a turn or a streak are
  // requeued at the back of the shared queue instead, so they cannot keep the worker from the
  // actors below them.
  if ((a = local.pop_newest()) != nullptr) return a;
  if (core->injection.try_dequeue(token, a)) return a;
  return nullptr;
}

actor_base* worker::search(moodycamel::ConsumerToken& token, std::uint32_t rounds) {
  const auto count = static_cast<unsigned>(core->workers.size());
  actor_base* a = nullptr;
  for (std::uint32_t round = 0; round < rounds; ++round) {
    if (core->injection.try_dequeue(token, a)) return a;
    steal_seed = steal_seed * 1664525u + 1013904223u;
    for (unsigned i = 0, start = steal_seed % count; i < count; ++i) {
      worker& victim = *core->workers[(start + i) % count];
      if (&victim == this) continue;
      if ((a = victim.local.pop()) != nullptr) return a;
    }
    if (core->stopping.load(std::memory_order_relaxed)) return nullptr;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  return nullptr;
}

// How long a worker parked on its futex (another has the I/O poller) sleeps before it looks
// whether it may take the seat: the longest a socket goes unwatched while the worker that had
// the poller runs a long turn (a handler that computes, or blocks). It costs an idle system one
// wake-up per parked worker every period while a node is attached.
constexpr std::int64_t poller_vacancy_ns = 10'000'000;

void worker::park() {
  const std::uint64_t bit = std::uint64_t{1} << index;
  const std::uint32_t seen = wake_word.load(std::memory_order_acquire);
  // We publish "idle" with an RMW, then look for work; a producer publishes work, then reads
  // idle_mask with an RMW too. RMWs on one atomic are totally ordered, so either the producer
  // sees our bit or we see its work (no fences needed, which ThreadSanitizer cannot model).
  core->idle_mask.fetch_or(bit, std::memory_order_seq_cst);
  if (!core->has_stealable_work() && !core->stopping.load(std::memory_order_acquire) && !timers.has_cancels()) {
    // Pending time-outs bound the sleep: this worker's wheel has no other thread to serve it.
    std::int64_t hint = timers.wait_hint();
    if (hint != 0 && !park_in_poller(seen, hint)) {
      // Another worker has the poller (it waits in it, or looks at it between turns), and may
      // leave it for a long turn: sleep for a while only, then look whether the seat is free.
      if (core->poller.load(std::memory_order_relaxed) != nullptr && (hint < 0 || hint > poller_vacancy_ns))
        hint = poller_vacancy_ns;
      if (hint < 0)
        futex_wait(&wake_word, seen);
      else
        futex_wait_for(&wake_word, seen, std::chrono::nanoseconds(hint));
    }
  }
  core->idle_mask.fetch_and(~bit, std::memory_order_acq_rel);
}

// Parks in the I/O poller instead of on the futex, when there is one and no other worker waits in
// it: the socket's readiness then wakes this thread, and the connection it makes ready is
// scheduled here (schedule() from a worker uses its own next slot), not on a worker that must be
// woken in turn. A producer bumps wake_word, then reads polling_worker; we publish
// polling_worker, then read wake_word (all seq_cst): one of us sees the other, so a wake-up that
// comes between our look for work and the wait is never lost.
bool worker::park_in_poller(std::uint32_t seen, std::int64_t hint_ns) {
  if (core->poller.load(std::memory_order_relaxed) == nullptr) return false;
  // Another worker is looking at the poller: it dispatches what arrives, and parks in it itself
  // when its look ends, so this one sleeps where arrivals do not wake it.
  if (core->answer_spinners.load(std::memory_order_relaxed) > 0) return false;
  core->pollers_inside.fetch_add(1, std::memory_order_seq_cst);
  const io_poller* p = core->poller.load(std::memory_order_seq_cst);
  int none = -1;
  const bool mine = p != nullptr && core->polling_worker.compare_exchange_strong(none, static_cast<int>(index),
                                                                                 std::memory_order_seq_cst);
  if (mine) {
    if (wake_word.load(std::memory_order_seq_cst) == seen) {
      // Round a timer's hint up: waking before the deadline only means one more round.
      const int timeout_ms = hint_ns < 0 ? -1 : static_cast<int>((hint_ns + 999'999) / 1'000'000);
      p->poll(p->context, timeout_ms);
    }
    core->polling_worker.store(-1, std::memory_order_seq_cst);
  }
  core->pollers_inside.fetch_sub(1, std::memory_order_seq_cst);
  return mine;
}

// A busy worker looks at the poller now and then without waiting, so sockets are served while
// every worker has work (Go's scheduler does the same between goroutines).
std::size_t worker::poll_io_now() {
  writes_unlooked = 0;
  if (core->poller.load(std::memory_order_relaxed) == nullptr) return 0;
  core->pollers_inside.fetch_add(1, std::memory_order_seq_cst);
  std::size_t dispatched = 0;
  if (const io_poller* p = core->poller.load(std::memory_order_seq_cst)) dispatched = p->poll(p->context, 0);
  core->pollers_inside.fetch_sub(1, std::memory_order_seq_cst);
  return dispatched;
}

// Reports the socket written to last readable, without a poll (await_answer says when). Counted
// among the poller's users, as poll_io_now is: a detach waits for it before the poller goes.
bool worker::report_answer_source() {
  core->pollers_inside.fetch_add(1, std::memory_order_seq_cst);
  const io_poller* p = core->poller.load(std::memory_order_seq_cst);
  const bool reported =
      p != nullptr && p->report != nullptr && p->context == answer_poller && p->report(p->context, answer_source) > 0;
  core->pollers_inside.fetch_sub(1, std::memory_order_seq_cst);
  if (reported) reported_unlooked = true;
  return reported;
}

// A worker out of work shortly after it wrote to a socket looks at the poller without waiting
// until config::io_spin has passed since the write, yielding its CPU between looks (to the peer,
// when both share it). Parking would make the answer pay a wake-up, and on a virtual machine
// waking an idle CPU can cost more than the whole round trip.
bool worker::await_answer() {
  if (answer_due_until == 0) return false;
  if (!this_thread_spin.allowed()) {
    answer_due_until = 0;
    return poll_io_now() > 0;  // one look, as a worker that just wrote takes before it parks
  }
  core->answer_spinners.fetch_add(1, std::memory_order_relaxed);
  struct leave {
    std::atomic<int>& spinners;
    ~leave() { spinners.fetch_sub(1, std::memory_order_relaxed); }
  } counted{core->answer_spinners};
  std::int64_t now = steady_now_ns();
  const bool yielded_first = this_thread_spin.yield_first() && this_thread_spin.yield(now);
  // As a plain thread that waits on one socket does: where the answer was there after every yield
  // lately, the socket written to last is reported readable without a poll (its turn's read
  // tells, note_io_read); one wait in sixteen polls first all the same, and hears every socket.
  if (yielded_first && this_thread_spin.answer_follows_yield && answer_source != 0 && now < answer_due_until &&
      report_answer_source())
    return true;
  bool after_yield = yielded_first;
  for (bool first = !yielded_first;; first = false) {
    const bool found = poll_io_now() > 0;
    if (first) this_thread_spin.first_look(found);
    if (std::exchange(after_yield, false)) this_thread_spin.looked_after_yield(found);
    if (found) {
      this_thread_spin.answered();
      return true;
    }
    if (core->has_stealable_work() || next != nullptr) return true;
    if (now >= answer_due_until || core->stopping.load(std::memory_order_relaxed)) break;
    if (!this_thread_spin.yield(now)) break;
  }
  answer_due_until = 0;
  return false;
}

// A turn wrote to a socket: the answer is awaited until io_spin from now (with nothing else to
// run, await_answer looks, first thing).
constexpr std::uint32_t writes_per_look = 8;
// With other work to run first, it is looked for after every eighth such turn only: under many
// busy connections one look per turn found one socket or none, a system call for each call the
// server answered (a server under 10,000 clients looked once per call, a bare epoll server once
// per sixteen); looking less often finds what came meanwhile for all of them at once.
void worker::after_writing_turn() {
  poll_after_turn = false;
  if (io_spin_ns > 0) answer_due_until = steady_now_ns() + io_spin_ns;
  if (io_spin_ns <= 0) {
    poll_io_now();
    return;
  }
  const bool other_work = next != nullptr || !local.empty() || core->injection.size_approx() > 0;
  if (!other_work || ++writes_unlooked < writes_per_look) return;
  // A local queue half full has work enough: what a look would find now goes behind it, and
  // past its capacity to the shared queue, which this worker takes from only now and then (a
  // connection put there waited many times longer than the others: the tail of the latencies).
  if (local.size() < run_queue::capacity / 2) poll_io_now();
}

void worker::run() {
  this_worker = this;
  // The worker's first chunk now, at start-up: an actor that first runs here later (stolen, or
  // woken from another thread) then finds slots of every size class without a heap call.
  pool::reserve_thread_chunk();
  core->workers_ready.fetch_add(1, std::memory_order_release);
  moodycamel::ConsumerToken token(core->injection);
  const std::uint32_t budget = core->cfg.throughput;
  for (;;) {
    // Time-outs are checked every few turns while busy (a clock read is not free) and before
    // every search for work.
    if ((tick & 63) == 0) {
      if (timers.needs_poll()) timers.poll();
      poll_io_now();
    }
    actor_base* a = find_local_work(token);
    if (a == nullptr && timers.needs_poll()) {
      timers.poll();
      a = find_local_work(token);
    }
    if (a == nullptr) {
      core->searching.fetch_add(1, std::memory_order_acq_rel);
      // Waiting for an answer, one round of looking will do: await_answer looks on, and yields
      // the CPU between looks where spinning would keep it from the peer that shares it.
      a = search(token, answer_due_until != 0 ? 1 : core->cfg.spin_rounds);
      core->searching.fetch_sub(1, std::memory_order_acq_rel);
      if (a == nullptr) {
        if (core->stopping.load(std::memory_order_acquire)) break;
        if (await_answer()) continue;
        park();
        continue;
      }
    }
    resume_result r = a->resume(budget);
    if (poll_after_turn) after_writing_turn();
    // An actor that used up its turn while nothing else waits here gets another turn at once:
    // queueing it would only wake an idle worker to steal it back and forth.
    while (r == resume_result::reschedule && next == nullptr && local.empty() && core->injection.size_approx() == 0) {
      if ((++tick & 63) == 0 && timers.needs_poll()) {
        timers.poll();  // may schedule a time-out's requester: then the loop ends
        continue;
      }
      r = a->resume(budget);
      if (poll_after_turn) after_writing_turn();
    }
    if (r == resume_result::reschedule) requeue(a);
  }
  timers.close();
  this_worker = nullptr;
}

bool system_core::has_stealable_work() const noexcept {
  if (injection.size_approx() > 0) return true;
  for (const auto& w : workers)
    if (!w->local.empty()) return true;
  return false;
}

void system_core::wake_one() noexcept {
  std::uint64_t mask = idle_mask.fetch_or(0, std::memory_order_seq_cst);  // see worker::park
  while (mask != 0) {
    const int index = std::countr_zero(mask);
    const std::uint64_t bit = std::uint64_t{1} << index;
    if (idle_mask.compare_exchange_weak(mask, mask & ~bit, std::memory_order_acq_rel, std::memory_order_relaxed)) {
      worker& w = *workers[static_cast<std::size_t>(index)];
      w.wake_word.fetch_add(1, std::memory_order_seq_cst);
      if (polling_worker.load(std::memory_order_seq_cst) == index)
        wake_poller();
      else
        futex_wake_one(&w.wake_word);
      return;
    }
  }
}

void system_core::wake_poller() noexcept {
  pollers_inside.fetch_add(1, std::memory_order_seq_cst);
  if (const io_poller* p = poller.load(std::memory_order_seq_cst)) p->wake(p->context);
  pollers_inside.fetch_sub(1, std::memory_order_seq_cst);
}

bool attach_io_poller(system_core* core, const io_poller* poller) noexcept {
  if (core->cfg.mode == scheduling::deterministic) {
    // The test's run calls poll it without waiting: a socket is read when the test runs the
    // system, as a message is, so a conversation over a socket pair replays the same every time.
    const io_poller* none = nullptr;
    return core->poller.compare_exchange_strong(none, poller, std::memory_order_seq_cst);
  }
  if (core->manual) {
    // Embedded: the poller's descriptor joins wake_fd, and the driving thread polls it in its run
    // calls. A host told through on_wake has no descriptor to join.
    if (core->wake_epoll < 0 || poller->fd < 0) return false;
    const io_poller* none = nullptr;
    if (!core->poller.compare_exchange_strong(none, poller, std::memory_order_seq_cst)) return false;
    epoll_event watch{};
    watch.events = EPOLLIN;  // level-triggered: readable while the reactor has events to hand out
    if (::epoll_ctl(core->wake_epoll, EPOLL_CTL_ADD, poller->fd, &watch) < 0) {
      core->poller.store(nullptr, std::memory_order_seq_cst);
      return false;
    }
    return true;
  }
  const io_poller* none = nullptr;
  if (!core->poller.compare_exchange_strong(none, poller, std::memory_order_seq_cst)) return false;
  // Workers already parked on their futex would never look at the poller: wake them all, so
  // that one parks in it.
  for (auto& w : core->workers) {
    w->wake_word.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&w->wake_word);
  }
  return true;
}

void detach_io_poller(system_core* core) noexcept {
  const io_poller* p = core->poller.exchange(nullptr, std::memory_order_seq_cst);
  if (p == nullptr) return;
  if (core->manual && core->wake_epoll >= 0) ::epoll_ctl(core->wake_epoll, EPOLL_CTL_DEL, p->fd, nullptr);
  // A worker that counted itself in before the exchange may still be inside (or about to enter)
  // p->poll: wake it until none is left. One that counts itself in later sees no poller.
  while (core->pollers_inside.load(std::memory_order_seq_cst) != 0) {
    p->wake(p->context);
    std::this_thread::yield();
  }
}

void system_core::signal_fd() noexcept {
  if (fd_signaled.exchange(true, std::memory_order_acq_rel)) return;  // once per run call
  if (cfg.on_wake != nullptr && hooks_enabled.load(std::memory_order_acquire)) cfg.on_wake(cfg.wake_user_data);
  if (event_fd < 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(event_fd, &one, sizeof one);
}

std::size_t system_core::poll_io_here() noexcept {
  if (poller.load(std::memory_order_acquire) == nullptr) return 0;  // no node: one load
  // Counted in, as the workers are: detach_io_poller waits until no one is inside.
  pollers_inside.fetch_add(1, std::memory_order_seq_cst);
  std::size_t dispatched = 0;
  if (const io_poller* p = poller.load(std::memory_order_seq_cst)) dispatched = p->poll(p->context, 0);
  pollers_inside.fetch_sub(1, std::memory_order_seq_cst);
  return dispatched;
}

void system_core::drain_wake_fd() noexcept {
  if (!fd_signaled.load(std::memory_order_acquire)) return;  // not readable: no system call
  // Drain first, then re-arm: a producer that signals in between writes again (a spare wake-up),
  // where re-arming first could let its write be drained here and its next signal be skipped.
  if (event_fd >= 0) {
    std::uint64_t value = 0;
    // Nothing to read: the producer that set the flag has not written yet. Its write is on the
    // way; clearing the flag now would leave the descriptor readable with the flag clear, and
    // no later drain would read it (a level-triggered host would spin). Leave both to the next.
    if (::read(event_fd, &value, sizeof value) != static_cast<ssize_t>(sizeof value)) return;
  }
  fd_signaled.exchange(false, std::memory_order_acq_rel);
}

void system_core::start_workers() {
  std::size_t n = cfg.workers != 0 ? cfg.workers : std::thread::hardware_concurrency();
  if (n == 0) n = 1;
  if (n > 64) n = 64;
  workers.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto w = std::make_unique<worker>();
    w->core = this;
    w->index = static_cast<unsigned>(i);
    w->steal_seed = static_cast<std::uint32_t>(i * 2654435761u + 1);
    w->io_spin_ns = io_spin_ns(this);
    workers.push_back(std::move(w));
  }
  for (auto& w : workers) w->thread = std::thread([p = w.get()] { p->run(); });
  // Each worker takes its first pool chunk as it starts; waiting for that here makes "nothing is
  // allocated after the system is built" hold from the first message on, not only once the
  // operating system got round to starting every thread (on a loaded host that can take long).
  while (workers_ready.load(std::memory_order_acquire) < workers.size()) std::this_thread::yield();
}

void system_core::stop_workers(bool join) {
  stopping.store(true, std::memory_order_seq_cst);
  for (auto& w : workers) {
    w->wake_word.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&w->wake_word);
  }
  wake_poller();
  for (auto& w : workers) {
    if (!w->thread.joinable()) continue;
    if (join)
      w->thread.join();
    else
      w->thread.detach();
  }
}

bool system_core::run_turn(std::uint32_t budget, std::uint32_t& ran) {
  actor_base* a = nullptr;
  if (!injection.try_dequeue(a)) return false;
  // Still has work: back to the queue; the run call's scope signals wake_fd on its way out.
  if (a->resume(budget, ran) == resume_result::reschedule) injection.enqueue(a);
  return true;
}

}  // namespace courier::detail
