#pragma once
/// @file
/// out_buffer, the growable byte buffer frames are encoded into, and buffer_hooks, where it gets its
/// memory. Part of the wire codec (courier/wire.hpp).
///
/// Thread-safety: value types; distinct buffers are independent, one buffer is not safe to use from
/// two threads at once.

#include <cstddef>
#include <cstring>
#include <new>
#include <span>
#include <utility>

namespace courier::wire {

/// Where an out_buffer gets its memory. The runtime will pass hooks that hand out pooled chunks; the
/// default uses global operator new/delete.
///
/// Thread-safety: a value type; the functions it points to must be safe to call from the thread that
/// owns the buffer.
struct buffer_hooks {
  void* (*allocate)(std::size_t bytes, void* context) = nullptr;  // returns nullptr on failure
  void (*deallocate)(void* p, std::size_t bytes, void* context) = nullptr;
  void* context = nullptr;
};

/// A growable byte buffer that frames are encoded into, many frames back to back, so that one write()
/// can carry them all.
///
/// clear() keeps the capacity, so an encoder that reuses one out_buffer allocates nothing once the
/// buffer has grown to its working size. Every allocation goes through one buffer_hooks.
///
/// Thread-safety: distinct objects are independent; a shared object is not safe to use concurrently.
class out_buffer {
 public:
  out_buffer() noexcept = default;
  explicit out_buffer(buffer_hooks hooks) noexcept : hooks_(hooks) {}
  explicit out_buffer(std::size_t initial_capacity, buffer_hooks hooks = {}) : hooks_(hooks) {
    reserve(initial_capacity);
  }
  out_buffer(const out_buffer&) = delete;
  out_buffer& operator=(const out_buffer&) = delete;
  out_buffer(out_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)),
        hooks_(o.hooks_) {}
  out_buffer& operator=(out_buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
      hooks_ = o.hooks_;
    }
    return *this;
  }
  ~out_buffer() { release(); }

  [[nodiscard]] std::byte* data() noexcept { return data_; }
  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::span<const std::byte> view() const noexcept { return {data_, size_}; }

  /// Forgets the contents, keeps the memory.
  void clear() noexcept { size_ = 0; }

  /// Shrinks the contents to n bytes (n <= size()); used to roll back a frame that failed to encode.
  void truncate(std::size_t n) noexcept {
    if (n < size_) size_ = n;
  }

  /// Makes room for at least n bytes in total. Throws std::bad_alloc if the hook has no memory.
  void reserve(std::size_t n) {
    if (n > capacity_) reallocate(n);
  }

  /// Appends n bytes and returns where they start; the caller fills them in. The pointer is valid until
  /// the next call that may grow the buffer.
  [[nodiscard]] std::byte* extend(std::size_t n) {
    if (capacity_ - size_ < n) [[unlikely]]
      grow(n);
    std::byte* p = data_ + size_;
    size_ += n;
    return p;
  }

 private:
  void grow(std::size_t extra) {
    std::size_t want = capacity_ < 256 ? 256 : capacity_ * 2;
    if (want < size_ + extra) want = size_ + extra;
    reallocate(want);
  }

  void reallocate(std::size_t n) {
    auto* p =
        static_cast<std::byte*>(hooks_.allocate ? hooks_.allocate(n, hooks_.context) : ::operator new(n, std::nothrow));
    if (p == nullptr) throw std::bad_alloc();
    if (size_ != 0) std::memcpy(p, data_, size_);
    release();
    data_ = p;
    capacity_ = n;
  }

  void release() noexcept {
    if (data_ == nullptr) return;
    if (hooks_.deallocate) {
      hooks_.deallocate(data_, capacity_, hooks_.context);
    } else {
      ::operator delete(data_);
    }
    data_ = nullptr;
    capacity_ = 0;
  }

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  buffer_hooks hooks_{};
};

}  // namespace courier::wire
