// The echo server: answers every message with itself.
//   courier-echo-client @ courier-echo-server        (pipe)
//   courier-echo-server --uds --file /tmp/echo.sock  /  --tcp --port 4568
#include <courier/courier.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>
#include <courier/net/server.hpp>

#include <cstdio>

#include "echo_api.hpp"

namespace {

class echoer : public courier::actor<echoer, echo::everything> {
 public:
  echo::everything on(const echo::everything& m) { return m; }
};

}  // namespace

int main(int argc, char** argv) {
  courier::net::server_program program{.name = "courier-echo-server"};
  program.base.name = "echo-server";
  return courier::net::run_server(argc, argv, program, [](courier::net::server_setup& s) {
    return s.net.serve_on(courier::actor_ref<echo::api>(s.sys.spawn<echoer>()), s.where, s.config);
  });
}
