// The services server's client: calls by token with items written at the call (no message structs
// shared with the server), in every call style, in the parent context and in child contexts of its
// own, and a service of its own (NAME) that the server calls back on the same connection.
//   courier-services-client @ courier-services-server            (pipe: starts the server itself)
//   courier-services-client --uds --file /tmp/services.sock
//   courier-services-client --tcp --port 4568
// Exits 0 when every answer is the expected one.
#include <courier/courier.hpp>
#include <courier/net/context.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>
#include <courier/net/services.hpp>

#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace net = courier::net;
namespace wire = courier::wire;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%-4s %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// The first item of a reply as text (a string or an int64), or why not.
std::string first_item(const courier::result<wire::items_ref>& reply) {
  if (!reply) return "error " + reply.err().describe();
  auto items = reply->items();
  if (items.peek() == wire::item_type::string) return std::string(*items.read<std::string_view>());
  if (items.peek() == wire::item_type::int64) return std::to_string(*items.read<std::int64_t>());
  return "(no string or int64)";
}

}  // namespace

int main(int argc, char** argv) {
  auto opts = net::parse_options(argc, argv, "courier-services-client");
  if (!opts) {
    std::fprintf(stderr, "%s", net::options_error("courier-services-client", opts.err()).c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", net::options_help("courier-services-client").c_str());
    return 0;
  }
  courier::system sys;
  net::node node(sys);
  net::connection_config base;
  base.name = "services-client";

  // What this client serves its server: the server's BACK service calls it.
  auto mine = std::make_shared<net::service_table>();
  mine->add(courier::token("NAME"), [](net::incoming& call) { call.reply().add(std::string_view("services-client")); },
            {"()", "string", "this client's name"});

  auto connected = node.connect(opts->where, net::config_from(*opts, base), mine);
  if (!connected) {
    std::fprintf(stderr, "courier-services-client: cannot connect to %s: %s\n", to_string(opts->where).c_str(),
                 connected.err().describe().c_str());
    return 1;
  }
  net::context_ref server = *connected;
  const auto timeout = opts->timeout;

  // END_AND_WAIT: a blocking call from this (plain) thread.
  auto hello = server.call_wait(courier::token("HELO"), net::args(std::string_view("world")), timeout);
  expect(first_item(hello) == "hello, world", "HELO world: " + first_item(hello));

  // A list of typed items, echoed back as it went.
  auto echoed = server.call_wait(
      courier::token("ELST"), net::args(std::int32_t{1}, std::string_view("two"), std::vector<double>{3.5}), timeout);
  bool same = false;
  if (echoed) {
    auto items = echoed->items();
    auto one = items.read<std::int32_t>();
    auto two = items.read<std::string_view>();
    same = one && *one == 1 && two && *two == "two" && items.begin_list() && *items.read<double>() == 3.5;
  }
  expect(same, "ELST 1 \"two\" [3.5] echoed back");

  // END_AND_CALLBACK: the continuation runs on the system's host lane.
  std::promise<std::string> summed;
  server.call(courier::token("SUM_"), net::args(std::vector<std::int64_t>{1, 2, 3, 4}), timeout)
      .then([&](const wire::items_ref& r) { summed.set_value(first_item(r)); },
            [&](const courier::error& e) { summed.set_value("error " + e.describe()); });
  const std::string sum = summed.get_future().get();
  expect(sum == "10", "SUM_ [1,2,3,4] = " + sum);

  // MUL_ is a typed service (a struct on the server's side); by token it is called the same way.
  auto product = server.call_wait(courier::token("MUL_"), net::args(std::int64_t{6}, std::int64_t{7}), timeout);
  expect(first_item(product) == "42", "MUL_ 6 7 = " + first_item(product));

  // An ERROR is a courier::error with its code and text.
  auto wrong = server.call_wait(courier::token("HELO"), net::args(std::int32_t{42}), timeout);
  expect(!wrong && wrong.err().text.find("expected string") != std::string::npos,
         "HELO 42 is refused: " + (wrong ? std::string("answered") : wrong.err().describe()));

  // END: one-way sends; the call after them is answered after them.
  for (int i = 0; i < 3; ++i) server.send(courier::token("HELO"), net::args(std::string_view("again")));
  auto how_many = server.call_wait(courier::token("HOWM"), {}, timeout);
  expect(first_item(how_many) == "4", "HOWM after three sends = " + first_item(how_many));

  // Calls both ways: the server's BACK calls this client's NAME before it answers.
  auto back = server.call_wait(courier::token("BACK"), {}, timeout);
  expect(first_item(back) == "hello, services-client, I called you back", "BACK: " + first_item(back));

  // Child contexts: two channels on the one connection, each with a counter of its own.
  auto first = server.open_child("first");
  auto second = server.open_child("second");
  expect(first && second, "two child contexts opened");
  if (first && second) {
    (void)first->call_wait(courier::token("CNT_"), {}, timeout);
    auto a = first->call_wait(courier::token("CNT_"), {}, timeout);
    auto b = second->call_wait(courier::token("CNT_"), {}, timeout);
    expect(first_item(a) == "2" && first_item(b) == "1",
           "CNT_ counts per child: " + first_item(a) + ", " + first_item(b));
    auto name = second->call_wait(courier::token("NAME"), {}, timeout);
    expect(first_item(name) == "second", "the second child's NAME: " + first_item(name));
    expect(static_cast<bool>(first->close_wait(timeout)), "the first child closed");
    auto after = first->call_wait(courier::token("CNT_"), {}, timeout);
    expect(!after && after.err() == courier::errc::no_such_context, "a call in the closed child: no_such_context");
  }

  auto closed = server.close_wait(timeout);
  expect(static_cast<bool>(closed), "the connection closed in order");
  node.stop();
  std::printf("%s\n", failures == 0 ? "all answers as expected" : "some answers were wrong");
  return failures == 0 ? 0 : 1;
}
