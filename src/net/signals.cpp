#include "courier/net/signals.hpp"

#include <pthread.h>

#include <cerrno>
#include <chrono>
#include <ctime>

#include "courier/net/node.hpp"
#include "courier/net/socket.hpp"

namespace courier::net {

server_signals::server_signals() noexcept {
  sigemptyset(&stop_);
  sigaddset(&stop_, SIGINT);
  sigaddset(&stop_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_, nullptr);
  ignore_sigpipe();
}

int server_signals::wait(node& serving, const endpoint& served) {
  if (served.kind != endpoint::kind_t::pipe) {
    for (;;) {
      int sig = 0;
      if (sigwait(&stop_, &sig) == 0) return sig;
    }
  }
  // A pipe server ends with its connection or on a signal, whichever comes first: look for a
  // signal every 20 ms while the node waits for its connection to end.
  for (;;) {
    const timespec slice{0, 20'000'000};
    const int sig = sigtimedwait(&stop_, nullptr, &slice);
    if (sig > 0) return sig;
    if (serving.wait_no_connections(std::chrono::milliseconds(0))) return 0;
  }
}

}  // namespace courier::net
