// courier-test-pipe-echo: the server a pipe test starts. It takes its socket with
// pipe_server_socket(), prints a line to stdout (which must land on stderr, not in the stream), echoes
// every byte back until the client closes, then exits with the status given as argv[1].
// "courier-test-pipe-echo 7 now" exits at once without reading; "... 7 blocking" exits with 7 if its
// stdin came as an ordinary blocking descriptor, with 5 if not.
#include <fcntl.h>
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "courier/net/transport.hpp"

int main(int argc, char** argv) {
  const int status = argc > 1 ? std::atoi(argv[1]) : 0;
  if (argc > 2 && std::string_view(argv[2]) == "blocking") return (::fcntl(0, F_GETFL) & O_NONBLOCK) ? 5 : status;
  auto sock = courier::net::pipe_server_socket();
  if (!sock) {
    std::fprintf(stderr, "courier-test-pipe-echo: %s\n", sock.err().describe().c_str());
    return 100;
  }
  std::printf("courier-test-pipe-echo: this line must go to stderr\n");
  std::fflush(stdout);
  if (argc > 2 && std::string_view(argv[2]) == "now") return status;

  std::byte buffer[4096];
  for (;;) {
    pollfd watch{sock->fd(), POLLIN, 0};
    ::poll(&watch, 1, -1);
    const auto got = courier::net::read_some(*sock, buffer);
    if (got.status == courier::net::io_result::would_block) continue;
    if (got.status != courier::net::io_result::ok) break;
    std::size_t sent = 0;
    while (sent < got.bytes) {
      const iovec piece{buffer + sent, got.bytes - sent};
      const auto put = courier::net::write_some(*sock, {&piece, 1});
      if (put.status == courier::net::io_result::failed) return 101;
      if (put.status == courier::net::io_result::would_block) {
        pollfd out{sock->fd(), POLLOUT, 0};
        ::poll(&out, 1, -1);
        continue;
      }
      sent += put.bytes;
    }
  }
  return status;
}
