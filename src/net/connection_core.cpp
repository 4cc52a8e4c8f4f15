// The connection actor's compiled core: the turn protocol, back-pressure, the calls out that are
// not typed, routing, sessions and the plain-thread driving hooks (see connection_core.hpp).
#include "courier/net/detail/connection_core.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "courier/net/detail/node_core.hpp"
#include "courier/wire/encoder.hpp"

namespace courier::net::detail {

courier::error error_from_wire(std::uint32_t code, std::string_view text) {
  std::string why(text);
  if (code != 0 && code < 256)
    return courier::error(wire::make_error_code(static_cast<wire::errc>(code)), std::move(why));
  return courier::error(std::error_code(static_cast<int>(code), courier_category()), std::move(why));
}

std::uint32_t error_to_wire(const courier::error& e) noexcept {
  if (e.code.category() == courier_category() || e.code.category() == wire::wire_category())
    return static_cast<std::uint32_t>(e.code.value());
  return static_cast<std::uint32_t>(errc::handler_failed);
}

namespace {
constexpr std::uint32_t readable_events = EPOLLIN | EPOLLRDHUP | EPOLLET;
}  // namespace

void write_error_frame(wire_stream& c, std::uint64_t tid, std::uint64_t ctx, courier::token tok,
                       const courier::error& e) {
  std::string text = e.text.empty() ? e.code.message() : e.text;
  if (e.code.category() != courier_category() && e.code.category() != wire::wire_category())
    text = e.code.message() + (e.text.empty() ? "" : ": " + e.text);
  (void)wire::encode_error(c.frames(), tid, ctx, error_to_wire(e), text, tok);
}

reactor_registration::reactor_registration(courier::detail::actor_base* actor, std::uint16_t type, poster post) noexcept
    : actor_(actor), type_(type), post_(post) {
  actor_->add_ref();
}

reactor_registration::~reactor_registration() { actor_->release(); }

void reactor_registration::on_io(std::uint32_t epoll_events) noexcept {
  if (!alive.load(std::memory_order_acquire)) return;
  // seq_cst, with rearm(): an event whose bits the turn's exchange missed finds `queued` clear.
  events.fetch_or(epoll_events, std::memory_order_seq_cst);
  if (!queued.exchange(true, std::memory_order_seq_cst)) {
    try {
      post_(actor_, type_);
    } catch (...) {
      queued.store(false, std::memory_order_release);  // out of memory: the next readiness retries
    }
  }
}

connection_core::connection_core(std::shared_ptr<node_core> node, socket sock, std::optional<child_process> child,
                                 const connection_config& cfg, std::shared_ptr<handshake_outcome> opened,
                                 std::shared_ptr<const service_table> services)
    : node_(std::move(node)),
      stream_(std::move(sock), wire::role::initiator, cfg, node_->core()),
      calls_(cfg.max_in_flight),
      router_(std::move(services)),
      child_(std::move(child)),
      opened_(std::move(opened)) {
  // The connecting side's own threads call and wait on it, so its driver's eventfd is made now,
  // with the socket, rather than at whichever call first finds the connection idle: the process's
  // descriptors then stay as they were from the connect to the close.
  (void)driver_signal_fd();
}

connection_core::connection_core(std::shared_ptr<node_core> node, socket sock, const connection_config& cfg,
                                 std::shared_ptr<listener_share> share, std::shared_ptr<const service_table> services,
                                 context_ref context, std::optional<session_start> session)
    : node_(std::move(node)),
      share_(std::move(share)),
      stream_(std::move(sock), wire::role::acceptor, cfg, node_->core(), share_ ? share_->memory : nullptr),
      calls_(cfg.max_in_flight),
      router_(std::move(services)),
      context_(std::move(context)),
      session_start_(std::move(session)) {
  if (share_) share_->connections.fetch_add(1, std::memory_order_acq_rel);
}

connection_core::~connection_core() {
  detach();
  leave_share();
  // Pushes hold a reference to the actor, so none can signal once it is being destroyed (a push
  // that found it held may still signal after it stopped: the eventfd lives as long as the actor).
  if (const int fd = driver_signal_.load(std::memory_order_relaxed); fd >= 0) ::close(fd);
}

// Counted among its listener's connections from construction until it stops (or is destroyed
// without having started): what is still referenced after its stop (a served call's pending
// reply) no longer counts against max_connections.
void connection_core::leave_share() noexcept {
  if (share_) share_->connections.fetch_sub(1, std::memory_order_acq_rel);
  share_.reset();
}

void connection_core::start(const shell_binding& shell) {
  shell_ = shell;
  courier::detail::actor_base* const actor = shell_.actor;
  bounded_mailbox_ = actor->mailbox_capacity() != 0;
  link_ = std::make_unique<reactor_registration>(actor, shell_.io_ready, &post_turn_message<io_ready>);
  link_->fd = stream_.fd();
  link_->warm_at = actor;
  link_->warm_bytes = shell_.object_bytes;
  node_->enter(actor, shell_.close, &counters_, shell_.context_map);
  stream_.start();
  // Edge-triggered: one wake-up per arrival; the actor reads until a read comes back short (the
  // next arrival is another edge), so a socket that stays readable does not keep its poller
  // spinning while it waits. EPOLLOUT joins only while output waits (flush). A plain thread that
  // runs this first turn and will drive the connection (drive_while_waiting) holds it from the
  // start: the peer's first bytes (a server writes its handshake as it accepts) wake no reactor.
  held_ = courier::detail::hold_on_idle == actor;
  if (auto ok = node_->io().add(stream_.fd(), held_ ? std::uint32_t{EPOLLET} : readable_events, link_.get()); !ok)
    stream_.fail(courier::error(errc::connection_lost, "cannot watch the socket: " + ok.err().text));
  else
    link_->tag = node_->io().registration_tag(stream_.fd());
  watch_child();
  start_session();
  last_call_ = stream_.now();
  read();
}

void connection_core::stop() {
  clock_.cancel();  // the timer holds a ref to this actor until it ends
  release_tick_.cancel();
  child_wait_.cancel();
  const bool orderly = stream_.engine().state() == wire::engine_state::closed;
  fail_all(stream_.finished() ? why() : courier::error(errc::connection_lost, "the connection was stopped"));
  for (response_promise<unit>& p : parent_closes_) {
    if (orderly)
      p.deliver(unit{});
    else
      p.fail(stream_.finished() ? why() : courier::error(errc::connection_lost, "the connection was stopped"));
  }
  parent_closes_.clear();
  if (stream_.open() && !stream_.finished()) {
    stream_.close(stream_.engine().side() == wire::role::initiator ? "client stopped" : "server stopped");
    flush();
  }
  unwatch_child();
  detach();
  reap_child();
  context_ = {};
  for (auto& [id, child] : child_contexts_) (void)child.close();
  child_contexts_.clear();
  end_session();
}

void connection_core::detach() noexcept {
  if (!link_) return;
  link_->alive.store(false, std::memory_order_release);
  node_->io().remove(link_->fd);  // waits for an on_io running on another thread
  link_.reset();
  stream_.close_socket();  // the peer sees the end now, not when the last reference goes
  leave_share();
  node_->leave(shell_.actor);
}

// Clears the queued flag (readiness after this point queues a new io_ready) and hands the
// readiness reported so far to the connection (a hang-up means: read on to the end of file).
void connection_core::rearm() noexcept {
  link_->queued.store(false, std::memory_order_seq_cst);
  stream_.note_readiness(link_->events.exchange(0, std::memory_order_seq_cst));
}

void connection_core::on_io_ready() {
  rearm();
  const std::uint64_t bytes = stream_.stats().bytes_in;
  read();
  courier::detail::note_io_read(stream_.stats().bytes_in != bytes);
}

void connection_core::on_read_retry() {
  retry_pending_ = false;
  read();
}

void connection_core::on_tick() {
  if (!clock_.active()) clock_due_ = std::chrono::steady_clock::time_point::max();  // else a release_tick_
  // Bytes that wait in the socket arrived before this turn: they are read before any time-out is
  // judged, so a connection slow to get to its input (a busy worker, a stopped process) does not
  // charge its own delay to the peer (a handshake that came in time, a pong to our ping).
  if (reading() && !stream_.finished()) read();
  if (idle_due() <= stream_.now()) {
    idle_ended_ = true;
    stream_.close("idle for " + std::to_string(stream_.config().idle_timeout.count()) + " ms");
  }
  // While paused for back-pressure (the peer does not read what we send, or the served actor has
  // too many calls), or while every receive block is held, we do not read, so the peer's bytes
  // (its pongs too) wait in the socket: silence then says nothing about the peer, and the
  // keepalive waits with us. Output the peer does not read for the dead-peer time ends the
  // connection all the same (wire_stream::tick).
  stream_.tick(reading());
  if (stream_.finished()) lose();
}

// The node is stopping: an orderly close (docs/protocol.md section 11). Calls received before it
// are still answered and the peer still answers ours; the engine refuses later calls with 260 and
// ours fail at the call; the connection ends once the close completes, or when the node's grace
// runs out.
void connection_core::on_close_request() {
  stream_.close(stream_.engine().side() == wire::role::initiator ? "client stopping" : "server stopping");
  if (stream_.finished()) lose();
}

void connection_core::on_child_exited() {
  unwatch_child();
  reap_child();
  if (lost_ && !stopped_) finish_lose();
}

void connection_core::turn_end() {
  if (release_pending_ && courier::detail::hold_on_idle != shell_.actor) release_now();
  if (call_seen_) {
    call_seen_ = false;
    if (stream_.config().idle_timeout.count() != 0) last_call_ = stream_.now();
  }
  if (stream_.wants_write()) flush();
  if (stream_.finished()) {
    lose();  // replies still owed have nowhere to go
    return;
  }
  if (shell_.calls_out) watch_outbound();
  if (paused_ && may_resume()) {
    paused_ = false;
    read();
    if (stream_.wants_write()) flush();
  }
  withdraw_held();
  arm_clock();
}

// Writes what is queued; on failure the connection finishes. Writability is watched only while
// output waits (asio's and CAF's rule): a socket watched for EPOLLOUT all its life wakes a poller
// each time the peer reads (AF_UNIX signals write space then), for a turn that finds nothing to
// do. A turn that wrote has its worker look at the reactor before it moves on: the answer may
// already be there.
void connection_core::flush() {
  const std::uint64_t writes = stream_.stats().writes;
  stream_.flush();
  if (stream_.stats().writes != writes) courier::detail::poll_io_after_turn(&node_->io(), link_ ? link_->tag : 0);
  const bool waiting = stream_.wants_write() && !stream_.finished();
  if (waiting == watching_writable_) return;
  watching_writable_ = waiting;
  update_registration();
}

// EPOLLIN unless a plain thread drives the connection (it polls the socket itself), EPOLLOUT while
// output waits; edge-triggered either way.
void connection_core::update_registration() {
  if (!link_ || link_->tag == 0) return;
  const std::uint32_t events =
      (held_ ? std::uint32_t{EPOLLET} : readable_events) | (watching_writable_ ? EPOLLOUT : 0u);
  // No lock: a driven ask changes the events twice per call, and the send path takes none.
  if (auto ok = node_->io().modify_events(link_->fd, link_->tag, events); !ok)
    stream_.fail(courier::error(errc::connection_lost, "cannot watch the socket: " + ok.err().text));
}

// Keeps one connection_tick on its way, due at the connection's next deadline: a tick already
// armed for that time or earlier stays (one that fires early only re-arms). Called at the end of
// every turn, so a deadline that moved closer (a close started) is armed at once. A session's
// idle time is a deadline of the connection's own.
void connection_core::arm_clock() {
  const auto due = std::min(stream_.next_deadline(reading()), idle_due());
  if (due == std::chrono::steady_clock::time_point::max() || due >= clock_due_) return;
  clock_.cancel();
  const auto now = stream_.now();
  const auto wait = due <= now ? std::chrono::nanoseconds(0) : std::chrono::ceil<std::chrono::nanoseconds>(due - now);
  clock_ = courier::detail::send_after(shell_.actor, shell_.connection_tick, connection_tick{}, wait);
  clock_due_ = due;
}

// When the session counts as idle (connection_config::idle_timeout): its client's last call or
// send and the time-out after it; never while closing, or with no time-out.
std::chrono::steady_clock::time_point connection_core::idle_due() noexcept {
  const auto limit = stream_.config().idle_timeout;
  if (limit.count() == 0 || stream_.engine().side() != wire::role::acceptor || !stream_.open_for_calls())
    return std::chrono::steady_clock::time_point::max();
  return last_call_ + limit;
}

// Every receive block is still viewed by messages in other actors' mailboxes: nothing tells the
// connection when one is let go, so it looks again shortly (a read_retry after a millisecond).
void connection_core::retry_read_later() {
  if (retry_pending_) return;
  retry_pending_ = true;
  (void)courier::detail::send_after(shell_.actor, shell_.read_retry, read_retry{}, std::chrono::milliseconds(1));
}

courier::detail::drive_ops::descriptors connection_core::hold_io() noexcept {
  const bool made_now = driver_signal_.load(std::memory_order_relaxed) < 0;
  const int signal = driver_signal_fd();
  // A push that found the connection held before its eventfd existed had nothing to signal: the
  // driver's first wait then looks at the mailbox once.
  if (made_now) signal_driver();
  if (!link_ || stream_.finished()) return {-1, signal};
  release_pending_ = false;
  if (!held_) {
    held_ = true;
    update_registration();
  }
  return {stream_.fd(), signal};
}

// A thread that calls again soon would take the socket out of the reactor again at once: two
// epoll_ctl calls per call for nothing (a fifth of a call's system calls where both processes
// share a CPU). So EPOLLIN goes back at the connection's next turn on a worker (another actor's
// call through it, a tick, a stop), at the latest redrive_window after the first release that
// found no tick on its way: until then what the peer sends on its own waits in the socket, and
// the driver's next call reads it first. The tick has a timer of its own because this runs on
// the driver's thread, where cancelling the clock would leave its record (and a reference to
// the actor) in the system's timer until the clock's own deadline.
void connection_core::release_io() noexcept {
  if (!held_) return;
  if (!link_ || stopped_ || stream_.finished() || stream_.uses_virtual_clock()) {
    release_now();  // nothing left to save, or a clock that moves only when a test moves it
    return;
  }
  release_pending_ = true;
  if (release_tick_.active()) return;
  try {
    release_tick_ =
        courier::detail::send_after(shell_.actor, shell_.connection_tick, connection_tick{}, redrive_window);
  } catch (...) {
    release_now();  // out of memory for the tick: give the socket back now
  }
}

void connection_core::release_now() noexcept {
  release_pending_ = false;
  held_ = false;
  update_registration();  // re-reports what arrived while it was out (edge-triggered: on MOD)
}

int connection_core::driver_signal_fd() noexcept {
  int fd = driver_signal_.load(std::memory_order_relaxed);
  if (fd < 0) {
    fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd >= 0) driver_signal_.store(fd, std::memory_order_release);
  }
  return fd;
}

void connection_core::signal_driver() noexcept {
  const int fd = driver_signal_.load(std::memory_order_acquire);
  if (fd < 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

void connection_core::dead_letter(const char* what, dead_letter_reason why) {
  courier::detail::dead_letter(shell_.actor->core(), shell_.actor->id(), what, why);
}

// A reply or error to one of our calls settles it; anything else is an inbound call or send for
// the router.
void connection_core::route_frame(const wire::frame_view& f) {
  if (f.kind() != wire::kind::reply && f.kind() != wire::kind::error) {
    route_inbound(f);
    return;
  }
  // Unknown, or late (the caller timed out): dropped and counted.
  if (calls_.answer(f.transaction_id(), f, stream_.frame_owner()) != answer_outcome::settled) {
    ++stream_.stats().dropped_replies;
    stream_.engine().count_dropped_reply();
  }
}

// ---- back-pressure and reading

// Whether reading must wait: the peer does not read what we send (above outbound_high_water, so
// a peer that writes pings or calls and never reads our pongs and answers cannot make us hold
// more than the mark plus one frame), or the served side has too many of its calls.
bool connection_core::must_pause() const noexcept {
  if (stream_.unwritten() > stream_.config().outbound_high_water) return true;
  return inbound() && in_flight_ >= in_flight_limit();
}

// Reading again once a write brings the output down to half the mark (hysteresis, so a peer
// reading just behind does not flip it every turn) and the served side has room again.
bool connection_core::may_resume() const noexcept {
  if (stream_.unwritten() > stream_.config().outbound_high_water / 2) return false;
  return !inbound() || in_flight_ < in_flight_limit();
}

// Reads while the peer reads what we send and the served side keeps up; above the marks the
// socket is left unread, so it fills and TCP flow control reaches the peer. Near the outbound mark
// a read is held to what still fits below it, and no more frames are read than the served side
// has room for (every frame is at least a header long). A read budget spent yields the worker to
// other actors.
std::optional<std::size_t> connection_core::read_budget() {
  if (stream_.finished()) {
    lose();
    return std::nullopt;
  }
  read_was_open_ = stream_.open();
  if (must_pause()) {
    paused_ = true;
    return std::nullopt;
  }
  std::size_t budget = static_cast<std::size_t>(-1);
  if (shell_.calls_out) {
    const std::size_t mark = stream_.config().outbound_high_water;
    const std::size_t left = stream_.unwritten();
    budget = mark - left < wire::header_size ? wire::header_size : mark - left;
  }
  if (inbound()) budget = std::min(budget, (in_flight_limit() - in_flight_) * wire::header_size);
  return budget;
}

void connection_core::after_read(bool budget_spent) {
  if (budget_spent)
    post_turn_message<io_ready>(shell_.actor, shell_.io_ready);  // yield, read on later
  else if (stream_.read_stalled())
    retry_read_later();
  if (stream_.finished()) {
    lose();  // fails the waiters with why (a refused or spoiled handshake too)
  } else if (!read_was_open_ && stream_.open()) {
    if (auto o = std::exchange(opened_, nullptr)) o->settle({});
    for (waiting_open& w : std::exchange(opens_waiting_, {})) start_open(w.request, std::move(w.promise));
  }
}

void connection_core::settled(std::size_t n) {
  in_flight_ -= n;
  if (paused_ && in_flight_ <= in_flight_limit() / 2 && may_resume()) {
    paused_ = false;
    read();
  }
}

// After a turn's write: above outbound_high_water the mailbox refuses sends and requests at the
// call; it takes them again once a write brings the output down to half the mark (hysteresis, so
// a peer reading just behind does not flip it every turn). A write happens in every turn, and
// while output waits writable readiness is a turn (io_ready: flush() adds EPOLLOUT to the
// registration until the output is gone), so the refusal ends once the peer reads again.
void connection_core::watch_outbound() noexcept {
  const std::size_t left = stream_.unwritten();
  const std::size_t mark = stream_.config().outbound_high_water;
  if (left > mark)
    shell_.refuse_sends(shell_.actor, true);
  else if (left <= mark / 2)
    shell_.refuse_sends(shell_.actor, false);
  counters_.note_outbound(left);
}

// ---- the calls out

void connection_core::refuse_send(refusal r, const char* what) {
  counters_.refused_sends.fetch_add(1, std::memory_order_relaxed);
  ++stream_.stats().refused_sends;
  dead_letter(what, r == refusal::full ? dead_letter_reason::mailbox_full : dead_letter_reason::stopped);
}

courier::error connection_core::refusal_error(refusal r) const {
  if (r == refusal::finished) return why();
  if (r == refusal::full)
    return courier::error(errc::mailbox_full, "the connection's outbound buffer is above its high-water mark");
  return courier::error(errc::connection_lost, "the connection is closing");
}

// Appends a frame of `header` whose body is `items` (items already encoded); on failure (larger
// than the peer accepts) nothing is appended.
wire::result<std::size_t> connection_core::append_frame(const wire::frame_header& header,
                                                        std::span<const std::byte> items) {
  wire::frame_writer w(stream_.frames(), header, stream_.send_limits());
  if (!items.empty()) std::memcpy(stream_.frames().extend(items.size()), items.data(), items.size());
  return w.finish();
}

// A dynamic call or send (context_ref): its items were encoded at the call; here they become a
// frame in the context it names.
void connection_core::call_dynamic(const dynamic_call& c, response_promise<wire::items_ref> promise) {
  const bool one_way = !promise.pending();
  if (refused_at_call(promise, "a dynamic send")) return;
  auto refuse = [&](courier::error e) {
    if (one_way)
      dead_letter("a dynamic send", dead_letter_reason::invalid_argument);
    else
      promise.fail(std::move(e));
  };
  if (c.items.fault() != nullptr) {
    refuse(*c.items.fault());
    return;
  }
  if (c.context != 0 && !stream_.engine().context_usable(c.context)) {
    refuse(courier::error(errc::no_such_context,
                          "context " + std::to_string(c.context) + " is not open (never opened, or closed)"));
    return;
  }
  if (!one_way && calls_.in_flight() >= stream_.config().max_in_flight) {
    promise.fail(courier::error(errc::mailbox_full, "too many calls in flight on this connection"));
    return;
  }
  const std::uint64_t tid = one_way ? 0 : calls_.next_id();
  if (auto ok = append_frame(wire::frame_header{wire::protocol_version, one_way ? wire::kind::send : wire::kind::call,
                                                0, 0, c.token, tid, c.context},
                             c.items.bytes());
      !ok) {
    if (one_way) counters_.encode_failures.fetch_add(1, std::memory_order_relaxed);
    refuse(courier::error(errc::invalid_argument, "cannot encode the call: " + ok.err().message()));
    return;
  }
  if (!one_way) {
    stream_.engine().call_sent();  // an orderly close waits for its answer
    calls_.insert(std::move(promise));
  }
}

// Opens a child context at the peer (context_ref::open_child); answered when the peer answers.
// Asked during the handshake, it waits for the handshake's end.
void connection_core::open_child(const detail::open_child& o, response_promise<opened_context> promise) {
  if (!promise.pending()) {  // nobody would learn the child's id
    dead_letter("a child context's open without a reply", dead_letter_reason::invalid_argument);
    return;
  }
  if (!stream_.finished() && !stream_.open()) {
    opens_waiting_.push_back({o, std::move(promise)});
    return;
  }
  start_open(o, std::move(promise));  // refuses it when the connection is gone or closing
}

// The context_open goes out; the child is usable at once here, with the services this side serves
// in it, and its answer settles `promise` (an ERROR: the peer refused it, and the engine ends the
// child).
void connection_core::start_open(const detail::open_child& o, response_promise<opened_context> promise) {
  if (!stream_.open_for_calls()) {
    promise.fail(stream_.finished() ? why() : courier::error(errc::connection_lost, "the connection is closing"));
    return;
  }
  const std::uint64_t tid = calls_.next_id();
  const std::uint64_t id = stream_.engine().open_context(stream_.frames(), tid, o.kind, o.name);
  if (id == 0) {
    const std::uint64_t limit = stream_.engine().agreed().max_child_contexts;
    promise.fail(courier::error(errc::too_many_contexts,
                                limit == 0 ? std::string("the peer accepts no child contexts")
                                           : "the peer accepts at most " + std::to_string(limit) + " child contexts"));
    return;
  }
  if (o.services) router_.add_child(id, o.services);
  calls_.insert(std::move(promise));
}

// Closes a child in order (context_ref::close), or, for context 0, the connection.
void connection_core::close_child(const detail::close_child& c, response_promise<unit> promise) {
  if (c.context == 0) {
    if (promise.pending()) parent_closes_.push_back(std::move(promise));
    on_close_request();
    return;
  }
  if (stream_.finished()) {
    if (promise.pending()) promise.fail(why());
    return;
  }
  const std::uint64_t tid = calls_.next_id();
  if (!stream_.engine().close_context(stream_.frames(), c.context, tid)) {
    if (promise.pending())
      promise.fail(courier::error(errc::no_such_context, "context " + std::to_string(c.context) +
                                                             " is not open here (never opened, closed, or closing)"));
    return;
  }
  // A one-way close (nobody waits) still takes the id's slot, so no call reuses the id before its
  // answer comes; that answer then counts as a reply nobody waited for.
  calls_.insert(std::move(promise));
}

// A reply (or error) to one of our calls arrived spoiled: that call fails, the connection goes on.
void connection_core::on_bad_reply(std::uint64_t tid, const wire::error& e) {
  (void)calls_.fail(tid, courier::error(errc::protocol_error, "the reply was spoiled: " + e.message()));
}

void connection_core::fail_all(const courier::error& why) {
  calls_.fail_all(why);
  for (waiting_open& w : std::exchange(opens_waiting_, {})) w.promise.fail(why);
  if (auto o = std::exchange(opened_, nullptr)) o->settle(why);
}

// Frames queued during the handshake that the peer's frame size refused: their calls fail, their
// sends are counted as encode failures (dead letters), as if refused at the call.
void connection_core::withdraw_held() {
  if (!stream_.open()) return;
  for (const withdrawn_frame& w : stream_.take_withdrawn()) {
    const std::string why = "the frame (" + std::to_string(w.size) + " bytes) is larger than the peer accepts (" +
                            std::to_string(limits().max_frame_size) + " bytes)";
    if (w.kind != wire::kind::call) {
      counters_.encode_failures.fetch_add(1, std::memory_order_relaxed);
      dead_letter("a send queued during the handshake", dead_letter_reason::invalid_argument);
      continue;
    }
    stream_.engine().call_withdrawn();
    (void)calls_.fail(w.transaction_id, courier::error(errc::invalid_argument, "cannot send the call: " + why));
  }
}

// ---- the end

// The connection is over: fail what waits, and stop with connection_lost (or protocol_error) so
// monitors hear why. A pipe server's exit is part of why: it is waited for, without blocking this
// worker, through its pidfd (child_exited) for up to 200 ms. The stop is queued behind the
// messages already sent to us, so that they fail with why() rather than actor_stopped: requests
// queued right after the spawn, which would otherwise lose a pipe server's exit status when the
// server exits before the handshake.
void connection_core::lose() {
  if (lost_) return;
  lost_why_ = stream_.why();
  lost_ = true;
  if (child_ && !exit_status_) {
    reap_child();
    if (!exit_status_) {
      // Not exited yet (it is reading the end of its stream): child_exited comes from the pidfd
      // or, at the latest, from this timer.
      child_wait_ = courier::detail::send_after(shell_.actor, shell_.child_exited, child_exited{},
                                                std::chrono::milliseconds(200));
      return;
    }
  }
  finish_lose();
}

void connection_core::finish_lose() {
  stopped_ = true;
  if (child_ && exit_status_) lost_why_.text += "; server process " + child_->describe_exit();
  fail_all(lost_why_);
  // Monitors see down with the code and why: "the peer was silent for 30000 ms", a protocol error
  // the peer made, the server's exit.
  shell_.actor->request_exit(exit_reason_of(lost_why_), false);
}

// A pipe server's pidfd joins the reactor: its exit is a message, never a wait.
void connection_core::watch_child() {
  if (!child_ || child_->exit_fd() < 0) return;
  auto link =
      std::make_unique<reactor_registration>(shell_.actor, shell_.child_exited, &post_turn_message<child_exited>);
  link->fd = child_->exit_fd();
  if (node_->io().add(link->fd, EPOLLIN, link.get())) child_link_ = std::move(link);
}

// Before the reap closes the pidfd: a closed descriptor must not stay in the reactor's table.
void connection_core::unwatch_child() noexcept {
  if (!child_link_) return;
  node_->io().remove(child_link_->fd);
  child_link_.reset();
}

void connection_core::reap_child() {
  if (!child_ || exit_status_) return;
  exit_status_ = child_->try_wait();
}

}  // namespace courier::net::detail
