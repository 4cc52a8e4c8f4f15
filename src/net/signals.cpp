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
  if (served.kind != transport_kind::pipe) {
    for (;;) {
      int sig = 0;
      if (sigwait(&stop_, &sig) == 0) return sig;
    }
  }
  // A pipe server ends with its connection or on a signal, whichever comes first. The node wakes
  // this thread the moment its connection ends (a pipe session's whole life may be a millisecond:
  // courier-perf --parent starts hundreds a second); a signal is looked for every 20 ms.
  for (;;) {
    if (serving.wait_no_connections(std::chrono::milliseconds(20))) return 0;
    const timespec now{0, 0};
    const int sig = sigtimedwait(&stop_, nullptr, &now);
    if (sig > 0) return sig;
  }
}

}  // namespace courier::net
