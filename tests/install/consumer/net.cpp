// A first network program built against the installed package: a server and a client in one
// process, over a Unix-domain socket, with the options parsed as every Courier program parses them.
#include <courier/courier.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>

#include <CLI/CLI.hpp>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <string>
#include <tuple>

struct add {
  static constexpr courier::token token{"ADD_"};
  int a = 0, b = 0;
  auto fields() { return std::tie(a, b); }
  auto fields() const { return std::tie(a, b); }
};
using api = courier::interface<int(add)>;

class adder : public courier::actor<adder, add> {
 public:
  int on(const add& m) { return m.a + m.b; }
};

int main() {
  const std::string file = "/tmp/courier-consumer-" + std::to_string(::getpid()) + ".sock";
  const char* argv[] = {"consumer_net", "--uds", "--file", file.c_str(), "--count", "2"};
  int count = 0;
  auto opts = courier::net::parse_options(6, argv, "consumer_net",
                                          [&count](CLI::App& app) { app.add_option("--count", count); });
  if (!opts) {
    std::printf("consumer_net: %s\n", opts.err().text.c_str());
    return 1;
  }
  courier::system sys;
  courier::net::node net(sys);
  courier::actor_ref<api> local = sys.spawn<adder>();
  if (auto served = net.serve(local, opts->where); !served) {
    std::printf("consumer_net: %s\n", served.err().describe().c_str());
    return 1;
  }
  auto remote = net.connect<api>(opts->where, courier::net::config_from(*opts));
  if (!remote) {
    std::printf("consumer_net: %s\n", remote.err().describe().c_str());
    return 1;
  }
  auto sum = remote->ask(add{40, count}, std::chrono::seconds(5));
  if (!sum) {
    std::printf("consumer_net: %s\n", sum.err().describe().c_str());
    return 1;
  }
  std::printf("consumer_net: %d\n", *sum);
  return 0;
}
