// The accept loop: one listener's connections started, or refused on the wire.
#include "courier/net/detail/acceptor.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

#include "courier/net/peer.hpp"
#include "courier/wire/encoder.hpp"

namespace courier::net::detail {

void refuse(socket& sock, std::uint32_t code, std::string_view text,
            const std::shared_ptr<const log_hook>& log) noexcept {
  try {
    if (logs(log, log_level::warning)) {
      std::string line("refused a connection from ");
      line.append(describe_peer(sock)).append(": ").append(text);
      log->write(log_level::warning, line);
    }
  } catch (...) {
  }
  try {
    wire::out_buffer out;
    if (wire::encode_error(out, 0, 0, code, text, {})) {
      const iovec piece{out.data(), out.size()};
      (void)write_some(sock, {&piece, 1});  // a new socket's buffer takes ~100 bytes at once
    }
  } catch (...) {
    // No memory even for the refusal: the close alone tells the peer.
  }
  sock.close();
}

namespace {

int open_spare() noexcept { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

bool out_of_descriptors(const courier::error& e) noexcept {  // no call into the category: see would_block
  const int n = &e.code.category() == &std::system_category() ? e.code.value() : 0;
  return n == EMFILE || n == ENFILE || n == ENOBUFS || n == ENOMEM;
}

}  // namespace

acceptor::acceptor(net::listener l, std::function<void(socket)> start, std::shared_ptr<listener_share> share,
                   std::size_t max_connections)
    : listener_(std::move(l)),
      start_(std::move(start)),
      share_(std::move(share)),
      max_connections_(max_connections),
      spare_(open_spare()) {}

acceptor::~acceptor() {
  if (spare_ >= 0) ::close(spare_);
}

// Reactor handlers are noexcept: an exception (out of memory building an error's text) must end
// this round of accepting, not the process. What waits is accepted with the next connection.
void acceptor::on_io(std::uint32_t) noexcept {
  std::lock_guard lock(mutex_);
  try {
    accept_all();
  } catch (...) {
  }
}

void acceptor::retry() noexcept {
  std::lock_guard lock(mutex_);
  try {
    accept_all();
  } catch (...) {
  }
}

// Accepts until the backlog is empty (edge-triggered: the next readiness comes only with a new
// connection). Each failure other than "none waiting" is this one connection's: go on.
void acceptor::accept_all() {
  starved_.store(false, std::memory_order_release);
  for (int failures = 0; failures < 64;) {
    auto s = listener_.accept();
    if (!s) {
      if (would_block(s.err())) return;
      if (out_of_descriptors(s.err())) {
        // Linux reports EMFILE before it looks at the backlog: only the spare descriptor tells
        // whether a connection waits.
        switch (refuse_with_spare()) {
          case spare_outcome::refused: continue;
          case spare_outcome::none_waiting: return;
          case spare_outcome::no_spare: starved_.store(true, std::memory_order_release); return;
        }
      }
      ++failures;  // reset before accept, or an option the transport could not set
      continue;
    }
    if (max_connections_ != 0 && share_ && share_->connections.load(std::memory_order_acquire) >= max_connections_) {
      refuse(*s, static_cast<std::uint32_t>(errc::system_shutdown),
             "too many connections (this server serves at most " + std::to_string(max_connections_) + ")", share_->log);
      continue;
    }
    try {
      start_(std::move(*s));
    } catch (...) {
      // Out of memory for the connection actor: the socket closes, the client sees it lost.
    }
  }
}

// Out of descriptors: the spare one makes room to accept the oldest waiting connection and tell it
// why it is refused, instead of leaving it in the backlog with no answer.
acceptor::spare_outcome acceptor::refuse_with_spare() {
  if (spare_ < 0) spare_ = open_spare();
  if (spare_ < 0) return spare_outcome::no_spare;
  ::close(std::exchange(spare_, -1));
  auto s = listener_.accept();
  if (s)
    refuse(*s, static_cast<std::uint32_t>(errc::system_shutdown), "the server is out of file descriptors",
           share_ ? share_->log : nullptr);
  spare_ = open_spare();
  if (s) return spare_outcome::refused;
  return would_block(s.err()) ? spare_outcome::none_waiting : spare_outcome::no_spare;
}

}  // namespace courier::net::detail
