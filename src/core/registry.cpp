#include "courier/registry.hpp"

#include <initializer_list>
#include <utility>
#include <vector>

namespace courier {
namespace {

// Appends instead of chaining operator+: GCC 12 warns (-Wrestrict) on the chained form.
std::string text(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out.append(p);
  return out;
}

}  // namespace

result<void> registry::put_entry(std::string_view name, entry e) {
  detail::actor_base* replaced = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = names_.find(name);
    if (it != names_.end()) {
      if (!it->second.actor->has_stopped())
        return error(errc::name_taken, text({"the name '", name, "' is held by a live actor"}));
      replaced = it->second.actor;
      e.actor->add_ref();
      it->second = e;
    } else {
      e.actor->add_ref();
      names_.emplace(std::string(name), e);
    }
  }
  if (replaced != nullptr) replaced->release();  // outside the lock: may run a destructor
  return {};
}

result<registry::entry> registry::find_entry(std::string_view name, const std::type_info& type) const {
  detail::actor_base* stopped = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = names_.find(name);
    if (it == names_.end()) return error(errc::name_not_found, text({"no actor is registered as '", name, "'"}));
    if (it->second.actor->has_stopped()) {
      stopped = it->second.actor;
      names_.erase(it);
    } else if (*it->second.type != type) {
      return error(errc::interface_mismatch,
                   text({"'", name, "' was registered as ", it->second.type->name(), ", looked up as ", type.name()}));
    } else {
      it->second.actor->add_ref();
      return it->second;
    }
  }
  stopped->release();
  return error(errc::name_not_found, text({"the actor registered as '", name, "' has stopped"}));
}

bool registry::erase(std::string_view name) {
  detail::actor_base* dropped = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = names_.find(name);
    if (it == names_.end()) return false;
    dropped = it->second.actor;
    names_.erase(it);
  }
  dropped->release();
  return true;
}

std::size_t registry::size() const {
  std::lock_guard lock(mutex_);
  return names_.size();
}

void registry::clear() noexcept {
  std::vector<detail::actor_base*> dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.reserve(names_.size());
    for (auto& [name, e] : names_) dropped.push_back(e.actor);
    names_.clear();
  }
  for (detail::actor_base* a : dropped) a->release();
}

}  // namespace courier
