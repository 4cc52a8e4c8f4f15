// The parts of the remote layer that are the same for every interface.
#include "courier/net/detail/connection.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "courier/net/detail/node_core.hpp"
#include "courier/wire/encoder.hpp"

namespace courier::net::detail {

courier::error error_from_wire(std::uint32_t code, std::string_view text) {
  std::string why(text);
  if (code != 0 && code < 256) return courier::error(wire::make_error_code(static_cast<wire::errc>(code)), std::move(why));
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

void write_error_frame(wire_stream& c, std::uint64_t tid, std::uint64_t ctx, courier::token tok, const courier::error& e) {
  std::string text = e.text.empty() ? e.code.message() : e.text;
  if (e.code.category() != courier_category() && e.code.category() != wire::wire_category())
    text = e.code.message() + (e.text.empty() ? "" : ": " + e.text);
  (void)wire::encode_error(c.frames(), tid, ctx, error_to_wire(e), text, tok);
}

connection_base::connection_base(std::shared_ptr<node_core> node, socket sock, wire::role role, const connection_config& cfg,
                                 std::shared_ptr<listener_share> share)
    : node_(std::move(node)),
      share_(std::move(share)),
      stream_(std::move(sock), role, cfg, share_ ? share_->memory : nullptr) {
  if (share_) share_->connections.fetch_add(1, std::memory_order_acq_rel);
  // The connecting side's own threads call and wait on it, so its driver's eventfd is made now,
  // with the socket, rather than at whichever call first finds the connection idle: the process's
  // descriptors then stay as they were from the connect to the close.
  if (role == wire::role::initiator) (void)driver_signal_fd();
}

connection_base::~connection_base() {
  detach();
  leave_share();
  // Pushes hold a reference to the actor, so none can signal once it is being destroyed (a push
  // that found it held may still signal after it stopped: the eventfd lives as long as the actor).
  if (const int fd = driver_signal_.load(std::memory_order_relaxed); fd >= 0) ::close(fd);
}

// Counted among its listener's connections from construction until it stops (or is destroyed
// without having started): what is still referenced after its stop (a served call's pending
// reply) no longer counts against max_connections.
void connection_base::leave_share() noexcept {
  if (share_) share_->connections.fetch_sub(1, std::memory_order_acq_rel);
  share_.reset();
}

courier::system& connection_base::node_system() noexcept { return node_->system(); }

void connection_base::attach(std::unique_ptr<reactor_registration> link, courier::detail::actor_base* actor,
                             const std::uint16_t* context_map, void (*close)(courier::detail::actor_base*)) {
  self_base_ = actor;
  link_ = std::move(link);
  link_->fd = stream_.fd();
  node_->enter(actor, close, &counters_, context_map);
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
}

void connection_base::flush() {
  const std::uint64_t writes = stream_.stats().writes;
  stream_.flush();
  if (stream_.stats().writes != writes) courier::detail::poll_io_after_turn();
  const bool waiting = stream_.wants_write() && !stream_.finished();
  if (waiting == watching_writable_) return;
  watching_writable_ = waiting;
  update_registration();
}

// EPOLLIN unless a plain thread drives the connection (it polls the socket itself), EPOLLOUT while
// output waits; edge-triggered either way.
void connection_base::update_registration() {
  if (!link_ || link_->tag == 0) return;
  const std::uint32_t events = (held_ ? std::uint32_t{EPOLLET} : readable_events) | (watching_writable_ ? EPOLLOUT : 0u);
  // No lock: a driven ask changes the events twice per call, and the send path takes none.
  if (auto ok = node_->io().modify_events(link_->fd, link_->tag, events); !ok)
    stream_.fail(courier::error(errc::connection_lost, "cannot watch the socket: " + ok.err().text));
}

int connection_base::hold_io() noexcept {
  if (!link_ || stream_.finished()) return -1;
  if (!held_) {
    held_ = true;
    update_registration();
  }
  return stream_.fd();
}

void connection_base::release_io() noexcept {
  if (!held_) return;
  held_ = false;
  update_registration();  // re-reports what arrived while it was out (edge-triggered: on MOD)
}

int connection_base::driver_signal_fd() noexcept {
  int fd = driver_signal_.load(std::memory_order_relaxed);
  if (fd < 0) {
    fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd >= 0) driver_signal_.store(fd, std::memory_order_release);
  }
  return fd;
}

void connection_base::signal_driver() noexcept {
  const int fd = driver_signal_.load(std::memory_order_acquire);
  if (fd < 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

void connection_base::detach() noexcept {
  if (!link_) return;
  link_->alive.store(false, std::memory_order_release);
  node_->io().remove(link_->fd);  // waits for an on_io running on another thread
  link_.reset();
  stream_.close_socket();  // the peer sees the end now, not when the last reference goes
  leave_share();
  node_->leave(self_base_);
}

bool connection_base::node_io_add(int fd, io_handler* handler) {
  return static_cast<bool>(node_->io().add(fd, EPOLLIN, handler));
}

void connection_base::node_io_remove(int fd) noexcept { node_->io().remove(fd); }

}  // namespace courier::net::detail

