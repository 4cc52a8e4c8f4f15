// skynet.cpp -- W6: the skynet tree on Courier and on CAF 0.17, each written the natural way with
// deferred replies (see skynet.hpp).
#include "skynet.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <courier/courier.hpp>

namespace courier_bench::skynet {
namespace {

using clock_type = std::chrono::steady_clock;

// Courier ----------------------------------------------------------------------------------------

struct level {
  std::uint64_t first;  ///< the number of this subtree's first leaf
  std::uint64_t size;   ///< how many leaves the subtree has
};

/// A node answers its `level` request with the sum of its leaves: a leaf at once, an inner node
/// after its ten children have answered (a response promise), then it stops.
class node : public courier::actor<node, level> {
 public:
  courier::response_promise<std::uint64_t> on(const level& l) {
    answer_ = make_response_promise<std::uint64_t>();
    if (l.size == 1) {
      answer_.deliver(l.first);
      stop();
      return std::move(answer_);
    }
    const std::uint64_t step = l.size / 10;
    for (std::uint64_t i = 0; i < 10; ++i) {
      spawn<node>()
          .request(level{l.first + i * step, step})
          .then(
              [this](std::uint64_t part) {
                sum_ += part;
                if (++answered_ == 10) {
                  answer_.deliver(sum_);
                  stop();
                }
              },
              [this](const courier::error& e) {
                answer_.fail(e);
                stop();
              });
    }
    return answer_;
  }

 private:
  courier::response_promise<std::uint64_t> answer_;
  std::uint64_t sum_ = 0;
  unsigned answered_ = 0;
};

run courier_run(std::uint64_t leaves) {
  courier::system sys;
  auto root = sys.spawn<node>();
  const auto t0 = clock_type::now();
  auto sum = root.ask(level{0, leaves}, std::chrono::seconds(120));
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  run r;
  r.sum = sum.has_value() ? *sum : 0;
  r.seconds = seconds;
  return r;
}

// CAF 0.17 ---------------------------------------------------------------------------------------

struct caf_config : caf::actor_system_config {
  caf_config() {
    auto hc = std::thread::hardware_concurrency();
    set("scheduler.max-threads", static_cast<std::int64_t>(hc == 0 ? 1 : hc));
  }
};

struct caf_node_state {
  std::uint64_t sum = 0;
  unsigned answered = 0;
};

caf::behavior caf_node(caf::stateful_actor<caf_node_state>* self) {
  return {[=](std::uint64_t first, std::uint64_t size) -> caf::result<std::uint64_t> {
    if (size == 1) {
      self->quit();
      return first;
    }
    auto answer = self->make_response_promise<std::uint64_t>();
    const std::uint64_t step = size / 10;
    for (std::uint64_t i = 0; i < 10; ++i) {
      auto child = self->spawn(caf_node);
      self->request(child, caf::infinite, first + i * step, step).then([=](std::uint64_t part) mutable {
        self->state.sum += part;
        if (++self->state.answered == 10) {
          answer.deliver(self->state.sum);
          self->quit();
        }
      });
    }
    return answer;
  }};
}

run caf_run(std::uint64_t leaves) {
  caf_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto root = sys.spawn(caf_node);
  run r;
  const auto t0 = clock_type::now();
  self->request(root, std::chrono::seconds(120), std::uint64_t{0}, leaves)
      .receive([&](std::uint64_t sum) { r.sum = sum; }, [&](caf::error&) { r.sum = 0; });
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return r;
}

// Peak resident memory ---------------------------------------------------------------------------

std::uint64_t status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size()));
  return 0;
}

/// Runs `f` in a forked child, so each side starts from the same process image and its peak
/// resident memory (VmHWM, reset first) is its own: the pool keeps chunks for reuse, and the
/// parent's earlier workloads must not count for or against either side.
template <class F>
run in_child(F f, std::uint64_t leaves) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    {
      std::ofstream reset("/proc/self/clear_refs");
      reset << "5";  // resets the peak resident set to the current one
    }
    const std::uint64_t before = status_kib("VmRSS");
    run r = f(leaves);
    const std::uint64_t peak = status_kib("VmHWM");
    r.peak_rss_bytes = peak > before ? (peak - before) * 1024 : 0;
    [[maybe_unused]] auto n = ::write(fds[1], &r, sizeof r);
    ::_exit(0);
  }
  ::close(fds[1]);
  run r;
  if (pid < 0 || ::read(fds[0], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) r = {};
  ::close(fds[0]);
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  return r;
}

}  // namespace

std::uint64_t expected_sum(std::uint64_t leaves) { return leaves * (leaves - 1) / 2; }

run courier_side(std::uint64_t leaves) { return in_child(courier_run, leaves); }
run caf_side(std::uint64_t leaves) { return in_child(caf_run, leaves); }

}  // namespace courier_bench::skynet
