// Courier as the concurrency layer of a host program with its own event loop: the host polls
// Courier's wake-up descriptor beside its own descriptors and runs ready actors on its thread.
#include <courier/courier.hpp>

#include <poll.h>

#include <atomic>
#include <cstdio>
#include <thread>

struct job {
  int id;
};

class logger : public courier::actor<logger, job> {
 public:
  explicit logger(int* handled) : handled_(handled) {}
  void on(const job& j) {
    ++*handled_;  // runs on the host thread: no lock needed for host state
    if (j.id % 250 == 0) std::printf("host loop handled job %d\n", j.id);
  }

 private:
  int* handled_;
};

int main() {
  courier::system sys{courier::config::embedded()};
  int handled = 0;
  auto log = sys.spawn<logger>(&handled);

  constexpr int jobs = 1000;
  std::thread producer([&] {
    for (int i = 1; i <= jobs; ++i) (void)log.send(job{i});
  });

  pollfd fds[1] = {{sys.wake_fd(), POLLIN, 0}};
  while (handled < jobs) {
    if (::poll(fds, 1, 1000) < 0) return 1;  // the host would add its own descriptors here
    sys.poll();
  }
  producer.join();
  std::printf("host loop handled %d jobs\n", handled);
  return handled == jobs ? 0 : 1;
}
