#pragma once
/// @file
/// Reference-counted receive buffers and the message field types that view into them, so that a
/// decoded frame can cross a mailbox hop without its strings and binaries being copied.
///
/// A connection reads into `shared_block`s (courier/net/connection_config.hpp). A message field declared
/// as `string_ref` (or `bytes_ref`) decodes to a view into the block the frame was read into, plus a
/// reference that keeps the block alive for as long as the message lives, on whichever thread the
/// message is handled and destroyed. The handler takes the field as a `std::string_view` (or a
/// span). Fields declared `std::string` or `std::vector<std::byte>` are copied, as before; fields
/// declared as plain `std::string_view` or span view the frame only while it is being decoded, so
/// they cannot cross a hop (the remote layer refuses them at compile time).
///
/// Decoded from a frame that no block owns (a test, a file), a `string_ref` copies its bytes into a
/// block of its own: it is never a dangling view.
///
/// A kept field keeps its whole block (64 KiB by default) and, while kept, the connection cannot
/// read into it: a handler that keeps data for long (a cache, a table) should keep a copy
/// (`str()`), not the field.
///
/// Thread-safety: the reference count is atomic; a block's bytes are written only by the one
/// connection that owns it, and only while nothing else refers to them (use_count() == 1).

#include <atomic>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace courier::wire {

/// A heap block of bytes with an atomic reference count; the last release frees it.
class shared_block {
 public:
  /// A block of `capacity` bytes with one reference (the caller's); throws std::bad_alloc.
  static shared_block* make(std::size_t capacity) {
    shared_block* b = try_make(capacity);
    if (b == nullptr) throw std::bad_alloc();
    return b;
  }
  /// The same, or null when the memory cannot be had. From malloc, not operator new: a receive
  /// block's size is the peer's to choose, and an operator new that is replaced (mimalloc's)
  /// may abort the process instead of failing; a connection that cannot get its block fails alone.
  static shared_block* try_make(std::size_t capacity) noexcept {
    if (capacity > SIZE_MAX - sizeof(shared_block)) return nullptr;
    void* raw = std::malloc(sizeof(shared_block) + capacity);  // aligned for max_align_t
    return raw == nullptr ? nullptr : ::new (raw) shared_block(capacity);
  }
  shared_block(const shared_block&) = delete;
  shared_block& operator=(const shared_block&) = delete;

  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      this->~shared_block();
      std::free(static_cast<void*>(this));
    }
  }
  /// The references now held. 1 means the caller's is the only one: the acquire pairs with the
  /// release of every other holder, whose reads of the bytes are then over.
  std::uint32_t use_count() const noexcept { return refs_.load(std::memory_order_acquire); }

  std::byte* data() noexcept { return reinterpret_cast<std::byte*>(this + 1); }
  const std::byte* data() const noexcept { return reinterpret_cast<const std::byte*>(this + 1); }
  std::size_t capacity() const noexcept { return capacity_; }
  /// Whether `p` points into this block's bytes.
  bool holds(const void* p) const noexcept {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    const auto first = reinterpret_cast<std::uintptr_t>(data());
    return at >= first && at - first < capacity_;
  }

 private:
  explicit shared_block(std::size_t capacity) noexcept : capacity_(capacity) {}
  ~shared_block() = default;

  std::atomic<std::uint32_t> refs_{1};
  std::size_t capacity_;
};
static_assert(sizeof(shared_block) % alignof(std::max_align_t) == 0, "the bytes follow the header aligned");

/// An owning reference to a shared_block (null or one reference).
class block_ref {
 public:
  block_ref() noexcept = default;
  /// Takes over the reference the caller holds (as from shared_block::make).
  static block_ref adopt(shared_block* b) noexcept { return block_ref(b); }
  /// Adds a reference of its own.
  static block_ref share(shared_block* b) noexcept {
    if (b != nullptr) b->add_ref();
    return block_ref(b);
  }
  block_ref(const block_ref& o) noexcept : block_(o.block_) {
    if (block_ != nullptr) block_->add_ref();
  }
  block_ref(block_ref&& o) noexcept : block_(std::exchange(o.block_, nullptr)) {}
  block_ref& operator=(block_ref o) noexcept {
    std::swap(block_, o.block_);
    return *this;
  }
  ~block_ref() {
    if (block_ != nullptr) block_->release();
  }
  void reset() noexcept { block_ref().swap(*this); }
  void swap(block_ref& o) noexcept { std::swap(block_, o.block_); }

  shared_block* get() const noexcept { return block_; }
  shared_block* operator->() const noexcept { return block_; }
  explicit operator bool() const noexcept { return block_ != nullptr; }

 private:
  explicit block_ref(shared_block* b) noexcept : block_(b) {}
  shared_block* block_ = nullptr;
};

namespace detail {

/// The view-plus-owner both field types share. Built from a plain view it owns nothing (the caller
/// keeps the bytes alive until the message is encoded, which for a `send` is later, on the
/// connection's thread: so the constructor is explicit, and `copy_of` makes one that owns a copy);
/// decoded, it owns the block its bytes lie in.
template <class View>
class viewing_ref {
 public:
  viewing_ref() noexcept = default;
  explicit viewing_ref(View v) noexcept : view_(v) {}
  viewing_ref(View v, block_ref owner) noexcept : view_(v), owner_(std::move(owner)) {}

  /// The bytes viewed into the block `owner` (which must hold them); shares the block.
  static viewing_ref in(View v, shared_block* owner) noexcept { return viewing_ref(v, block_ref::share(owner)); }
  /// A copy of `v` in a block of its own.
  static viewing_ref copy_of(View v) {
    if (v.empty()) return {};
    shared_block* b = shared_block::make(v.size());
    std::memcpy(b->data(), v.data(), v.size());
    return viewing_ref(View(reinterpret_cast<typename View::const_pointer>(b->data()), v.size()), block_ref::adopt(b));
  }

  View view() const noexcept { return view_; }
  operator View() const noexcept { return view_; }  // NOLINT: handlers take the field as a view
  auto data() const noexcept { return view_.data(); }
  std::size_t size() const noexcept { return view_.size(); }
  bool empty() const noexcept { return view_.empty(); }
  /// The block that keeps the bytes alive; null for a plain view.
  const block_ref& owner() const noexcept { return owner_; }

 private:
  View view_{};
  block_ref owner_;
};

}  // namespace detail

/// A string field that, decoded, views the receive buffer and keeps it alive (see the file comment).
class string_ref : public detail::viewing_ref<std::string_view> {
 public:
  using viewing_ref::viewing_ref;
  string_ref(const viewing_ref& r) noexcept : viewing_ref(r) {}        // NOLINT
  string_ref(viewing_ref&& r) noexcept : viewing_ref(std::move(r)) {}  // NOLINT
  explicit string_ref(const char* s) noexcept : viewing_ref(std::string_view(s)) {}
  explicit string_ref(const std::string& s) noexcept : viewing_ref(std::string_view(s)) {}
  string_ref(std::string&&) = delete;  // would view a temporary: use copy_of
  string_ref(std::nullptr_t) = delete;
  std::string str() const { return std::string(view()); }
  friend bool operator==(const string_ref& a, std::string_view b) noexcept { return a.view() == b; }
  friend bool operator==(const string_ref& a, const string_ref& b) noexcept { return a.view() == b.view(); }
  friend auto operator<=>(const string_ref& a, const string_ref& b) noexcept { return a.view() <=> b.view(); }
};

/// A binary field that, decoded, views the receive buffer and keeps it alive (see the file comment).
class bytes_ref : public detail::viewing_ref<std::span<const std::byte>> {
 public:
  using viewing_ref::viewing_ref;
  bytes_ref(const viewing_ref& r) noexcept : viewing_ref(r) {}        // NOLINT
  bytes_ref(viewing_ref&& r) noexcept : viewing_ref(std::move(r)) {}  // NOLINT
};

}  // namespace courier::wire
