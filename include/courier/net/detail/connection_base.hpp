#pragma once
/// @file
/// What the connection actor (connection.hpp) is made of, private to the network layer: its
/// reactor registration (reactor_registration), the messages its turns run on (io_ready, connection_tick,
/// read_retry, close_request, child_exited), and connection_base, which holds the node's
/// services, the connection's wire_stream and its registration.
///
/// Thread-safety: reactor_registration is touched by the reactor's thread and the actor (atomics); the rest only
/// in the actor's turns.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "courier/actor.hpp"
#include "courier/detail/message.hpp"
#include "courier/detail/runtime.hpp"
#include "courier/net/connection_config.hpp"
#include "courier/net/detail/live_counters.hpp"
#include "courier/net/detail/reactor.hpp"
#include "courier/net/detail/wire_stream.hpp"
#include "courier/net/transport.hpp"
#include "courier/net/detail/wire_interface.hpp"
#include "courier/pool.hpp"
#include "courier/response_promise.hpp"

namespace courier::net::detail {

/// Readiness of the connection's socket, from whoever polls the reactor (at most one queued at a time).
struct io_ready {};
/// The engine's clock: handshake and close time-outs, keepalive pings, dead-peer detection. One
/// is on its way at a time, due at the connection's next deadline.
struct connection_tick {};
/// A connection whose receive blocks were all held looks again (one pending at a time).
struct read_retry {};
/// The node is stopping: close in order (calls received are still answered, new ones refused).
struct close_request {};
/// A pipe client's server process exited (its pidfd turned readable), or the wait for it is over.
struct child_exited {};

class node_core;

/// How the connecting side's handshake ended, told once by the connection: an empty error when
/// it was accepted, else why the connection was lost. `settled` turns 1 after `outcome` is set, so
/// a plain thread that drives the connection while it waits (drive_while_waiting) sees it between
/// turns; a thread that does not drive waits on `outcome`.
struct handshake_outcome {
  std::promise<courier::error> outcome;
  std::atomic<std::uint32_t> settled{0};

  void settle(courier::error why) {
    outcome.set_value(std::move(why));
    settled.store(1, std::memory_order_release);
  }
};

/// A connection actor's registration with the reactor, owned by the actor; freed when it stops,
/// after reactor::remove (which waits for an on_io in progress on another thread).
class reactor_registration : public owned_handler {
 public:
  /// The readiness reported since the connection last took it (EPOLLIN, EPOLLOUT, EPOLLRDHUP...):
  /// or-ed in before an io_ready is queued, so none is lost while one is on its way.
  std::atomic<std::uint32_t> events{0};
  std::atomic<bool> queued{false};
  std::atomic<bool> alive{true};
  int fd = -1;
  std::uint64_t tag = 0;  // the reactor's registration_tag, for changing its events without a lock
};

/// Queues `Msg` on the normal lane without the capacity check (as a timer's message): a
/// connection with a bounded mailbox (connection_config::mailbox_capacity) must never lose its
/// readiness, which edge-triggered epoll reports once, nor its node's request to close.
template <class Msg, class Conn>
void post_to_connection(courier::detail::actor_base* base) {
  auto* slot = courier::detail::make_message<Msg>(Conn::template type_index<Msg>, nullptr, Msg{});
  if (!base->enqueue(slot)) pool::destroy(slot);  // stopped: nothing left to do
}

template <class Conn>
void post_io_ready(const actor_ref<Conn>& ref) {
  post_to_connection<io_ready, Conn>(ref.base());
}

/// A registration that queues `Msg` (at most one at a time) when its descriptor turns ready.
template <class Conn, class Msg = io_ready>
class reactor_registration_for final : public reactor_registration {
 public:
  explicit reactor_registration_for(actor_ref<Conn> r) : ref(std::move(r)) {}
  void on_io(std::uint32_t epoll_events) noexcept override {
    if (!alive.load(std::memory_order_acquire)) return;
    // seq_cst, with rearm(): an event whose bits the turn's exchange missed finds `queued` clear.
    events.fetch_or(epoll_events, std::memory_order_seq_cst);
    if (!queued.exchange(true, std::memory_order_seq_cst)) {
      try {
        post_to_connection<Msg, Conn>(ref.base());
      } catch (...) {
        queued.store(false, std::memory_order_release);  // out of memory: the next readiness retries
      }
    }
  }
  actor_ref<Conn> ref;
};

/// What both connection actors share: the node's services (reactor, registry of live
/// connections), the connection's bytes, and its reactor link.
class connection_base {
 public:
  connection_base(std::shared_ptr<node_core> node, socket sock, wire::role role, const connection_config& cfg,
                  std::shared_ptr<listener_share> share = nullptr);
  ~connection_base();

 protected:
  /// Registers with the reactor and queues the handshake; `actor` is the connection actor, and
  /// `close` queues a close_request to it (the node calls it when it stops).
  void attach(std::unique_ptr<reactor_registration> link, courier::detail::actor_base* actor, const std::uint16_t* context_map,
              void (*close)(courier::detail::actor_base*));
  /// Stops receiving readiness, closes the socket, forgets the actor in the node's registry.
  void detach() noexcept;
  /// Clears the queued flag (readiness after this point queues a new io_ready) and hands the
  /// readiness reported so far to the connection (a hang-up means: read on to the end of file).
  void rearm() noexcept {
    link_->queued.store(false, std::memory_order_seq_cst);
    stream_.note_readiness(link_->events.exchange(0, std::memory_order_seq_cst));
  }
  /// Writes what is queued; on failure the connection finishes. Writability is watched only
  /// while output waits (asio's and CAF's rule): a socket watched for EPOLLOUT all its life wakes
  /// a poller each time the peer reads (AF_UNIX signals write space then), for a turn that finds
  /// nothing to do. A turn that wrote has its worker look at the reactor before it moves on: the
  /// answer may already be there.
  void flush();

  /// A plain thread drives the connection (see courier::detail::drive_ops): while it holds it,
  /// the socket is out of the reactor (no worker wakes for what that thread reads itself).
  int hold_io() noexcept;
  void release_io() noexcept;
  /// The socket turned readable for the driver: an io_ready, as the reactor would have queued.
  void io_readable() noexcept {
    if (link_) link_->on_io(EPOLLIN);
  }
  /// The eventfd that a push to the held connection makes readable (the connecting side's is
  /// made with the connection, the accepting side's on first use).
  int driver_signal_fd() noexcept;
  void signal_driver() noexcept;

  /// Another descriptor of this connection's (a pipe server's pidfd) watched for readability.
  bool node_io_add(int fd, io_handler* handler);
  /// The system the node runs on (to spawn the actors of child contexts).
  courier::system& node_system() noexcept;
  void node_io_remove(int fd) noexcept;
  void leave_share() noexcept;

  /// Keeps one connection_tick on its way, due at the connection's next deadline: a tick already
  /// armed for that time or earlier stays (one that fires early only re-arms). Called at the end
  /// of every turn, so a deadline that moved closer (a close started) is armed at once. `also`
  /// is a deadline of the connection's own (a session's idle time).
  template <class Conn>
  void arm_clock(const actor_ref<Conn>& self, bool reading,
                 std::chrono::steady_clock::time_point also = std::chrono::steady_clock::time_point::max()) {
    const auto due = std::min(stream_.next_deadline(reading), also);
    if (due == std::chrono::steady_clock::time_point::max() || due >= clock_due_) return;
    clock_.cancel();
    const auto now = std::chrono::steady_clock::now();
    const auto wait = due <= now ? std::chrono::nanoseconds(0) : std::chrono::ceil<std::chrono::nanoseconds>(due - now);
    clock_ = self.delayed_send(connection_tick{}, wait);
    clock_due_ = due;
  }
  /// The armed tick arrived.
  void clock_fired() noexcept { clock_due_ = std::chrono::steady_clock::time_point::max(); }

  std::shared_ptr<node_core> node_;
  std::shared_ptr<listener_share> share_;
  live_counters counters_;  // node::counters reads them
  wire_stream stream_;
  std::unique_ptr<reactor_registration> link_;
  courier::detail::actor_base* self_base_ = nullptr;
  timer_handle clock_;  // the connection_tick on its way
  std::chrono::steady_clock::time_point clock_due_ = std::chrono::steady_clock::time_point::max();
  bool retry_pending_ = false;  // a read_retry is on its way
  bool watching_writable_ = false;  // EPOLLOUT is in the registration: output waits
  bool held_ = false;               // a plain thread drives the connection: EPOLLIN is out

 private:
  void update_registration();
  std::atomic<int> driver_signal_{-1};
};

/// The reason a connection actor stops with when its connection ended with `why`: protocol_error
/// when the peer broke the protocol, else connection_lost, with why's text (monitors see it).
inline courier::error exit_reason_of(const courier::error& why) {
  return courier::error(why.code == errc::protocol_error ? errc::protocol_error : errc::connection_lost, why.text);
}

/// Every receive block is still viewed by messages in other actors' mailboxes: nothing tells the
/// connection when one is let go, so it looks again shortly (an io_ready after a millisecond).
template <class Conn>
void retry_read_later(const actor_ref<Conn>& self, bool& pending) {
  if (pending) return;
  pending = true;
  self.delayed_send(read_retry{}, std::chrono::milliseconds(1));
}

/// An error code for an ERROR frame and its text.
void write_error_frame(wire_stream& c, std::uint64_t tid, std::uint64_t ctx, courier::token tok, const courier::error& e);

template <class T>
class interface_messages;
template <class... Rs, class... Ms>
class interface_messages<courier::interface<Rs(Ms)...>> {
 public:
  template <class Derived, class... Extra>
  using actor_base = courier::actor<Derived, std::remove_cvref_t<Ms>..., Extra...>;
};

}  // namespace courier::net::detail
