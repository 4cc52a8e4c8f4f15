#include "perf_tests.hpp"

#include <courier/courier.hpp>
#include <courier/net/services.hpp>
#include <courier/wire/encoder.hpp>

#include <atomic>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "perf_protocol.hpp"

namespace courier::perf {

namespace {

using clock_type = std::chrono::steady_clock;
using courier::result;

/// ADD5's items: the last one is `offset`, so the sum the server answers is 10 + offset.
net::arguments five(std::int32_t offset) {
  return net::args(five_items[0], five_items[1], five_items[2], five_items[3], offset);
}

result<void> check_sum(const result<wire::items_ref>& reply, std::int32_t offset) {
  if (!reply) return reply.err();
  auto items = reply->items();
  auto sum = items.read<std::int32_t>();
  if (!sum) return courier::error(errc::protocol_error, "ADD5 answered no int32: " + sum.err().message());
  if (*sum != 10 + offset)
    return courier::error(errc::protocol_error,
                          "ADD5 answered " + std::to_string(*sum) + ", not " + std::to_string(10 + offset));
  return {};
}

/// The count an SNT_ reply holds.
result<std::int64_t> count_in(const wire::items_ref& reply) {
  auto items = reply.items();
  auto n = items.read<std::int64_t>();
  if (!n) return courier::error(errc::protocol_error, "SNT_ answered no int64: " + n.err().message());
  return *n;
}

/// The one-way ADD5 the server's session has taken so far. Asked behind a burst of sends, the call
/// may find the connection above its mark: it is refused at once then, and tried again.
result<std::int64_t> sends_taken_by(const net::context_ref& server, std::chrono::milliseconds timeout) {
  auto reply = server.call_wait(perf::sends_taken, {}, timeout);
  while (!reply && reply.err() == errc::mailbox_full) {
    std::this_thread::yield();
    reply = server.call_wait(perf::sends_taken, {}, timeout);
  }
  if (!reply) return reply.err();
  return count_in(*reply);
}

/// A count of the sends taken, asked without waiting (END_AND_CALLBACK): settled on the system's
/// host lane, read by the sender once the next window is sent.
struct pending_count {
  std::mutex lock;
  std::condition_variable changed;
  bool settled = false;
  result<std::int64_t> taken = std::int64_t{0};

  void settle(result<std::int64_t> count) {
    {
      std::lock_guard guard(lock);
      taken = std::move(count);
      settled = true;
    }
    changed.notify_one();
  }
  /// Blocks rather than spins: a sender that yields while it waits takes a core from the
  /// connection and the server it waits for (a third of its samples were sched_yield).
  bool wait_settled(std::chrono::milliseconds timeout) {
    std::unique_lock guard(lock);
    return changed.wait_for(guard, timeout, [this] { return settled; });
  }
};

void ask_count(const net::context_ref& server, std::chrono::milliseconds timeout,
               const std::shared_ptr<pending_count>& into) {
  server.call(perf::sends_taken, {}, timeout)
      .then([into](const wire::items_ref& reply) { into->settle(count_in(reply)); },
            [into](const courier::error& e) { into->settle(e); });
}

/// END: one-way sends, refused at the call while the connection is above its mark (tried again
/// after a yield, as a PUSH socket waits at its high-water mark). Every `window` sends the count
/// taken so far is asked for without waiting, and the previous window's answer is read then: the
/// server's backlog stays within two windows while the pipe never drains (a count waited for at
/// each window left both sides idle while the server caught up). The last count, waited for,
/// checks that every send arrived.
result<measured> sends(const net::context_ref& server, std::chrono::duration<double> run_for,
                       std::chrono::milliseconds timeout) {
  constexpr std::size_t window = 16 * 1024;
  auto before = sends_taken_by(server, timeout);
  if (!before) return before.err();
  std::int64_t sent = 0;
  std::shared_ptr<pending_count> previous;
  auto m = run_timed(run_for, 1024, [&]() -> result<void> {
    for (;;) {
      const auto r = server.try_send(add_five, five(static_cast<std::int32_t>(sent)));
      if (r == send_result::sent) break;
      if (r != send_result::full)
        return courier::error(errc::connection_lost, "the connection refused a send: it has stopped");
      // A full mailbox holds thousands of messages, milliseconds of the connection's work: this
      // thread sleeps a little rather than spin (yielding, it took a seventh of both CPUs from
      // the connection and the server, 200k yields a second).
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (++sent % window == 0) {
      if (previous) {
        if (!previous->wait_settled(timeout))
          return courier::error(errc::request_timeout, "SNT_ was not answered in time");
        // Refused at the call (the connection above its mark): asked again, waiting.
        if (!previous->taken && previous->taken.err() == errc::mailbox_full) {
          if (auto n = sends_taken_by(server, timeout); !n) return n.err();
        } else if (!previous->taken) {
          return previous->taken.err();
        }
      }
      previous = std::make_shared<pending_count>();
      ask_count(server, timeout, previous);
    }
    return {};
  });
  if (!m) return m.err();
  const auto start = clock_type::now();
  auto after = sends_taken_by(server, timeout);
  if (!after) return after.err();
  m->seconds += std::chrono::duration<double>(clock_type::now() - start).count();  // until the last one was taken
  if (*after - *before != sent)
    return courier::error(errc::protocol_error, "the server took " + std::to_string(*after - *before) + " of " +
                                                    std::to_string(sent) + " sends");
  return m;
}

/// END_AND_CALLBACK: an actor keeps `depth` calls in flight; each reply's continuation checks the
/// sum and makes the next call, until the time is up.
struct pump_go {
  std::size_t depth;
  clock_type::time_point until;
  std::promise<result<std::uint64_t>>* done;
};

class callback_pump : public courier::actor<callback_pump, pump_go> {
 public:
  explicit callback_pump(net::context_ref server) : server_(std::move(server)) {}
  void on(const pump_go& go) {
    until_ = go.until;
    done_ = go.done;
    for (std::size_t i = 0; i < go.depth; ++i) next();
  }
  void on_stop() { server_ = {}; }

 private:
  void next() {
    const auto offset = static_cast<std::int32_t>(sent_++ & 0xffff);
    ++outstanding_;
    server_.call(add_five, five(offset), std::chrono::seconds(10))
        .then([this, offset](const wire::items_ref& reply) { settled(check_sum(reply, offset)); },
              [this](const courier::error& e) { settled(e); });
  }
  void settled(result<void> outcome) {
    --outstanding_;
    if (outcome)
      ++answered_;
    else if (!failure_)
      failure_ = outcome.err();
    if (!failure_ && clock_type::now() < until_) return next();
    if (outstanding_ == 0 && done_ != nullptr) {
      if (failure_)
        done_->set_value(*failure_);
      else
        done_->set_value(answered_);
      done_ = nullptr;
    }
  }

  net::context_ref server_;
  clock_type::time_point until_{};
  std::promise<result<std::uint64_t>>* done_ = nullptr;
  std::uint64_t sent_ = 0, answered_ = 0;
  std::size_t outstanding_ = 0;
  std::optional<courier::error> failure_;
};

result<measured> callbacks(courier::system& sys, const net::context_ref& server,
                           std::chrono::duration<double> run_for) {
  auto pump = sys.spawn<callback_pump>(server);
  std::promise<result<std::uint64_t>> done;
  auto answered = done.get_future();
  const auto start = clock_type::now();
  pump.send(pump_go{64, start + std::chrono::duration_cast<clock_type::duration>(run_for), &done});
  const bool finished = answered.wait_for(run_for + std::chrono::seconds(20)) == std::future_status::ready;
  pump.stop();
  if (!finished)
    return courier::error(errc::request_timeout, "the calls in flight were not answered within 20 s of the end");
  auto n = answered.get();
  if (!n) return n.err();
  return measured{*n, std::chrono::duration<double>(clock_type::now() - start).count()};
}

/// A list of 24 items, and its bytes: the echo must come back the same.
net::arguments typed_list() {
  return net::arguments::written([](wire::frame_writer& w) {
    w.begin_list();
    for (std::int32_t i = 0; i < 8; ++i) w.add(i).add(static_cast<double>(i) * 1.5).add(std::string_view("courier"));
    w.end_list();
  });
}

}  // namespace

perf_client::~perf_client() {
  if (server_) (void)server_->close_wait(timeout_);
}

result<net::context_ref> perf_client::server() {
  if (server_) return *server_;
  auto connected = node_.connect(where_, cfg_);
  if (!connected) return connected.err();
  server_ = *connected;
  return *server_;
}

result<measured> perf_client::run(std::string_view name, std::chrono::duration<double> run_for) {
  if (auto warm = run_once(name, run_for / 10); !warm) return warm.err();
  return run_once(name, run_for);
}

result<measured> perf_client::run_once(std::string_view name, std::chrono::duration<double> run_for) {
  if (name == "parent") {
    // A session from nothing: each connection a new one (over pipe, a new server process). The
    // server starts the session before it reads the handshake, so the handshake's answer comes
    // from a started session; then the orderly close and its answer.
    return run_timed(run_for, 1, [&]() -> result<void> {
      auto session = node_.connect(where_, cfg_);
      if (!session) return session.err();
      return session->close_wait(timeout_);
    });
  }
  auto s = server();
  if (!s) return s.err();
  const net::context_ref& ctx = *s;
  if (name == "send-nothing")
    return run_timed(run_for, 64, [&]() -> result<void> {
      if (auto r = ctx.call_wait(nothing, {}, timeout_); !r) return r.err();
      return {};
    });
  if (name == "send") return sends(ctx, run_for, timeout_);
  if (name == "send-and-callback") return callbacks(sys_, ctx, run_for);
  if (name == "send-and-wait") {
    std::int32_t offset = 0;
    return run_timed(run_for, 64, [&]() -> result<void> {
      offset = (offset + 1) & 0xffff;
      return check_sum(ctx.call_wait(add_five, five(offset), timeout_), offset);
    });
  }
  if (name == "child") {
    // The close is one-way: the next open, behind it on the connection, is answered after it.
    auto m = run_timed(run_for, 16, [&]() -> result<void> {
      auto child = ctx.open_child({}, {}, nullptr, timeout_);
      if (!child) return child.err();
      child->close();
      return {};
    });
    if (m) {
      if (auto r = ctx.call_wait(nothing, {}, timeout_); !r) return r.err();
    }
    return m;
  }
  if (name == "bfl") {
    const net::arguments list = typed_list();
    return run_timed(run_for, 64, [&]() -> result<void> {
      auto reply = ctx.call_wait(echo_list, list, timeout_);
      if (!reply) return reply.err();
      const auto got = reply->body();
      const auto sent = list.bytes();
      if (got.size() != sent.size() || !std::equal(got.begin(), got.end(), sent.begin()))
        return courier::error(errc::protocol_error, "BFL_ echoed other items than it was given");
      return {};
    });
  }
  return courier::error(errc::invalid_argument, "no such test: " + std::string(name));
}

}  // namespace courier::perf
