#pragma once
/// @file
/// The message pool: size-classed slots carved from 64 KiB chunks, one heap per thread.
///
/// A thread allocates from its own heap without atomics. A heap carves slots of every size class
/// from one current chunk (each slot's class is known from the size given to `deallocate`), so a
/// thread's first slot of a new size class needs no new chunk while the current one has room; a
/// thread can take its first chunk up front with `reserve_thread_chunk` (worker threads do, so an
/// actor that moves to a worker never makes that worker ask the hook). A slot freed on its owner
/// thread goes back on that heap's local free list; a slot freed on another thread is pushed, with one CAS, onto the
/// owner heap's remote list for its size class, which the owner takes back in one exchange when its
/// local list runs dry (mimalloc's "thread-delayed free" design). Sizes above `max_small_size` take
/// the large path: one call to the chunk hook per allocation.
///
/// Thread-safety: every function here may be called from any thread. A heap whose thread exits is
/// parked, never freed, and adopted by the next new thread, so slots in flight stay valid.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "courier/detail/assert.hpp"

namespace courier::pool {

/// Chunks and large allocations come from here; mimalloc by default (a build option).
struct chunk_hooks {
  void* (*allocate)(std::size_t size, std::size_t alignment);
  void (*deallocate)(void* ptr, std::size_t size, std::size_t alignment) noexcept;
};

/// Replaces the hooks. Call before the first allocation; chunks already carved keep their origin.
void set_chunk_hooks(chunk_hooks hooks) noexcept;

/// Gives the calling thread's heap a chunk to carve from now, if it has none: its first slots
/// then come without a call to the hook. Threads that will allocate for actors (workers) call
/// this when they start.
void reserve_thread_chunk();

/// Counters for tests and benchmarks: they show whether steady state still asks the hooks.
struct statistics {
  std::uint64_t chunks_allocated;
  std::uint64_t large_allocations;
  std::uint64_t large_deallocations;
};
statistics stats() noexcept;

inline constexpr std::size_t chunk_size = 64 * 1024;
inline constexpr std::size_t max_small_size = 4096;
inline constexpr std::size_t max_alignment = 64;

namespace detail {

inline constexpr std::uint16_t class_sizes[] = {16,  32,  48,  64,  96,   128,  192,  256,  320,
                                                384, 512, 640, 768, 1024, 1536, 2048, 3072, 4096};
inline constexpr std::size_t class_count = sizeof(class_sizes) / sizeof(class_sizes[0]);
inline constexpr std::uint8_t large_class = 0xff;

/// The smallest class that holds `size` bytes at `alignment` (slots of a class are aligned to the
/// largest power of two dividing the class size, since chunks are 64-byte aligned).
constexpr std::uint8_t class_of(std::size_t size, std::size_t alignment) noexcept {
  if (alignment > max_alignment) return large_class;
  for (std::size_t c = 0; c < class_count; ++c) {
    std::size_t s = class_sizes[c];
    if (s >= size && (s & (alignment - 1)) == 0) return static_cast<std::uint8_t>(c);
  }
  return large_class;
}

struct free_node {
  free_node* next;
};

struct heap;

/// Sits at the start of every 64 KiB-aligned chunk; a slot finds it by masking its address.
struct chunk_header {
  heap* owner;
};

struct alignas(64) size_class_state {
  free_node* local = nullptr;                           // owner thread only
  alignas(64) std::atomic<free_node*> remote{nullptr};  // pushed by other threads
};

struct heap {
  size_class_state classes[class_count];
  char* bump = nullptr;  // owner thread only: the uncarved rest of the current chunk, any class
  char* bump_end = nullptr;
  heap* next_parked = nullptr;
};

heap* acquire_thread_heap();
void* refill(heap& h, std::uint8_t size_class);
void* allocate_large(std::size_t size, std::size_t alignment);
void deallocate_large(void* ptr, std::size_t size, std::size_t alignment) noexcept;

inline thread_local heap* this_thread_heap = nullptr;

inline heap& local_heap() {
  heap* h = this_thread_heap;
  if (h == nullptr) [[unlikely]]
    h = acquire_thread_heap();
  return *h;
}

inline void* allocate_small(std::uint8_t size_class) {
  heap& h = local_heap();
  size_class_state& s = h.classes[size_class];
  if (free_node* n = s.local) [[likely]] {
    s.local = n->next;
    // The next slot is most likely in another core's cache (freed there by the receiver of the
    // message it held): fetched for writing now, it is here by the next allocation, which would
    // otherwise stall on it.
    __builtin_prefetch(s.local, 1, 3);
    return n;
  }
  return refill(h, size_class);
}

inline void deallocate_small(void* ptr, std::uint8_t size_class) noexcept {
  auto* chunk = reinterpret_cast<chunk_header*>(reinterpret_cast<std::uintptr_t>(ptr) & ~(chunk_size - 1));
  auto* node = static_cast<free_node*>(ptr);
  size_class_state& s = chunk->owner->classes[size_class];
  if (chunk->owner == this_thread_heap) [[likely]] {
    node->next = s.local;
    s.local = node;
    return;
  }
  free_node* top = s.remote.load(std::memory_order_relaxed);
  do {
    node->next = top;
  } while (!s.remote.compare_exchange_weak(top, node, std::memory_order_release, std::memory_order_relaxed));
}

}  // namespace detail

/// A slot of at least `size` bytes aligned to `alignment`. Never returns null (throws
/// std::bad_alloc when the hook fails).
inline void* allocate(std::size_t size, std::size_t alignment = alignof(std::max_align_t)) {
  COURIER_ASSERT(alignment != 0 && (alignment & (alignment - 1)) == 0, "pool::allocate: alignment is a power of two");
  std::uint8_t c = detail::class_of(size, alignment);
  if (c == detail::large_class) [[unlikely]]
    return detail::allocate_large(size, alignment);
  return detail::allocate_small(c);
}

/// Returns a slot; `size` and `alignment` must be those given to `allocate`. Any thread.
inline void deallocate(void* ptr, std::size_t size, std::size_t alignment = alignof(std::max_align_t)) noexcept {
  const std::uint8_t c = detail::class_of(size, alignment);
  if (c == detail::large_class) [[unlikely]] {
    detail::deallocate_large(ptr, size, alignment);
    return;
  }
  COURIER_ASSERT(ptr != nullptr && reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0,
                 "pool::deallocate: a slot from pool::allocate, with the size and alignment given to it");
  detail::deallocate_small(ptr, c);
}

/// Typed helpers: construct a T in a pooled slot, destroy it and return the slot. The size class
/// is a constant here, so the hot path does no class look-up.
template <class T, class... Args>
T* make(Args&&... args) {
  constexpr std::uint8_t c = detail::class_of(sizeof(T), alignof(T));
  void* p = c == detail::large_class ? detail::allocate_large(sizeof(T), alignof(T)) : detail::allocate_small(c);
  try {
    return ::new (p) T(static_cast<Args&&>(args)...);
  } catch (...) {
    deallocate(p, sizeof(T), alignof(T));
    throw;
  }
}

template <class T>
void destroy(T* ptr) noexcept {
  constexpr std::uint8_t c = detail::class_of(sizeof(T), alignof(T));
  ptr->~T();
  if constexpr (c == detail::large_class)
    detail::deallocate_large(ptr, sizeof(T), alignof(T));
  else
    detail::deallocate_small(ptr, c);
}

}  // namespace courier::pool
