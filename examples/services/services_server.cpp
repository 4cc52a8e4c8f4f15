// A libmsgque-style server: services registered by token, each reading typed items from the call
// and writing typed items into the reply, with no message structs shared with its callers. Any
// client calls it; from the shell, courier-call:
//   courier-call --list @ courier-services-server
//   courier-call HELO world @ courier-services-server
//   courier-services-server --uds --file /tmp/services.sock &
//   courier-call --uds --file /tmp/services.sock ELST i32:1 str:two 'list:[f64:3.5,bool:true]'
//   courier-call --context mine CNT_ @ courier-services-server      (a child context of its own)
//   courier-services-client @ courier-services-server                  (the C++ client, calls both ways)
#include <courier/courier.hpp>
#include <courier/fields.hpp>
#include <courier/net/local_context.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>
#include <courier/net/server.hpp>
#include <courier/net/services.hpp>
#include <courier/wire/copy.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace wire = courier::wire;

namespace {

// MUL_, a typed service beside the dynamic ones: the struct names the token and the fields, the
// codec reads them and writes the returned value, and reflection reports both (with the names).
struct multiply {
  static constexpr courier::token token{"MUL_"};
  static constexpr std::string_view courier_description = "multiplies; an overflow is an ERROR";
  std::int64_t a = 0, b = 0;
  COURIER_FIELDS(a, b);
};

std::shared_ptr<const courier::net::service_table> services(std::shared_ptr<std::int64_t> greetings) {
  auto table = std::make_shared<courier::net::service_table>();
  // HELO: a hello world. A caller that sends another item type gets type_mismatch, naming it.
  table->add(courier::token("HELO"),
             [greetings](courier::net::incoming& call) {
               auto name = call.read<std::string_view>();
               if (!name) return;
               ++*greetings;
               call.reply().add("hello, " + std::string(*name));
             },
             {"(string name)", "string", "says hello"});
  // ELST: whatever items it is given, echoed back in order (no signature: any items).
  table->add(courier::token("ELST"), [](courier::net::incoming& call) { wire::copy_items(call.items(), call.reply()); },
             {"", "", "echoes its items back, whatever they are"});
  // BACK: calls the client back (its NAME service, in the same context, on the same connection)
  // and greets it by the name it gave. The handler must not block: it defers its reply, and the
  // callback's continuation answers.
  table->add(courier::token("BACK"),
             [](courier::net::incoming& call) {
               auto reply = std::make_shared<courier::net::deferred_reply>(call.defer());
               call.peer()
                   .call(courier::token("NAME"), {}, std::chrono::seconds(5))
                   .then(
                       [reply](const wire::items_ref& answer) {
                         auto items = answer.items();
                         auto name = items.read<std::string_view>();
                         if (!name)
                           return static_cast<void>(reply->fail(courier::error(
                               courier::errc::invalid_argument, "NAME answered no string: " + name.err().message())));
                         reply->deliver([&](wire::frame_writer& w) {
                           w.add("hello, " + std::string(*name) + ", I called you back");
                         });
                       },
                       [reply](const courier::error& e) { reply->fail(e); });
             },
             {"()", "string", "calls the client's NAME service back and greets it by that name"});
  // SUM_: the sum of a list of int64.
  table->add(courier::token("SUM_"),
             [](courier::net::incoming& call) {
               wire::reader& in = call.items();
               std::int64_t total = 0;
               if (in.begin_list()) {
                 while (in.peek() == wire::item_type::int64) total += *in.read<std::int64_t>();
                 if (in.end_list()) return static_cast<void>(call.reply().add(total));
               }
               call.fail(courier::error(courier::errc::invalid_argument, "SUM_ takes a list of int64"));
             },
             {"(list of int64 values)", "int64", "adds them up"});
  table->on([](const multiply& m) -> courier::result<std::int64_t> {
    std::int64_t product = 0;
    if (__builtin_mul_overflow(m.a, m.b, &product))
      return courier::error(courier::errc::invalid_argument, "MUL_: the product overflows int64");
    return product;
  });
  // Child contexts (courier-call --context NAME): each child the client opens gets its own table,
  // with a counter of its own and its name.
  table->children([](courier::token kind, std::string_view name) -> std::shared_ptr<const courier::net::service_table> {
    if (kind != courier::token{}) return nullptr;  // only the default kind
    auto child = std::make_shared<courier::net::service_table>();
    auto counter = std::make_shared<std::int64_t>(0);
    child->add(courier::token("CNT_"), [counter](courier::net::incoming& call) { call.reply().add(++*counter); },
               {"()", "int64", "counts its calls, in this child context only"});
    child->add(courier::token("NAME"), [n = std::string(name)](courier::net::incoming& call) { call.reply().add(n); },
               {"()", "string", "this child context's name"});
    return child;
  });
  // HOWM: how many hellos so far. Every connection's calls share the counter: the handlers run
  // in one context actor's turns, one at a time (see main), so it needs no lock.
  table->add(courier::token("HOWM"), [greetings](courier::net::incoming& call) { call.reply().add(*greetings); },
             {"()", "int64", "how many hellos were said"});
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  courier::net::server_program program{.name = "courier-services-server"};
  program.base.name = "services-server";
  program.base.max_child_contexts = 64;
  return courier::net::run_server(argc, argv, program, [](courier::net::server_setup& s) {
    // The parent context is an actor of its own: every connection hands it its calls, so the
    // services' state is the one actor's, whichever worker runs each connection. Children the
    // clients open come from the table's factory, each served on its connection.
    auto table = services(std::make_shared<std::int64_t>(0));
    return s.net.serve_on(courier::net::serve_locally(s.sys, table), s.where, s.config, table);
  });
}
