#pragma once
/// @file
/// A system's named registry: `sys.registry().put("db", ref)` in one place,
/// `sys.registry().get<db_actor>("db")` in another. The lookup is typed: a name put with an
/// `actor_ref<A>` and read as `actor_ref<B>` fails with errc::interface_mismatch; it never casts.
///
/// Rules:
/// - `put` fails with errc::name_taken while the name's actor is alive; a name whose actor has
///   stopped is free (put replaces it). Use `erase` first to move a live name to another actor.
/// - A stopped actor's name is released lazily: `get` of that name fails with
///   errc::name_not_found and drops the entry; `put`, `erase` and the system's shutdown drop it too.
///   Until then the entry keeps the stopped actor's memory (not its thread or mailbox) alive.
/// - Each entry holds a strong reference; the system's shutdown empties the registry.
///
/// Thread-safety: every member may be called from any thread, including from handlers (one mutex;
/// a look-up is not meant for the per-message path: keep the ref it returns).

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <typeinfo>

#include "courier/actor.hpp"
#include "courier/actor_ref.hpp"
#include "courier/error.hpp"

namespace courier {

class registry {
 public:
  registry() = default;
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;
  ~registry() { clear(); }

  /// Registers `ref` under `name`. Fails with errc::name_taken if a live actor holds the name,
  /// errc::empty_reference for an empty ref.
  template <class T>
  result<void> put(std::string_view name, const actor_ref<T>& ref) {
    if (!ref) return error(errc::empty_reference, "registry::put of an empty actor_ref");
    return put_entry(name, entry_of(ref));
  }

  /// The actor registered under `name`, typed as it was put. Fails with errc::name_not_found
  /// (no such name, or its actor has stopped) or errc::interface_mismatch (put as another type).
  template <class T>
  result<actor_ref<T>> get(std::string_view name) const {
    result<entry> found = find_entry(name, typeid(T));
    if (!found.has_value()) return found.err();
    return ref_of<T>(*found);
  }

  /// Removes `name`; false if it was not registered.
  bool erase(std::string_view name);

  /// Entries, including those of stopped actors not yet released.
  std::size_t size() const;

  /// Drops every entry (the system's shutdown does this).
  void clear() noexcept;

 private:
  struct entry {
    detail::actor_base* actor;   // strong reference
    const std::type_info* type;  // the T of the actor_ref it was put with
    const void* extra;           // what a ref carries beside the pointer: an interface ref's index table
  };

  // The two conversions between a ref and an entry: the only code that knows what a ref holds.
  template <class T>
  static entry entry_of(const actor_ref<T>& ref) noexcept {
    if constexpr (detail::is_interface<T>)
      return {ref.base(), &typeid(T), ref.index_map()};
    else
      return {ref.base(), &typeid(T), nullptr};
  }
  template <class T>
  static actor_ref<T> ref_of(const entry& e) noexcept {
    // find_entry took the reference this adopts; an interface ref gets back its index table.
    if constexpr (detail::is_interface<T>)
      return actor_ref<T>::adopt(e.actor, static_cast<const std::uint16_t*>(e.extra));
    else
      return actor_ref<T>::adopt(e.actor);
  }

  /// Takes a reference on `e.actor` for the registry.
  result<void> put_entry(std::string_view name, entry e);
  /// On success the entry's actor carries a new reference for the caller.
  result<entry> find_entry(std::string_view name, const std::type_info& type) const;

  mutable std::mutex mutex_;
  mutable std::map<std::string, entry, std::less<>> names_;  // get drops stopped actors' entries
};

}  // namespace courier
