#pragma once
/// @file
/// The signals a server program handles, the same way in every mode (pipe, uds, tcp):
///
///     int main(int argc, char** argv) {
///       courier::net::server_signals signals;    // first, before any thread starts
///       ...                                      // system, node, serve_on(...)
///       signals.wait(net, opts->where);          // SIGINT/SIGTERM, or a pipe server's end
///       net.stop();                              // orderly: calls in flight are answered
///     }
///
/// SIGINT and SIGTERM are blocked in the constructing thread, and so in every thread started after
/// it (threads inherit the mask), and taken by wait() with sigtimedwait: no handler runs inside a
/// worker. SIGPIPE is ignored: a server whose stderr is a pipe nobody reads must not die of the
/// next line it prints (sockets never raise it: they write with MSG_NOSIGNAL).
///
/// Thread-safety: construct once, in main, before other threads; wait() from one thread.

#include <signal.h>

#include "courier/net/endpoint.hpp"

namespace courier::net {

class node;

class server_signals {
 public:
  server_signals() noexcept;
  server_signals(const server_signals&) = delete;
  server_signals& operator=(const server_signals&) = delete;

  /// Waits for SIGINT or SIGTERM (and returns its number); for a pipe server (`served.kind` is
  /// pipe), also for the end of its one connection (and returns 0).
  int wait(node& serving, const endpoint& served);

 private:
  sigset_t stop_;
};

}  // namespace courier::net
