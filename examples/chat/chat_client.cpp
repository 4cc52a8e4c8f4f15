// A chat client: joins a room, prints what the others say (pushed by the server, MSG_ and NOTE)
// and says what is typed (a line; /join ROOM, /nick NAME, /quit). Scripted for tests: --say N lines,
// then wait for --expect N lines from the others or a note that contains --until TEXT.
//   courier-chat-client --uds --file /tmp/chat.sock --nick ann --room lobby
#include <courier/courier.hpp>
#include <courier/net/context.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>
#include <courier/net/services.hpp>

#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace net = courier::net;
using courier::token;
using namespace std::chrono_literals;

namespace {

struct script {
  std::string nick, room = "lobby", until;
  int say = 0, expect = -1, members = 0, slow_ms = 0;
};

// What the server pushed, counted for the script.
struct inbox {
  std::mutex mutex;
  std::condition_variable changed;
  int lines = 0;
  bool noted = false;
};

std::string text_at(courier::wire::reader& r) {
  auto s = r.read<std::string_view>();
  return s ? std::string(*s) : std::string();
}

}  // namespace

int main(int argc, char** argv) {
  script sc;
  const net::extra_options extra = [&](CLI::App& app) {
    app.add_option("--nick", sc.nick, "Your name in the room");
    app.add_option("--room", sc.room, "The room to join (default lobby)");
    app.add_option("--say", sc.say, "Scripted: say this many numbered lines, then wait (no typing)");
    app.add_option("--expect", sc.expect, "Scripted: exit once this many lines of the others have come");
    app.add_option("--until", sc.until, "Scripted: exit once a note containing this text has come");
    app.add_option("--members", sc.members, "Scripted: before saying anything, wait until the room has this many");
    app.add_option("--slow-ms", sc.slow_ms, "Take this long over each line pushed to us (a slow reader)");
  };
  auto opts = net::parse_options(argc, argv, "courier-chat-client", extra);
  if (!opts) {
    std::fprintf(stderr, "%s", net::options_error("courier-chat-client", opts.err()).c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", net::options_help("courier-chat-client", extra).c_str());
    return 0;
  }
  const bool scripted = sc.say > 0 || sc.expect >= 0 || !sc.until.empty();
  inbox in;
  auto pushed = std::make_shared<net::service_table>();
  pushed->add(token("MSG_"), [&](net::incoming& call) {
    auto& r = call.items();
    const std::string room = text_at(r), nick = text_at(r), text = text_at(r);
    if (sc.slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sc.slow_ms));
    std::printf("[%s] %s: %s\n", room.c_str(), nick.c_str(), text.c_str());
    std::fflush(stdout);
    std::lock_guard lock(in.mutex);
    ++in.lines;
    in.changed.notify_all();
  });
  pushed->add(token("NOTE"), [&](net::incoming& call) {
    const std::string text = text_at(call.items());
    std::printf("* %s\n", text.c_str());
    std::fflush(stdout);
    std::lock_guard lock(in.mutex);
    if (!sc.until.empty() && text.find(sc.until) != std::string::npos) in.noted = true;
    in.changed.notify_all();
  });

  courier::system sys;
  net::node node(sys);
  auto parent = node.connect(opts->where, net::config_from(*opts), pushed);
  auto fail = [](const char* what, const courier::error& e) {
    std::fprintf(stderr, "courier-chat-client: %s: %s\n", what, e.describe().c_str());
    return 1;
  };
  if (!parent) return fail("connect", parent.err());
  const auto timeout = opts->timeout;
  if (!sc.nick.empty())
    if (auto ok = parent->call_wait(token("NICK"), net::args(std::string_view(sc.nick)), timeout); !ok)
      return fail("NICK", ok.err());
  auto joined = parent->call_wait(token("JOIN"), net::args(std::string_view(sc.room)), timeout);
  if (!joined) return fail("JOIN", joined.err());
  std::printf("joined %s (%d here)\n", sc.room.c_str(), joined->items().read<std::int32_t>().value_or(0));
  std::fflush(stdout);

  if (!scripted) {  // typed lines
    for (std::string line; std::getline(std::cin, line);) {
      if (line == "/quit") break;
      const bool join = line.rfind("/join ", 0) == 0, nick = line.rfind("/nick ", 0) == 0;
      if (join || nick) {
        auto ok = parent->call_wait(join ? token("JOIN") : token("NICK"), net::args(std::string_view(line).substr(6)),
                                    timeout);
        if (!ok) std::fprintf(stderr, "courier-chat-client: %s\n", ok.err().describe().c_str());
      } else if (!parent->send(token("SAY_"), net::args(std::string_view(line)))) {
        return fail("say", courier::error(courier::errc::connection_lost, "the connection has ended"));
      }
    }
    return parent->close_wait(timeout) ? 0 : 1;
  }

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (sc.members > 0) {  // so that everyone hears every line
    auto n = parent->call_wait(token("MEMB"), {}, timeout);
    if (!n) return fail("MEMB", n.err());
    if (auto count = n->items().read<std::int32_t>(); count && *count >= sc.members) break;
    if (std::chrono::steady_clock::now() > deadline)
      return fail("waiting for the others", courier::error(courier::errc::request_timeout, "not enough members"));
    std::this_thread::sleep_for(10ms);
  }
  for (int i = 1; i <= sc.say; ++i) {
    const std::string line = sc.nick + " line " + std::to_string(i);
    if (!parent->send(token("SAY_"), net::args(std::string_view(line))))
      return fail("say", courier::error(courier::errc::connection_lost, "the connection has ended"));
  }
  std::unique_lock lock(in.mutex);
  const bool done = in.changed.wait_until(
      lock, deadline, [&] { return (sc.expect < 0 || in.lines >= sc.expect) && (sc.until.empty() || in.noted); });
  lock.unlock();
  if (!done)
    std::fprintf(stderr, "courier-chat-client: %d lines came of %d expected%s\n", in.lines, sc.expect,
                 sc.until.empty() || in.noted ? "" : ", and no such note");
  (void)parent->close_wait(timeout);
  return done ? 0 : 1;
}
