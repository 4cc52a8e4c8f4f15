#include "courier/error.hpp"

#include <string>
#include <system_error>

namespace courier {
namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "courier"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::no_such_service: return "no such service";
      case errc::handler_failed: return "handler failed";
      case errc::no_such_context: return "no such context";
      case errc::request_timeout: return "request timed out";
      case errc::system_shutdown: return "actor system shut down";
      case errc::actor_stopped: return "actor stopped";
      case errc::would_deadlock: return "blocking call would deadlock";
      case errc::stopped_by_request: return "stopped by request";
      case errc::empty_reference: return "empty actor reference";
      case errc::broken_promise: return "reply promise dropped without a reply";
      case errc::mailbox_full: return "mailbox full";
      case errc::name_not_found: return "no actor registered under that name";
      case errc::interface_mismatch: return "actor does not implement the interface";
      case errc::name_taken: return "name already registered";
      case errc::invalid_argument: return "invalid argument";
      case errc::parent_stopped: return "parent actor stopped";
      case errc::connection_lost: return "connection lost";
      case errc::protocol_error: return "protocol error";
      case errc::too_many_contexts: return "too many child contexts";
    }
    return "unknown courier error";
  }
};

}  // namespace

const std::error_category& courier_category() noexcept {
  static const category instance;
  return instance;
}

std::string error::describe() const {
  if (!code) return "no error";
  std::string out = code.category().name();
  out += ": ";
  out += code.message();
  if (!text.empty()) {
    out += " (";
    out += text;
    out += ')';
  }
  return out;
}

void throw_result_error(const error& e) {
  // std::system_error's what() is "<what_arg>: <code message>", so the text goes into what_arg.
  std::string what = "courier::result::value() on an error";
  if (!e.text.empty()) {
    what += " (";
    what += e.text;
    what += ')';
  }
  throw std::system_error(e.code, what);
}

}  // namespace courier
