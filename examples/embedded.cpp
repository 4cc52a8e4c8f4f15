// Courier as the concurrency layer of a host program with its own event loop, written against the
// loop contract (docs/guide/embedding.md): the host watches wake_fd() beside its own descriptors,
// sleeps no longer than next_deadline(), runs Courier with a budget, and shuts down without
// blocking. Everything Courier runs here, host continuations and time-outs included, runs on this
// one thread: there is no other thread in the program but the producer below.
#include <courier/courier.hpp>

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

struct job {
  int id;
};
struct count {};

class logger : public courier::actor<logger, job, count> {
 public:
  void on(const job& j) {
    ++handled_;
    if (j.id % 250 == 0) std::printf("logger handled job %d\n", j.id);
  }
  int on(const count&) { return handled_; }

 private:
  int handled_ = 0;
};

/// How long the host may sleep in poll(2): until Courier's next timer, at most `cap`.
int timeout_ms(const courier::system& sys, std::chrono::milliseconds cap) {
  const auto deadline = sys.next_deadline();
  const auto now = std::chrono::steady_clock::now();
  if (deadline == std::chrono::steady_clock::time_point::max()) return static_cast<int>(cap.count());
  if (deadline <= now) return 0;
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
  return static_cast<int>(std::min(wait, cap).count());
}

int main() {
  courier::system sys{courier::config::embedded()};
  auto log = sys.spawn<logger>();

  constexpr int jobs = 1000;
  std::thread producer([&] {
    for (int i = 1; i <= jobs; ++i) (void)log.send(job{i});
  });
  producer.join();

  // A request made by the host: its continuation runs inside a later poll(), on this thread, so
  // it may touch host state without a lock. The time-out is fired by this loop too.
  int counted = -1;
  bool done = false;
  log.request(count{}, std::chrono::seconds(1))
      .then([&](int n) { counted = n; },
            [&](const courier::error& e) { std::printf("count failed: %s\n", e.describe().c_str()); });

  pollfd fds[1] = {{sys.wake_fd(), POLLIN, 0}};  // the host would add its own descriptors here
  while (!done) {
    if (::poll(fds, 1, timeout_ms(sys, std::chrono::milliseconds(100))) < 0) return 1;
    // A small budget keeps the host's own handlers responsive; wake_fd stays readable while
    // work remains, so the loop comes back for it.
    sys.poll(256);
    if (counted >= 0 && !done) {
      std::printf("host continuation: logger counted %d jobs\n", counted);
      sys.begin_shutdown();  // non-blocking: the loop keeps running until every actor stopped
      done = true;
    }
  }
  while (!sys.stopped()) {
    if (::poll(fds, 1, timeout_ms(sys, std::chrono::milliseconds(100))) < 0) return 1;
    sys.poll(256);
  }
  const courier::shutdown_report report = sys.shutdown();  // returns at once: all stopped
  std::printf("shut down %s\n", report.clean ? "cleanly" : "with unfinished actors");
  // The host stops watching wake_fd here; the system's destructor closes it.
  return counted == jobs && report.clean ? 0 : 1;
}
