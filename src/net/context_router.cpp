#include "courier/net/detail/context_router.hpp"

#include <string>

namespace courier::net::detail {

courier::result<std::shared_ptr<const service_table>> context_router::make_child(courier::token kind,
                                                                                 std::string_view name) const {
  const child_factory* factory = parent_ && parent_->children() ? &parent_->children() : nullptr;
  std::shared_ptr<const service_table> child = factory != nullptr ? (*factory)(kind, name) : nullptr;
  if (child) return child;
  return courier::error(errc::no_such_service, kind == courier::token{}
                                                   ? std::string("no default child context here")
                                                   : "no child context of kind " + std::string(kind.view()) + " here");
}

courier::error context_router::no_service(courier::token token) {
  return {errc::no_such_service, "no service " + std::string(token.view())};
}

courier::error context_router::no_context(std::uint64_t id) {
  return {errc::no_such_context, "context " + std::to_string(id) + " is not open (never opened, or closed)"};
}

courier::error context_router::reflection_too_large() {
  return {errc::handler_failed, "the service list does not fit in a frame"};
}

courier::error context_router::reply_not_encoded(const courier::wire::error& why) {
  return {errc::handler_failed, "cannot encode the reply: " + why.message()};
}

}  // namespace courier::net::detail
