// --thread: the start mode that runs each session on a thread of its own.
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "courier/net/log.hpp"
#include "courier/net/server.hpp"
#include "runner.hpp"

namespace courier::net::detail {

namespace {

/// --thread: a thread per session, driving a system of its own (embedded: no workers) with the
/// session's actors and its one connection, so a handler that blocks stalls only its session.
/// A thread whose session ended waits for the next connection (at most `kept_threads` of them
/// wait), as a database server's thread cache does: a connection then costs one wake-up of a
/// waiting thread instead of a thread's start and end (clone, its stack, its allocator heap
/// abandoned and reclaimed), which here cost more than the session's own work.
class thread_runner final : public start_mode_runner {
 public:
  thread_runner(const server_program& program, const options& opts, const serve_callback& serve,
                std::shared_ptr<const log_hook> log, std::size_t kept_threads)
      : program_(program),
        opts_(opts),
        serve_(serve),
        log_(std::move(log)),
        memory_(process_budget(opts)),
        kept_threads_(kept_threads) {}

  ~thread_runner() override {
    for (auto& s : threads_)
      if (s.thread.joinable()) s.thread.detach();  // only those stop() gave up on
  }

  started start(socket& connection, const session_ticket& session) override {
    serving_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(handover_);
      if (waiting_ > handed_.size()) {
        handed_.emplace_back(connection.release(), session);
        next_.notify_one();
        return started::yes;
      }
    }
    const int fd = connection.fd();
    try {
      auto& s = threads_.emplace_back();
      try {
        s.thread = std::thread([this, &s, fd, session] {
          serve_sessions(fd, session);
          s.done.store(true, std::memory_order_release);
        });
      } catch (...) {
        threads_.pop_back();
        throw;
      }
    } catch (const std::system_error& e) {  // no thread to be had (EAGAIN): the acceptor refuses it
      serving_.fetch_sub(1, std::memory_order_relaxed);
      why_not_ = start_failure(e.code(), std::string("a session thread: ") + e.what());
      return started::no;
    } catch (const std::bad_alloc&) {
      serving_.fetch_sub(1, std::memory_order_relaxed);
      why_not_ = "out of memory (a session thread)";
      return started::no;
    }
    (void)connection.release();  // the thread's now
    return started::yes;
  }

  std::size_t running() override {
    for (auto it = threads_.begin(); it != threads_.end();) {
      if (it->done.load(std::memory_order_acquire)) {
        it->thread.join();
        it = threads_.erase(it);
      } else {
        ++it;
      }
    }
    return serving_.load(std::memory_order_acquire);
  }

  bool stop(std::chrono::milliseconds grace) override {
    {
      std::lock_guard lock(handover_);
      stopping_.store(true, std::memory_order_release);
    }
    next_.notify_all();
    // Each session stops its connection within the grace; a handler that never returns keeps
    // its thread, which is left behind (and reported) rather than waited for.
    const auto until = steady::now() + grace + stop_margin;
    while (!threads_ended() && steady::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (threads_ended()) return true;
    why_not_ = std::to_string(threads_.size()) + " session thread(s) did not end within the grace and " +
               std::to_string(stop_margin.count()) + " ms more (a handler that does not return); abandoned";
    return false;
  }

 private:
  struct session_thread {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  bool threads_ended() {
    running();
    return threads_.empty();
  }

  /// Serves `fd`, then the connections handed to this thread while it waits, until it is not
  /// wanted as a waiting thread or the server stops.
  void serve_sessions(int fd, session_ticket session) noexcept {
    for (;;) {
      run_session(fd, session);
      serving_.fetch_sub(1, std::memory_order_release);
      std::unique_lock lock(handover_);
      if (waiting_ >= kept_threads_) return;
      ++waiting_;
      // Said once the acceptor counts this thread as waiting: the next connection is then its.
      if (logs(log_, log_level::debug))
        log_->write(log_level::debug, "session thread " + std::to_string(::gettid()) +
                                          " waits for the next connection (" + std::to_string(waiting_) + " of " +
                                          std::to_string(kept_threads_) + " kept)");
      next_.wait(lock, [&] { return !handed_.empty() || stopping_.load(std::memory_order_relaxed); });
      --waiting_;
      if (handed_.empty()) return;  // stopping, with nothing handed over
      std::tie(fd, session) = handed_.back();
      handed_.pop_back();
    }
  }

  void run_session(int fd, const session_ticket& session) noexcept {
    endpoint where = opts_.where;  // the transport that accepted it: its peer is read as that transport's
    where.descriptor = fd;
    const session_setup setup{program_, opts_, serve_, log_, start_mode::thread, memory_};
    (void)serve_or_refuse(setup, fd, where, session, &stopping_, -1);
  }

  const server_program& program_;
  const options& opts_;
  const serve_callback& serve_;
  std::shared_ptr<const log_hook> log_;
  const std::shared_ptr<detail::receive_memory> memory_;  // one budget for every session thread
  const std::size_t kept_threads_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> serving_{0};  // sessions started and not yet ended
  std::mutex handover_;
  std::condition_variable next_;                        // a connection handed over, or the server stopping
  std::vector<std::pair<int, session_ticket>> handed_;  // connections (and their sessions) for waiting threads
  std::size_t waiting_ = 0;                             // threads waiting for a connection
  std::list<session_thread> threads_;                   // a list: each thread holds a reference to its entry
};

}  // namespace

std::unique_ptr<start_mode_runner> make_thread_runner(const server_program& program, const options& opts,
                                                      const serve_callback& serve, std::shared_ptr<const log_hook> log,
                                                      std::size_t kept_threads) {
  return std::make_unique<thread_runner>(program, opts, serve, std::move(log), kept_threads);
}

}  // namespace courier::net::detail
