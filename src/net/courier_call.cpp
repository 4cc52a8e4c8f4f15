// courier-call: calls any Courier server from the shell, in the spirit of grpcurl.
//   courier-call [transport options] --list                  the services, one per line
//   courier-call [transport options] TOKEN ARG...            a call; prints the reply's items
//   courier-call TOKEN ARG... @ server-program args...        over pipe (starts the server)
// Arguments are converted by the service's reflected signature (docs/protocol.md section 15); for a
// service that declares none, each takes a type prefix (i32:2, str:abc, f64:1.5, bin:0a0b,
// list:[i32:1,str:x]). It speaks the protocol with the engine directly (courier/wire/engine.hpp) on one
// blocking loop: no actor system is needed for one call.
#include <poll.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "courier/error.hpp"
#include "courier/net/options.hpp"
#include "courier/net/socket.hpp"
#include "courier/net/transport.hpp"
#include "courier/wire.hpp"

namespace {

namespace w = courier::wire;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

// Exit codes, documented in --help.
constexpr int exit_ok = 0;
constexpr int exit_error_reply = 1;  // the server answered with an ERROR
constexpr int exit_usage = 2;        // bad options or arguments
constexpr int exit_unreachable = 3;  // cannot connect
constexpr int exit_refused = 4;      // the handshake failed or the server refused the connection
constexpr int exit_timeout = 5;      // no answer within --timeout
constexpr int exit_lost = 6;         // the connection broke, or the peer broke the protocol

const char* const exit_codes_help =
    "Exit status: 0 the call was answered (or --list printed); 1 the server answered with an ERROR\n"
    "(code and text printed); 2 bad options or arguments; 3 the server cannot be reached; 4 the\n"
    "handshake failed or the server refused the connection; 5 no answer within --timeout; 6 the\n"
    "connection broke or the peer broke the protocol.\n"
    "Arguments are converted by the service's signature (--list shows it). A service without one\n"
    "takes typed arguments: bool:true i8: i16: i32: i64: u8: u16: u32: u64: f32: f64: str: bin:HEX\n"
    "list:[i32:1,str:x]. Lists and records are written [a,b,...].\n";

struct failure {
  int status;
  std::string text;
};

// ---- signatures (docs/protocol.md section 15) ---------------------------------------------------

struct type_node {
  enum class shape : std::uint8_t { scalar, string, binary, list, record } kind = shape::scalar;
  w::item_type scalar = w::item_type::none;
  std::size_t count = 0;            // list of N T: N; 0 for any number
  std::vector<type_node> children;  // list: the element type; record: the fields
  std::vector<std::string> names;   // record: the field names (may be empty)
};

struct signature_parser {
  std::string_view text;
  std::size_t at = 0;

  bool eat(std::string_view s) {
    if (text.substr(at, s.size()) != s) return false;
    at += s.size();
    return true;
  }
  std::optional<w::item_type> scalar_named(std::string_view name) {
    static constexpr std::pair<std::string_view, w::item_type> all[] = {
        {"bool", w::item_type::boolean},    {"int8", w::item_type::int8},      {"int16", w::item_type::int16},
        {"int32", w::item_type::int32},     {"int64", w::item_type::int64},    {"uint8", w::item_type::uint8},
        {"uint16", w::item_type::uint16},   {"uint32", w::item_type::uint32},  {"uint64", w::item_type::uint64},
        {"float32", w::item_type::float32}, {"float64", w::item_type::float64}};
    for (const auto& [n, t] : all)
      if (n == name) return t;
    return std::nullopt;
  }
  std::string_view word() {
    const std::size_t from = at;
    while (at < text.size() && (std::isalnum(static_cast<unsigned char>(text[at])) || text[at] == '_')) ++at;
    return text.substr(from, at - from);
  }
  std::optional<type_node> type() {
    type_node t;
    if (eat("list of ")) {
      t.kind = type_node::shape::list;
      if (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) {
        const std::string_view n = word();
        std::from_chars(n.data(), n.data() + n.size(), t.count);
        if (!eat(" ")) return std::nullopt;
      }
      auto element = type();
      if (!element) return std::nullopt;
      t.children.push_back(std::move(*element));
      return t;
    }
    if (eat("record")) {
      t.kind = type_node::shape::record;
      if (!fields(t)) return std::nullopt;
      return t;
    }
    const std::string_view name = word();
    if (name == "string")
      t.kind = type_node::shape::string;
    else if (name == "binary")
      t.kind = type_node::shape::binary;
    else if (auto s = scalar_named(name))
      t.scalar = *s;
    else
      return std::nullopt;
    return t;
  }
  // "(" [field {", " field}] ")" into a record node.
  bool fields(type_node& into) {
    if (!eat("(")) return false;
    if (eat(")")) return true;
    for (;;) {
      auto t = type();
      if (!t) return false;
      std::string name;
      if (eat(" ")) name = std::string(word());
      into.children.push_back(std::move(*t));
      into.names.push_back(std::move(name));
      if (eat(")")) return true;
      if (!eat(", ")) return false;
    }
  }
};

// The arguments signature as a record of the top-level items; nothing when it does not parse.
std::optional<type_node> parse_arguments(std::string_view text) {
  signature_parser p{text};
  type_node record;
  record.kind = type_node::shape::record;
  if (!p.fields(record) || p.at != text.size()) return std::nullopt;
  return record;
}

// The result signature: "()" or "(fields)" as a record of top-level items, one type as a record of one.
std::optional<type_node> parse_result(std::string_view text) {
  if (text.starts_with("(")) return parse_arguments(text);
  signature_parser p{text};
  auto t = p.type();
  if (!t || p.at != text.size()) return std::nullopt;
  type_node record;
  record.kind = type_node::shape::record;
  record.children.push_back(std::move(*t));
  record.names.emplace_back();
  return record;
}

// Whether the items `r` reads next are of type `t`; `why` says where they are not.
bool matches(w::reader& r, const type_node& t, std::string& why) {
  const auto expect = [&](w::item_type want) {
    if (r.peek() == want) return static_cast<bool>(r.skip());
    why = std::string("a ") + w::to_string(r.peek()) + " where a " + w::to_string(want) + " belongs (offset " +
          std::to_string(r.offset()) + ")";
    return false;
  };
  switch (t.kind) {
    case type_node::shape::scalar: return expect(t.scalar);
    case type_node::shape::string: return expect(w::item_type::string);
    case type_node::shape::binary: return expect(w::item_type::binary);
    case type_node::shape::list: {
      if (r.peek() != w::item_type::list || !r.begin_list()) return expect(w::item_type::list);
      std::size_t n = 0;
      for (; r.peek() != w::item_type::list_end; ++n)
        if (r.peek() == w::item_type::none || !matches(r, t.children[0], why)) {
          if (why.empty()) why = "a list that does not end";
          return false;
        }
      if (t.count != 0 && n != t.count) {
        why = "a list of " + std::to_string(n) + " elements where " + std::to_string(t.count) + " belong";
        return false;
      }
      return static_cast<bool>(r.end_list());
    }
    case type_node::shape::record: {
      if (r.peek() != w::item_type::list || !r.begin_list()) return expect(w::item_type::list);
      for (const type_node& field : t.children)
        if (!matches(r, field, why)) return false;
      if (r.peek() != w::item_type::list_end) {
        why = "items left over in a record (offset " + std::to_string(r.offset()) + ")";
        return false;
      }
      return static_cast<bool>(r.end_list());
    }
  }
  return false;
}

// Whether a body's top-level items are the fields of `record` (a parsed result signature).
bool body_matches(std::span<const std::byte> body, const type_node& record, std::string& why) {
  w::reader r(body);
  for (const type_node& field : record.children) {
    if (!r.has_more()) {
      why = "fewer items than the result has";
      return false;
    }
    if (!matches(r, field, why)) return false;
  }
  if (r.has_more()) {
    why = "items left over after the result (offset " + std::to_string(r.offset()) + ")";
    return false;
  }
  return true;
}

// ---- arguments ------------------------------------------------------------------------------------

// Splits "[a,b,[c,d]]" into its top-level elements; nothing when the brackets do not match.
std::optional<std::vector<std::string>> split_list(std::string_view text) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return std::nullopt;
  text = text.substr(1, text.size() - 2);
  std::vector<std::string> parts;
  if (text.empty()) return parts;
  int depth = 0;
  std::size_t from = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') ++depth;
    if (text[i] == ']' && --depth < 0) return std::nullopt;
    if (text[i] == ',' && depth == 0) {
      parts.emplace_back(text.substr(from, i - from));
      from = i + 1;
    }
  }
  if (depth != 0) return std::nullopt;
  parts.emplace_back(text.substr(from));
  return parts;
}

template <class T>
std::optional<T> number(std::string_view s) {
  T v{};
  if constexpr (std::is_floating_point_v<T>) {
    const std::string copy(s);
    char* end = nullptr;
    const double d = std::strtod(copy.c_str(), &end);
    if (copy.empty() || end != copy.c_str() + copy.size()) return std::nullopt;
    return static_cast<T>(d);
  } else {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return v;
  }
}

std::optional<std::vector<std::byte>> hex_bytes(std::string_view s) {
  if (s.size() % 2 != 0) return std::nullopt;
  std::vector<std::byte> out;
  for (std::size_t i = 0; i < s.size(); i += 2) {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + i + 2, v, 16);
    if (ec != std::errc() || p != s.data() + i + 2) return std::nullopt;
    out.push_back(static_cast<std::byte>(v));
  }
  return out;
}

// Writes one scalar given as text; false when the text is not such a value.
bool add_scalar(w::frame_writer& out, w::item_type t, std::string_view s) {
  bool added = false;
  w::with_scalar_type(t, [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      if (s == "true" || s == "1" || s == "false" || s == "0") {
        out.add(s == "true" || s == "1");
        added = true;
      }
    } else if (auto v = number<T>(s)) {
      out.add(*v);
      added = true;
    }
  });
  return added;
}

std::string describe_type(const type_node& t);

std::string describe_fields(const type_node& record) {
  std::string s = "(";
  for (std::size_t i = 0; i < record.children.size(); ++i) {
    if (i != 0) s += ", ";
    s += describe_type(record.children[i]);
    if (i < record.names.size() && !record.names[i].empty()) s += " " + record.names[i];
  }
  return s + ")";
}

std::string describe_type(const type_node& t) {
  switch (t.kind) {
    case type_node::shape::scalar: return w::to_string(t.scalar);
    case type_node::shape::string: return "string";
    case type_node::shape::binary: return "binary";
    case type_node::shape::list:
      return "list of " + (t.count != 0 ? std::to_string(t.count) + " " : std::string()) + describe_type(t.children[0]);
    case type_node::shape::record: return "record" + describe_fields(t);
  }
  return "?";
}

// Writes `text` as an item of type `t`; the error says what was expected.
std::optional<std::string> add_typed(w::frame_writer& out, const type_node& t, std::string_view text) {
  const auto expected = [&] { return "'" + std::string(text) + "' is not of type " + describe_type(t); };
  switch (t.kind) {
    case type_node::shape::scalar:
      if (!add_scalar(out, t.scalar, text)) return expected();
      return std::nullopt;
    case type_node::shape::string: out.add(text); return std::nullopt;
    case type_node::shape::binary: {
      auto bytes = hex_bytes(text);
      if (!bytes) return expected() + " (hex digits, two per byte)";
      out.add_binary(*bytes);
      return std::nullopt;
    }
    case type_node::shape::list:
    case type_node::shape::record: {
      auto parts = split_list(text);
      if (!parts) return expected() + " (written [a,b,...])";
      if (t.kind == type_node::shape::list && t.count != 0 && parts->size() != t.count)
        return expected() + " (" + std::to_string(parts->size()) + " elements, not " + std::to_string(t.count) + ")";
      if (t.kind == type_node::shape::record && parts->size() != t.children.size())
        return expected() + " (" + std::to_string(parts->size()) + " fields, not " + std::to_string(t.children.size()) +
               ")";
      out.begin_list();
      for (std::size_t i = 0; i < parts->size(); ++i)
        if (auto e = add_typed(out, t.kind == type_node::shape::list ? t.children[0] : t.children[i], (*parts)[i]))
          return e;
      out.end_list();
      return std::nullopt;
    }
  }
  return expected();
}

// An argument with its type prefix (for a service without a signature): "i32:2", "list:[...]".
std::optional<std::string> add_prefixed(w::frame_writer& out, std::string_view text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos)
    return "'" + std::string(text) +
           "' has no type prefix (the service declares no signature): write i32:" + std::string(text) +
           ", str:" + std::string(text) + ", ...";
  const std::string_view prefix = text.substr(0, colon), value = text.substr(colon + 1);
  static constexpr std::pair<std::string_view, w::item_type> scalars[] = {
      {"bool", w::item_type::boolean}, {"i8", w::item_type::int8},    {"i16", w::item_type::int16},
      {"i32", w::item_type::int32},    {"i64", w::item_type::int64},  {"u8", w::item_type::uint8},
      {"u16", w::item_type::uint16},   {"u32", w::item_type::uint32}, {"u64", w::item_type::uint64},
      {"f32", w::item_type::float32},  {"f64", w::item_type::float64}};
  for (const auto& [p, t] : scalars) {
    if (p != prefix) continue;
    if (!add_scalar(out, t, value))
      return "'" + std::string(value) + "' is not of type " + std::string(w::to_string(t));
    return std::nullopt;
  }
  if (prefix == "str") {
    out.add(value);
    return std::nullopt;
  }
  if (prefix == "bin") {
    auto bytes = hex_bytes(value);
    if (!bytes) return "'" + std::string(value) + "' is not binary (hex digits, two per byte)";
    out.add_binary(*bytes);
    return std::nullopt;
  }
  if (prefix == "list") {
    auto parts = split_list(value);
    if (!parts) return "'" + std::string(value) + "' is not a list (written [i32:1,str:x])";
    out.begin_list();
    for (const auto& part : *parts)
      if (auto e = add_prefixed(out, part)) return e;
    out.end_list();
    return std::nullopt;
  }
  return "unknown type prefix '" + std::string(prefix) + "' (bool i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 str bin list)";
}

// ---- printing items ---------------------------------------------------------------------------------

// The next item of `r` as JSON (lists as arrays, binary as a hex string).
std::optional<json> item_json(w::reader& r) {
  std::optional<json> scalar;
  if (w::with_scalar_type(r.peek(), [&]<class T>() {
        if (auto v = r.read<T>()) scalar = json(*v);
      }))
    return scalar;
  switch (r.peek()) {
    case w::item_type::string: {
      auto v = r.read<std::string_view>();
      if (!v) return std::nullopt;
      return json(std::string(*v));
    }
    case w::item_type::binary: {
      auto v = r.read<std::span<const std::byte>>();
      if (!v) return std::nullopt;
      static constexpr char digits[] = "0123456789abcdef";
      std::string hex;
      for (std::byte b : *v) {
        hex += digits[std::to_integer<unsigned>(b) >> 4];
        hex += digits[std::to_integer<unsigned>(b) & 15];
      }
      return json(hex);
    }
    case w::item_type::list: {
      if (!r.begin_list()) return std::nullopt;
      json list = json::array();
      while (r.peek() != w::item_type::list_end) {
        auto e = item_json(r);
        if (!e) return std::nullopt;
        list.push_back(std::move(*e));
      }
      if (!r.end_list()) return std::nullopt;
      return list;
    }
    default: return std::nullopt;
  }
}

// The top-level items of a body, as a JSON array.
std::optional<json> items_json(const w::frame_view& f) {
  w::reader r = f.items();
  json items = json::array();
  while (r.has_more()) {
    auto item = item_json(r);
    if (!item) return std::nullopt;
    items.push_back(std::move(*item));
  }
  return items;
}

// One item as text: strings bare, lists as [a, b], numbers as JSON writes them.
std::string item_text(const json& item) {
  if (item.is_string()) return item.get<std::string>();
  if (item.is_array()) {
    std::string s = "[";
    for (std::size_t i = 0; i < item.size(); ++i) s += (i ? ", " : "") + item_text(item[i]);
    return s + "]";
  }
  return item.dump();
}

// ---- the connection -------------------------------------------------------------------------------

struct answer {
  w::kind kind = w::kind::reply;
  json items = json::array();   // a reply's items
  std::uint32_t code = 0;       // an error's code
  std::string text;             // an error's text
  std::string body_error;       // the reply's items could not be read
  std::vector<std::byte> body;  // a reply's body, as it came
};

class call_client {
 public:
  call_client(courier::net::connected c, const courier::net::options& opts)
      : child_(std::move(c.child)),
        sock_(std::move(c.sock)),
        timeout_(opts.timeout),
        name_(opts.name.empty() ? std::string("courier-call") : opts.name),
        engine_(w::role::initiator, config(opts, name_)) {}

  std::optional<failure> open() {
    engine_.start(out_, clock_type::now());
    const auto until = clock_type::now() + timeout_;
    while (engine_.state() == w::engine_state::handshaking) {
      if (auto f = step(until, "handshake")) return f->status == exit_lost ? failure{exit_refused, f->text} : *f;
    }
    if (engine_.state() != w::engine_state::open) return ended();
    return std::nullopt;
  }

  // Sends a call (or a send) with the body `args` wrote; waits for its answer unless it is a send.
  std::optional<failure> call(courier::token tok, std::uint64_t context, bool one_way, const w::out_buffer& args,
                              answer& into) {
    const std::uint64_t txn = one_way ? 0 : next_txn_++;
    {
      w::frame_writer f(
          out_, w::frame_header{w::protocol_version, one_way ? w::kind::send : w::kind::call, 0, 0, tok, txn, context},
          engine_.agreed().peer_limits());
      const auto items = args.view().subspan(w::header_size);  // args holds one frame: its items follow
      if (!items.empty()) std::memcpy(out_.extend(items.size()), items.data(), items.size());
      if (!f.finish()) return failure{exit_usage, "the call does not fit in a frame the server accepts"};
    }
    if (!one_way) engine_.call_sent();
    waiting_ = txn;
    answer_ = &into;
    answered_ = false;
    const auto until = clock_type::now() + timeout_;
    if (one_way) {
      // Nothing answers a send: flush it, then close in order, so that it has arrived when we exit.
      engine_.close(out_, "done", clock_type::now());
      while (engine_.state() == w::engine_state::closing)
        if (auto f = step(until, "close")) return f->status == exit_lost ? std::nullopt : f;
      return std::nullopt;
    }
    while (!answered_)
      if (auto f = step(until, "answer")) return f;
    return std::nullopt;
  }

  // Opens a child context of the default kind named `name`; its id, or the failure. An ERROR
  // answer (the server refused it) is in `into`, and the id is 0.
  std::optional<failure> open_child(const std::string& name, answer& into, std::uint64_t& id) {
    const std::uint64_t txn = next_txn_++;
    id = engine_.open_context(out_, txn, courier::token{}, name);
    if (id == 0)
      return failure{exit_refused, "--context " + name + ": the server accepts no child contexts (it announced none)"};
    waiting_ = txn;
    answer_ = &into;
    answered_ = false;
    const auto until = clock_type::now() + timeout_;
    while (!answered_)
      if (auto f = step(until, "answer to the context's open")) return f;
    if (into.kind == w::kind::error) id = 0;
    return std::nullopt;
  }

  void close() {
    if (engine_.state() != w::engine_state::open) return;
    engine_.close(out_, "done", clock_type::now());
    const auto until = clock_type::now() + std::chrono::milliseconds(500);
    while (engine_.state() == w::engine_state::closing && !step(until, "close")) {
    }
  }

  // The engine's handler.
  void on_frame(const w::frame_view& f) {
    if (f.kind() == w::kind::call) {  // a server calling its client: we serve nothing
      (void)w::encode_error(out_, f.transaction_id(), f.context_id(),
                            static_cast<std::uint32_t>(courier::errc::no_such_service), "courier-call serves nothing",
                            f.token());
      engine_.reply_sent(out_, f.context_id());
      return;
    }
    if ((f.kind() != w::kind::reply && f.kind() != w::kind::error) || f.transaction_id() != waiting_ || answered_)
      return;
    answered_ = true;
    answer_->kind = f.kind();
    if (f.kind() == w::kind::error) {
      w::reader r = f.items();
      auto code = r.read<std::uint32_t>();
      auto text = r.read<std::string_view>();
      answer_->code = code ? *code : 0;
      answer_->text = text ? std::string(*text) : std::string();
      return;
    }
    answer_->body.assign(f.body().begin(), f.body().end());
    if (auto items = items_json(f))
      answer_->items = std::move(*items);
    else
      answer_->body_error = "the reply's items cannot be read";
  }
  void on_bad_reply(std::uint64_t txn, const w::error& e) {
    if (txn != waiting_ || answered_) return;
    answered_ = true;
    answer_->kind = w::kind::error;
    answer_->code = static_cast<std::uint32_t>(courier::errc::protocol_error);
    answer_->text = "the reply was spoiled: " + e.message();
  }

 private:
  // The engine copies the name when it is made; `name` only has to live until then.
  static w::engine_config config(const courier::net::options& opts, const std::string& name) {
    w::engine_config cfg;
    cfg.local.peer_name = name;
    cfg.local.nonce = std::random_device{}() | 1u;
    cfg.handshake_timeout = opts.timeout;
    cfg.ping_interval = std::chrono::milliseconds(0);  // one call, bounded by --timeout
    return cfg;
  }

  // Writes what is queued, then waits for bytes (until `until`) and feeds them.
  std::optional<failure> step(clock_type::time_point until, const char* waiting_for) {
    if (auto f = flush()) return f;
    if (engine_.state() == w::engine_state::closed || engine_.state() == w::engine_state::failed) return ended();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now());
    if (left.count() <= 0)
      return failure{exit_timeout,
                     std::string("no ") + waiting_for + " within " + std::to_string(timeout_.count()) + " ms"};
    pollfd p{sock_.fd(), POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 100)));
    if (n <= 0) return std::nullopt;
    std::byte buffer[65536];
    auto got = courier::net::read_some(sock_, buffer);
    if (got.status == courier::net::io_result::ok) {
      engine_.feed(std::span<const std::byte>(buffer, got.bytes), out_, *this, clock_type::now());
    } else if (got.status == courier::net::io_result::eof || got.status == courier::net::io_result::failed) {
      engine_.on_eof();
    }
    if (auto f = flush()) return f;
    if (engine_.state() == w::engine_state::failed) return ended();
    return std::nullopt;
  }

  std::optional<failure> flush() {
    while (sent_ < out_.size()) {
      const iovec piece{const_cast<std::byte*>(out_.data()) + sent_, out_.size() - sent_};
      auto put = courier::net::write_some(sock_, {&piece, 1});
      if (put.status == courier::net::io_result::ok) {
        sent_ += put.bytes;
      } else if (put.status == courier::net::io_result::would_block) {
        pollfd p{sock_.fd(), POLLOUT, 0};
        (void)::poll(&p, 1, 100);
      } else {
        return lost("the connection broke while writing");
      }
    }
    out_.clear();
    sent_ = 0;
    return std::nullopt;
  }

  failure ended() {
    const w::engine_failure& why = engine_.failure();
    std::string text = why.text.empty() ? std::string("the connection ended") : why.text;
    if (why.by_peer) text = "the server ended the connection: " + text + " (code " + std::to_string(why.code) + ")";
    return lost(std::move(text));
  }

  // The connection is gone (`text` says how it ended here): with a pipe server's exit status
  // whenever it has exited, however the end showed first (a read, or a write).
  failure lost(std::string text) {
    if (child_) {
      if (child_->wait(std::chrono::milliseconds(200)) >= 0) text += "; server process " + child_->describe_exit();
    }
    const bool before_open = !opened_once();
    return failure{before_open ? exit_refused : exit_lost, text};
  }
  bool opened_once() const noexcept { return engine_.agreed().max_frame_size != 0; }

  // The child first: members go in reverse, so the socket closes before the child is reaped, and
  // a pipe server sees its stream end and exits instead of waiting out the grace and a SIGKILL.
  std::optional<courier::net::child_process> child_;
  courier::net::socket sock_;
  std::chrono::milliseconds timeout_;
  std::string name_;
  w::engine engine_;
  w::out_buffer out_;
  std::size_t sent_ = 0;
  std::uint64_t next_txn_ = 1;
  std::uint64_t waiting_ = 0;
  bool answered_ = false;
  answer* answer_ = nullptr;
};

struct service {
  std::string token;
  int kind = 1;
  std::string arguments, result, description;
};

std::optional<std::vector<service>> services_of(const answer& a) {
  std::vector<service> out;
  for (const json& entry : a.items) {
    if (!entry.is_array() || entry.size() < 5 || !entry[0].is_string() || !entry[1].is_number() ||
        !entry[2].is_string() || !entry[3].is_string() || !entry[4].is_string())
      return std::nullopt;
    out.push_back({entry[0].get<std::string>(), entry[1].get<int>(), entry[2].get<std::string>(),
                   entry[3].get<std::string>(), entry[4].get<std::string>()});
  }
  return out;
}

std::string error_name(std::uint32_t code) {
  if (code != 0 && code < 256) return w::to_string(static_cast<w::errc>(code));
  const std::error_code ec(static_cast<int>(code), courier::courier_category());
  return code < 65536 ? ec.message() : "application error";
}

// The call's words (TOKEN ARG...) are taken out of argv before the options are parsed: they run
// from the first word that is not an option (or an option's value) up to `@`, and are passed on as
// written (CLI11 would read "-5" as an option and split "[1,2]" into two values).
std::vector<std::string> take_call_words(int argc, char** argv, std::vector<const char*>& rest) {
  static constexpr std::string_view with_value[] = {"--file",    "--host",       "--port",      "--timeout",
                                                    "--name",    "--buffersize", "--max-frame", "--debug",
                                                    "--context", "--keepalive"};
  std::vector<std::string> words;
  rest.push_back(argv[0]);
  int i = 1;
  for (; i < argc && std::string_view(argv[i]) != "@"; ++i) {
    const std::string_view a(argv[i]);
    if (!words.empty() || (!a.starts_with("-") && !a.empty())) {
      words.emplace_back(a);
      continue;
    }
    rest.push_back(argv[i]);
    for (std::string_view v : with_value)
      if (a == v && i + 1 < argc) rest.push_back(argv[++i]);
  }
  for (; i < argc; ++i) rest.push_back(argv[i]);
  return words;
}

int run(int argc, char** argv) {
  bool list = false, as_json = false, one_way = false;
  std::string context_name;
  std::vector<const char*> rest;
  const std::vector<std::string> words = take_call_words(argc, argv, rest);
  const courier::net::extra_options extra = [&](CLI::App& app) {
    app.add_flag("--list", list, "List the server's services: token, signature, description");
    app.add_flag("--json", as_json, "Print the reply (or the list) as JSON");
    app.add_flag("--send", one_way, "Send one-way (END): no reply is awaited");
    app.add_option("--context", context_name, "Open a child context of this name first and call in it")
        ->type_name("NAME");
    app.footer(std::string("After the options: TOKEN ARG... (the service and its arguments).\n") + exit_codes_help);
  };
  auto opts = courier::net::parse_options(static_cast<int>(rest.size()), rest.data(), "courier-call", extra);
  if (!opts) {
    std::fprintf(stderr, "%s", courier::net::options_error("courier-call", opts.err()).c_str());
    return exit_usage;
  }
  if (opts->help) {
    std::printf("%s", courier::net::options_help("courier-call", extra).c_str());  // the footer has the exit codes
    return exit_ok;
  }
  // Reflection is a service of every server: calling it is asking for the list.
  const bool reflection_called = words.size() == 1 && words[0] == w::reflection_token.view();
  if (reflection_called) list = true;
  if (!list && words.empty()) {
    std::fprintf(stderr, "courier-call: name a service (TOKEN ARG...) or ask for --list\n");
    return exit_usage;
  }
  if (list && !words.empty() && !reflection_called) {
    std::fprintf(stderr, "courier-call: --list takes no TOKEN or arguments\n");
    return exit_usage;
  }
  if (!words.empty() && words[0].size() != 4) {
    std::fprintf(stderr, "courier-call: a token has four characters, not '%s'\n", words[0].c_str());
    return exit_usage;
  }
  auto fail = [&](const failure& f) {
    if (as_json) std::printf("%s\n", json{{"failure", {{"status", f.status}, {"text", f.text}}}}.dump().c_str());
    std::fprintf(stderr, "courier-call: %s\n", f.text.c_str());
    return f.status;
  };

  auto connected = courier::net::connect(opts->where, opts->timeout);
  if (!connected)
    return fail({exit_unreachable, "cannot reach " + to_string(opts->where) + ": " + connected.err().describe()});
  call_client client(std::move(*connected), *opts);
  if (auto f = client.open()) return fail(*f);

  std::uint64_t context = 0;
  if (!context_name.empty()) {
    answer opened;
    if (auto f = client.open_child(context_name, opened, context)) return fail(*f);
    if (context == 0) {
      std::fprintf(stderr, "courier-call: --context %s: the server refused the child context: ERROR %u (%s): %s\n",
                   context_name.c_str(), opened.code, error_name(opened.code).c_str(), opened.text.c_str());
      return exit_error_reply;
    }
  }

  // The services, from reflection (a server without it answers 256: then arguments need prefixes).
  w::out_buffer none;
  if (!w::frame_writer(none, w::frame_header{}).finish()) return fail({exit_lost, "cannot build a frame"});
  answer listed;
  if (auto f = client.call(w::reflection_token, context, false, none, listed)) return fail(*f);
  std::optional<std::vector<service>> services;
  if (listed.kind == w::kind::reply) services = services_of(listed);
  if (list) {
    if (!services) {
      const std::string why = listed.kind == w::kind::error ? listed.text : std::string("a malformed service list");
      return fail({exit_error_reply, "the server does not describe its services: " + why});
    }
    if (as_json) {
      json out = json::array();
      for (const service& s : *services)
        out.push_back({{"token", s.token},
                       {"kind", s.kind == 1 ? "call" : "one-way"},
                       {"arguments", s.arguments},
                       {"result", s.result},
                       {"description", s.description}});
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      for (const service& s : *services) {
        std::string line = s.token + " " + (s.arguments.empty() ? std::string("(?)") : s.arguments) + " -> " +
                           (s.result.empty() ? std::string("?") : s.result);
        if (!s.description.empty()) line += "  " + s.description;
        std::printf("%s\n", line.c_str());
      }
    }
    client.close();
    return exit_ok;
  }

  // The call's arguments, by the service's signature where it has one.
  const std::string& tok = words[0];
  const std::vector<std::string> args(words.begin() + 1, words.end());
  const service* known = nullptr;
  if (services)
    for (const service& s : *services)
      if (s.token == tok) known = &s;
  w::out_buffer body;
  {
    w::frame_writer items(body, w::frame_header{});
    std::optional<type_node> signature;
    if (known && !known->arguments.empty()) signature = parse_arguments(known->arguments);
    if (signature) {
      if (args.size() != signature->children.size())
        return fail({exit_usage, tok + " takes " + std::to_string(signature->children.size()) + " argument(s), " +
                                     known->arguments + "; " + std::to_string(args.size()) + " given"});
      for (std::size_t i = 0; i < args.size(); ++i)
        if (auto e = add_typed(items, signature->children[i], args[i]))
          return fail({exit_usage, "argument " + std::to_string(i + 1) + " of " + tok + known->arguments + ": " + *e});
    } else {
      if (services && !known)
        return fail({exit_usage, "the server has no service " + tok + " (courier-call --list shows them)"});
      for (std::size_t i = 0; i < args.size(); ++i)
        if (auto e = add_prefixed(items, args[i]))
          return fail({exit_usage, "argument " + std::to_string(i + 1) + ": " + *e});
    }
    if (!items.finish()) return fail({exit_usage, "the arguments do not fit in a frame"});
  }
  answer reply;
  const courier::token token = courier::token::from_chars(tok[0], tok[1], tok[2], tok[3]);
  if (!token.is_printable()) return fail({exit_usage, "a token is four printable ASCII characters"});
  if (auto f = client.call(token, context, one_way, body, reply)) return fail(*f);
  if (one_way) return exit_ok;
  client.close();
  if (reply.kind == w::kind::error) {
    if (as_json)
      std::printf("%s\n",
                  json{{"error", {{"code", reply.code}, {"name", error_name(reply.code)}, {"text", reply.text}}}}
                      .dump()
                      .c_str());
    std::fprintf(stderr, "courier-call: %s answered ERROR %u (%s): %s\n", tok.c_str(), reply.code,
                 error_name(reply.code).c_str(), reply.text.c_str());
    return exit_error_reply;
  }
  if (!reply.body_error.empty()) return fail({exit_lost, reply.body_error});
  // A call built from the signature is read against it too (docs/protocol.md section 15).
  if (known && !known->result.empty()) {
    std::string why;
    if (auto result = parse_result(known->result); result && !body_matches(reply.body, *result, why))
      return fail({exit_lost, "the reply does not match " + tok + "'s result " + known->result + ": " + why});
  }
  if (as_json) {
    std::printf("%s\n", json{{"token", tok}, {"result", reply.items}}.dump().c_str());
  } else {
    for (const json& item : reply.items) std::printf("%s\n", item_text(item).c_str());
  }
  return exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "courier-call: %s\n", e.what());
    return exit_lost;
  }
}
