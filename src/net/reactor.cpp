#include "courier/net/detail/reactor.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

namespace courier::net::detail {

namespace {

// The wake-up eventfd is told apart from descriptors by this tag in place of a descriptor number.
constexpr std::uint64_t wake_tag = ~std::uint64_t{0};

std::uint64_t pack(int fd, std::uint32_t generation) noexcept {
  return (std::uint64_t{generation} << 32) | static_cast<std::uint32_t>(fd);
}
// The slot a tag names: its descriptor number (past the table for the wake-up tag).
std::size_t descriptor_of(std::uint64_t tag) noexcept { return static_cast<std::uint32_t>(tag); }

// A reactor that cannot be made is a resource failure of whoever asked for it (a session out of
// descriptors), never of the process: the caller decides what it costs.
[[noreturn]] void fail_to_start(const char* what) {
  throw std::system_error(errno, std::generic_category(), std::string("courier::net reactor: ") + what);
}

}  // namespace

reactor::reactor() {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) fail_to_start("epoll_create1");
  wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_) fail_to_start("eventfd");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = wake_tag;
  if (::epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, wake_.fd(), &event) < 0) fail_to_start("epoll_ctl(eventfd)");
}

reactor::~reactor() = default;

courier::result<void> reactor::control(int op, int fd, std::uint32_t events, io_handler* handler) {
  if (fd < 0 || handler == nullptr) return courier::error(errc::invalid_argument, "reactor: no descriptor or handler");
  std::lock_guard lock(table_mutex_);
  if (static_cast<std::size_t>(fd) >= slots_.size()) slots_.resize(static_cast<std::size_t>(fd) + 1);
  slot& entry = slots_[static_cast<std::size_t>(fd)];
  const bool adding = op == EPOLL_CTL_ADD;
  if (adding != (entry.handler == nullptr))
    return courier::error(std::error_code(adding ? EEXIST : ENOENT, std::system_category()),
                          adding ? "reactor: descriptor already watched" : "reactor: descriptor not watched");
  // A new registration gets a new generation, so events collected for the previous one are skipped.
  const std::uint32_t generation = adding ? entry.generation + 1 : entry.generation;
  epoll_event event{};
  event.events = events;
  event.data.u64 = pack(fd, generation);
  if (::epoll_ctl(epoll_.fd(), op, fd, &event) < 0)
    return courier::error(std::error_code(errno, std::system_category()),
                          adding ? "reactor: epoll_ctl ADD" : "reactor: epoll_ctl MOD");
  entry.handler = handler;
  entry.generation = generation;
  if (adding) ++watched_;
  return {};
}

courier::result<void> reactor::add(int fd, std::uint32_t events, io_handler* handler) {
  return control(EPOLL_CTL_ADD, fd, events, handler);
}

courier::result<void> reactor::modify(int fd, std::uint32_t events, io_handler* handler) {
  return control(EPOLL_CTL_MOD, fd, events, handler);
}

std::uint64_t reactor::registration_tag(int fd) const {
  std::lock_guard lock(table_mutex_);
  if (fd < 0 || static_cast<std::size_t>(fd) >= slots_.size()) return 0;
  const slot& entry = slots_[static_cast<std::size_t>(fd)];
  return entry.handler == nullptr ? 0 : pack(fd, entry.generation);
}

courier::result<void> reactor::modify_events(int fd, std::uint64_t tag, std::uint32_t events) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = tag;
  if (::epoll_ctl(epoll_.fd(), EPOLL_CTL_MOD, fd, &event) < 0)
    return courier::error(std::error_code(errno, std::system_category()), "reactor: epoll_ctl MOD");
  return {};
}

void reactor::remove(int fd) noexcept {
  std::lock_guard lock(table_mutex_);
  if (fd < 0 || static_cast<std::size_t>(fd) >= slots_.size()) return;
  slot& entry = slots_[static_cast<std::size_t>(fd)];
  if (entry.handler == nullptr) return;
  ::epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, fd, nullptr);
  entry.handler = nullptr;
  ++entry.generation;
  --watched_;
}

std::size_t reactor::watched() const noexcept {
  std::lock_guard lock(table_mutex_);
  return watched_;
}

std::size_t reactor::run_once(int timeout_ms) noexcept { return run_once(timeout_ms, {ready_, batch}); }

namespace {
constexpr std::uint32_t cache_line = 64;
}  // namespace

std::size_t reactor::run_once(int timeout_ms, std::span<epoll_event> ready_) noexcept {
  const int ready = ::epoll_wait(epoll_.fd(), ready_.data(), static_cast<int>(ready_.size()), timeout_ms);
  if (ready <= 0) return 0;  // time-out, or EINTR: the caller's loop comes back
  if (ready > 1) warm(ready_.first(static_cast<std::size_t>(ready)));
  std::size_t dispatched = 0;
  for (int i = 0; i < ready; ++i) {
    const std::uint64_t tag = ready_[i].data.u64;
    if (tag == wake_tag) {
      std::uint64_t count;
      [[maybe_unused]] const ssize_t n = ::read(wake_.fd(), &count, sizeof count);
      continue;
    }
    // Looked up per event, not per batch: an earlier handler of this round may have removed it.
    dispatched += report(tag, ready_[i].events);
  }
  return dispatched;
}

// Under many connections each event's handler, and the actor its turn runs, went cold since that
// connection's last call: dispatched one by one, every event waited for its own misses (the slot,
// the handler, then the actor's lines in its turn). Asked for in three passes over the batch, each
// pass's loads overlap, and the turns that follow find their actors loaded.
void reactor::warm(std::span<const epoll_event> ready) noexcept {
  const auto slot_of = [this](const epoll_event& e) noexcept -> const slot* {
    const std::size_t fd = descriptor_of(e.data.u64);
    return fd < slots_.size() ? &slots_[fd] : nullptr;
  };
  std::lock_guard lock(table_mutex_);
  for (const epoll_event& e : ready)
    if (const slot* entry = slot_of(e)) __builtin_prefetch(entry);
  for (const epoll_event& e : ready)
    if (const slot* entry = slot_of(e); entry != nullptr && entry->handler != nullptr)
      __builtin_prefetch(entry->handler);
  for (const epoll_event& e : ready) {
    const slot* entry = slot_of(e);
    if (entry == nullptr || entry->handler == nullptr) continue;
    const auto* at = static_cast<const char*>(entry->handler->warm_at);
    for (std::uint32_t offset = 0; offset < entry->handler->warm_bytes; offset += cache_line)
      __builtin_prefetch(at + offset);
  }
}

// The handler runs under the table's lock, so remove() waits for it and, once remove() returned,
// the handler is never called again (from this thread or another poller's).
std::size_t reactor::report(std::uint64_t tag, std::uint32_t events) noexcept {
  const std::size_t fd = descriptor_of(tag);
  const auto generation = static_cast<std::uint32_t>(tag >> 32);
  std::lock_guard lock(table_mutex_);
  if (tag == 0 || tag == wake_tag || fd >= slots_.size()) return 0;
  const slot& entry = slots_[fd];
  if (entry.generation != generation || entry.handler == nullptr) return 0;
  entry.handler->on_io(events);
  return 1;
}

courier::detail::io_poller reactor::as_io_poller() noexcept {
  courier::detail::io_poller poller;
  poller.context = this;
  poller.poll = [](void* self, int timeout_ms) noexcept -> std::size_t {
    epoll_event ready[32];  // the caller's own: several workers may poll at once
    return static_cast<reactor*>(self)->run_once(timeout_ms, ready);
  };
  poller.wake = [](void* self) noexcept { static_cast<reactor*>(self)->wake(); };
  poller.report = [](void* self, std::uint64_t source) noexcept -> std::size_t {
    return static_cast<reactor*>(self)->report(source, EPOLLIN);
  };
  poller.fd = fd();
  return poller;
}

void reactor::wake() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_.fd(), &one, sizeof one);
}

reactor_thread::reactor_thread()
    : thread_([this] {
        while (!stopping_.load(std::memory_order_acquire)) reactor_.run_once(-1);
      }) {}

void reactor_thread::stop() noexcept {
  // acquire/release: whatever the stopper wrote before stop() is visible to the loop's last round.
  if (stopping_.exchange(true, std::memory_order_acq_rel)) return;
  reactor_.wake();
  if (thread_.joinable()) thread_.join();
}

}  // namespace courier::net::detail
