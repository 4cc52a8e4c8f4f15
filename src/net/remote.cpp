// The parts of the remote layer that are the same for every interface.
#include "courier/net/remote.hpp"

#include <algorithm>

#include "courier/net/node.hpp"
#include "courier/wire/encoder.hpp"

namespace courier::net {

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

namespace detail {

void write_error_frame(connection& c, std::uint64_t tid, std::uint64_t ctx, courier::token tok, const courier::error& e) {
  std::string text = e.text.empty() ? e.code.message() : e.text;
  if (e.code.category() != courier_category() && e.code.category() != wire::wire_category())
    text = e.code.message() + (e.text.empty() ? "" : ": " + e.text);
  (void)wire::encode_error(c.frames(), tid, ctx, error_to_wire(e), text, tok);
}

connection_base::connection_base(std::shared_ptr<node_core> node, socket sock, wire::role role, const connection_config& cfg,
                                 std::shared_ptr<listener_share> share)
    : node_(std::move(node)),
      share_(std::move(share)),
      conn_(std::move(sock), role, cfg, share_ ? share_->memory : nullptr) {
  if (share_) share_->connections.fetch_add(1, std::memory_order_acq_rel);
}

connection_base::~connection_base() {
  detach();
  leave_share();
}

// Counted among its listener's connections from construction until it stops (or is destroyed
// without having started): what is still referenced after its stop (a served call's pending
// reply) no longer counts against max_connections.
void connection_base::leave_share() noexcept {
  if (share_) share_->connections.fetch_sub(1, std::memory_order_acq_rel);
  share_.reset();
}

void connection_base::attach(std::unique_ptr<io_link> link, courier::detail::actor_base* actor,
                             void (*close)(courier::detail::actor_base*)) {
  self_base_ = actor;
  link_ = std::move(link);
  link_->fd = conn_.fd();
  node_->enter(actor, close);
  conn_.start();
  // Edge-triggered: one wake-up per change of readiness; the actor reads until EAGAIN, so a
  // socket that stays readable does not keep its poller spinning while it waits.
  if (auto ok = node_->io().add(conn_.fd(), EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, link_.get()); !ok)
    conn_.fail(courier::error(errc::connection_lost, "cannot watch the socket: " + ok.err().text));
}

void connection_base::detach() noexcept {
  if (!link_) return;
  link_->alive.store(false, std::memory_order_release);
  node_->io().remove(link_->fd);  // waits for an on_io running on another thread
  link_.reset();
  conn_.close_socket();  // the peer sees the end now, not when the last reference goes
  leave_share();
  node_->leave(self_base_);
}

bool connection_base::node_io_add(int fd, io_handler* handler) {
  return static_cast<bool>(node_->io().add(fd, EPOLLIN, handler));
}

void connection_base::node_io_remove(int fd) noexcept { node_->io().remove(fd); }

}  // namespace detail
}  // namespace courier::net

