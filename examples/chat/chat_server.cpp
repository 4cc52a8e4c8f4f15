// A chat server: a session per connection (its nick, its room), every line pushed to the others in
// the room, who come and go told to all. Any client: courier-chat-client, or from the shell
//   courier-chat-server --uds --file /tmp/chat.sock &
//   courier-chat-client --uds --file /tmp/chat.sock --nick ann            (then type; /join ROOM)
//   courier-call --uds --file /tmp/chat.sock --list
#include <courier/courier.hpp>
#include <courier/net/server.hpp>
#include <courier/net/services.hpp>
#include <courier/net/session.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

namespace net = courier::net;
using courier::token;

namespace {

struct join {
  std::uint64_t session;
  std::string nick, room;
  net::context_ref client;
};
struct say {
  std::uint64_t session;
  std::string text;
};
struct leave {
  std::uint64_t session;
  std::string why;
};
struct headcount {
  std::uint64_t session;
};

// Every room and who is in it, in one actor (no lock). A push is a send to the member's
// connection, which queues it there: a client that reads slowly holds up no one but itself.
class rooms : public courier::actor<rooms, join, say, leave, headcount> {
 public:
  std::int32_t on(const join& j) {
    on(leave{j.session, "to " + j.room});
    tell(j.room, j.nick + " joined");
    members_[j.session] = {j.nick, j.room, j.client};
    return in(j.room);
  }
  void on(const say& s) {
    auto from = members_.find(s.session);
    if (from == members_.end()) return;
    for (auto& [id, m] : members_)
      if (id != s.session && m.room == from->second.room)
        (void)m.client.send(token("MSG_"), net::args(m.room, from->second.nick, s.text));
  }
  void on(const leave& l) {
    auto it = members_.find(l.session);
    if (it == members_.end()) return;
    const member gone = std::move(it->second);
    members_.erase(it);
    tell(gone.room, gone.nick + " left (" + l.why + ")");
  }
  std::int32_t on(const headcount& h) {
    auto it = members_.find(h.session);
    return it == members_.end() ? 0 : in(it->second.room);
  }

 private:
  struct member {
    std::string nick, room;
    net::context_ref client;
  };
  void tell(const std::string& room, const std::string& text) {
    for (auto& [id, m] : members_)
      if (m.room == room) (void)m.client.send(token("NOTE"), net::args(text));
  }
  std::int32_t in(const std::string& room) const {
    return static_cast<std::int32_t>(
        std::count_if(members_.begin(), members_.end(), [&](auto& m) { return m.second.room == room; }));
  }
  std::unordered_map<std::uint64_t, member> members_;
};

// A call answered by the rooms actor: deferred, so the connection's turn never waits for it.
template <class Message>
void ask_rooms(const courier::actor_ref<rooms>& hub, net::incoming& call, Message m) {
  auto reply = std::make_shared<net::deferred_reply>(call.defer());
  hub.request(std::move(m))
      .then([reply](std::int32_t n) { reply->deliver([&](auto& w) { w.add(n); }); },
            [reply](const courier::error& e) { reply->fail(e); });
}

net::session_factory chat_sessions(courier::actor_ref<rooms> hub) {
  return [hub](const net::peer_info& peer, net::context_ref client) {
    auto nick = std::make_shared<std::string>("guest" + std::to_string(peer.id));  // this session's own
    auto services = std::make_shared<net::service_table>();
    services->add(token("NICK"),
                  [nick](net::incoming& call) {
                    auto name = call.read<std::string_view>();
                    if (name && (name->empty() || name->size() > 32))
                      call.fail(courier::error(courier::errc::invalid_argument, "a nick is 1 to 32 bytes"));
                    else if (name)
                      *nick = *name;
                  },
                  {"(string nick)", "", "names you in the rooms you join from now on"});
    services->add(token("JOIN"),
                  [hub, nick, client, id = peer.id](net::incoming& call) {
                    if (auto room = call.read<std::string_view>())
                      ask_rooms(hub, call, join{id, *nick, std::string(*room), client});
                  },
                  {"(string room)", "int32", "moves you to the room; answers how many are in it"});
    services->add(token("SAY_"),
                  [hub, id = peer.id](net::incoming& call) {
                    if (auto text = call.read<std::string_view>()) hub.send(say{id, std::string(*text)});
                  },
                  {"(string text)", "", "says it to the others in your room (MSG_ room nick text)"});
    services->add(token("MEMB"), [hub, id = peer.id](net::incoming& call) { ask_rooms(hub, call, headcount{id}); },
                  {"()", "int32", "how many are in your room"});
    net::session s;
    s.services = std::move(services);
    s.on_end = [hub, id = peer.id](const courier::error& why) { hub.send(leave{id, why.text}); };
    return s;
  };
}

}  // namespace

int main(int argc, char** argv) {
  // The rooms are one actor that every session talks to: they live only where all sessions share
  // a system, so the program runs its sessions on the pool and refuses --thread, --fork and --spawn.
  const net::server_program program{
      .name = "courier-chat-server", .offers_start_modes = true, .supported_modes = {net::start_mode::pool}};
  return net::run_server(argc, argv, program, [](net::server_setup& s) {
    return s.net.serve_sessions(chat_sessions(s.sys.spawn<rooms>()), s.where, s.config);
  });
}
