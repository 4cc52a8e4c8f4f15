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

connection_base::connection_base(std::shared_ptr<node_core> node, socket sock, wire::role role, const connection_config& cfg)
    : node_(std::move(node)), conn_(std::move(sock), role, cfg) {}

connection_base::~connection_base() { detach(); }

void connection_base::attach(std::unique_ptr<io_link> link, courier::detail::actor_base* actor) {
  self_base_ = actor;
  link_ = std::move(link);
  link_->fd = conn_.fd();
  node_->enter(actor);
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
  node_->leave(self_base_);
}

}  // namespace detail
}  // namespace courier::net

namespace courier::net::detail {

std::chrono::nanoseconds tick_period(const connection_config& cfg) noexcept {
  std::chrono::milliseconds shortest = cfg.handshake_timeout;
  if (cfg.ping_interval.count() > 0) shortest = std::min(shortest, cfg.ping_interval);
  if (cfg.close_timeout.count() > 0) shortest = std::min(shortest, cfg.close_timeout);
  return std::max<std::chrono::nanoseconds>(shortest / 4, std::chrono::milliseconds(10));
}

}  // namespace courier::net::detail
