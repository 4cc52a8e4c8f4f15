#include "courier/error.hpp"

namespace courier {
namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "courier"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::actor_stopped: return "actor stopped";
      case errc::request_timeout: return "request timed out";
      case errc::handler_failed: return "handler failed";
      case errc::would_deadlock: return "blocking call would deadlock";
      case errc::system_shutdown: return "actor system shut down";
      case errc::stopped_by_request: return "stopped by request";
      case errc::empty_reference: return "empty actor reference";
      case errc::mailbox_full: return "mailbox full";
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

}  // namespace courier
