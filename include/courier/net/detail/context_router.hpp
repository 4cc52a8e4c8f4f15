#pragma once
/// @file
/// The service tables of a parent context and its children, by context id, as the connection (a
/// remote peer's calls) and the local context actor (serve_locally's) both serve them: which table
/// a call in a context finds, the child a table's factory makes, the reflection answer, and the
/// words of the refusals. Private to the network layer.
///
/// Thread-safety: owned by one actor and used in its turns only.

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "courier/error.hpp"
#include "courier/net/services.hpp"
#include "courier/token.hpp"
#include "courier/wire/encoder.hpp"

namespace courier::net::detail {

class context_router {
 public:
  context_router() = default;
  explicit context_router(std::shared_ptr<const service_table> parent) : parent_(std::move(parent)) {}

  /// The dynamic services of context `id`: the parent's (0) or an open child's; null for none.
  [[nodiscard]] const service_table* services_of(std::uint64_t id) const noexcept {
    if (id == 0) return parent_.get();
    auto it = children_.find(id);
    return it != children_.end() ? it->second.get() : nullptr;
  }
  /// The handler of `token` in context `id` (its table's entry or catch-all), or null when the
  /// context has no table or the table has neither.
  [[nodiscard]] const service_handler* find(std::uint64_t id, courier::token token) noexcept {
    // The last answer is kept: a peer tends to call one service again and again, and with many
    // connections each table is cold by the time its connection's next call comes, so the scan
    // of its entries cost cache misses that this one line of the router (warm with parent_) saves.
    if (last_found_ != nullptr && id == last_id_ && token == last_token_) return last_found_;
    const service_table* table = services_of(id);
    const service_handler* found = table != nullptr ? table->find(token) : nullptr;
    if (found != nullptr) {
      last_id_ = id;
      last_token_ = token;
      last_found_ = found;
    }
    return found;
  }
  [[nodiscard]] bool serves_parent() const noexcept { return parent_ != nullptr; }
  /// The parent's table from now on (a session's, made when its connection opened).
  void serve_parent(std::shared_ptr<const service_table> services) noexcept {
    forget_found();
    parent_ = std::move(services);
  }

  /// The services the parent's child factory gives a child of `kind` named `name`, or the refusal
  /// (no_such_service) when it has none for that kind, or no factory at all.
  [[nodiscard]] courier::result<std::shared_ptr<const service_table>> make_child(courier::token kind,
                                                                                 std::string_view name) const;
  void add_child(std::uint64_t id, std::shared_ptr<const service_table> services) {
    forget_found();
    children_[id] = std::move(services);
  }
  /// False when `id` was not open.
  bool remove_child(std::uint64_t id) noexcept {
    forget_found();
    return children_.erase(id) != 0;
  }
  /// Lets go of every table, the state they capture with them (the session ended).
  void clear() noexcept {
    forget_found();
    parent_.reset();
    children_.clear();
  }

  /// Appends the dynamic services of context `id` to the reflection reply `w` is writing (after
  /// what the caller described first: a connection's typed interface).
  void describe(std::uint64_t id, wire::frame_writer& w) const {
    if (const service_table* table = services_of(id)) table->describe(w);
  }

  /// The answers both paths give, in the same words.
  [[nodiscard]] static courier::error no_service(courier::token token);
  [[nodiscard]] static courier::error no_context(std::uint64_t id);
  [[nodiscard]] static courier::error reflection_too_large();
  [[nodiscard]] static courier::error reply_not_encoded(const courier::wire::error& why);

 private:
  // A table that goes may leave its address to the next one made: the answer kept goes with it.
  void forget_found() noexcept { last_found_ = nullptr; }

  std::shared_ptr<const service_table> parent_;
  // What find() answered last (tables are read-only while served, so an entry stays put).
  const service_handler* last_found_ = nullptr;
  std::uint64_t last_id_ = 0;
  courier::token last_token_{};
  std::unordered_map<std::uint64_t, std::shared_ptr<const service_table>> children_;
};

}  // namespace courier::net::detail
