#include "courier/pool.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>

// Sanitizer builds take memory from the instrumented system allocator: mimalloc is not
// instrumented, so ThreadSanitizer would see its reuse of a block across threads as a race.
#if defined(COURIER_USE_MIMALLOC) && !defined(COURIER_POOL_SYSTEM_ALLOCATOR)
#define COURIER_POOL_MIMALLOC 1
#include <mimalloc.h>
#endif

namespace courier::pool {
namespace {

void* default_allocate(std::size_t size, std::size_t alignment) {
#if defined(COURIER_POOL_MIMALLOC)
  void* p = mi_malloc_aligned(size, alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
#else
  return ::operator new (size, std::align_val_t{alignment});
#endif
}

void default_deallocate(void* ptr, std::size_t, std::size_t alignment) noexcept {
#if defined(COURIER_POOL_MIMALLOC)
  (void)alignment;
  mi_free(ptr);
#else
  ::operator delete (ptr, std::align_val_t{alignment});
#endif
}

chunk_hooks hooks{default_allocate, default_deallocate};
std::atomic<std::uint64_t> chunks_allocated{0};
std::atomic<std::uint64_t> large_allocations{0};
std::atomic<std::uint64_t> large_deallocations{0};

// Heaps of exited threads wait here for the next new thread; they are never freed because slots
// carved from them may still be in flight on other threads.
std::mutex parked_mutex;
detail::heap* parked_heaps = nullptr;

struct heap_releaser {
  ~heap_releaser() {
    detail::heap* h = detail::this_thread_heap;
    if (h == nullptr) return;
    detail::this_thread_heap = nullptr;
    std::lock_guard lock(parked_mutex);
    h->next_parked = parked_heaps;
    parked_heaps = h;
  }
};

}  // namespace

void set_chunk_hooks(chunk_hooks h) noexcept { hooks = h; }

statistics stats() noexcept {
  return {chunks_allocated.load(std::memory_order_relaxed), large_allocations.load(std::memory_order_relaxed),
          large_deallocations.load(std::memory_order_relaxed)};
}

namespace detail {

heap* acquire_thread_heap() {
  static_assert(sizeof(chunk_header) <= 64, "slots start at the first cache line after the header");
  heap* h = nullptr;
  {
    std::lock_guard lock(parked_mutex);
    if (parked_heaps != nullptr) {
      h = parked_heaps;
      parked_heaps = h->next_parked;
      h->next_parked = nullptr;
    }
  }
  if (h == nullptr) h = new (hooks.allocate(sizeof(heap), alignof(heap))) heap{};
  this_thread_heap = h;
  thread_local heap_releaser releaser;  // parks the heap when this thread exits
  (void)releaser;
  return h;
}

namespace {

void carve_chunk(heap& h) {
  auto* chunk = static_cast<char*>(hooks.allocate(chunk_size, chunk_size));
  chunks_allocated.fetch_add(1, std::memory_order_relaxed);
  ::new (chunk) chunk_header{&h};
  // Slots start at the first cache line after the header. The rest of the previous chunk (less
  // than one slot of the class that did not fit) is left unused.
  h.bump = chunk + 64;
  h.bump_end = chunk + chunk_size;
}

}  // namespace

void* refill(heap& h, std::uint8_t size_class) {
  size_class_state& s = h.classes[size_class];
  if (s.remote.load(std::memory_order_relaxed) != nullptr) {
    free_node* taken = s.remote.exchange(nullptr, std::memory_order_acquire);
    s.local = taken->next;
    return taken;
  }
  const std::size_t slot = class_sizes[size_class];
  // class_of only hands out alignments that divide both 64 and the class size: aligning the
  // carve position to the largest power of two dividing the size (at most 64) suffices.
  const std::size_t align = (slot & (~slot + 1)) < 64 ? (slot & (~slot + 1)) : 64;
  auto aligned = [&] {
    return reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(h.bump) + align - 1) & ~(align - 1));
  };
  char* p = h.bump != nullptr ? aligned() : nullptr;
  if (p == nullptr || p + slot > h.bump_end) {
    carve_chunk(h);
    p = h.bump;
  }
  h.bump = p + slot;
  return p;
}

// The large path asks the hook only for the fundamental alignment and aligns further itself:
// aligned allocation entry points are not trusted for every (size, alignment) pair (mimalloc
// 2.0.9's mi_malloc_aligned returns misaligned blocks for some alignments of 256 to 1024 bytes).
// The hook's own pointer is stored just before the aligned block.
namespace {

constexpr std::size_t natural_alignment = alignof(std::max_align_t);

constexpr std::size_t over_aligned_size(std::size_t size, std::size_t alignment) noexcept {
  return size + alignment + sizeof(void*);
}

}  // namespace

void* allocate_large(std::size_t size, std::size_t alignment) {
  if (alignment <= natural_alignment) {
    void* p = hooks.allocate(size, natural_alignment);
    large_allocations.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  auto* raw = static_cast<char*>(hooks.allocate(over_aligned_size(size, alignment), natural_alignment));
  large_allocations.fetch_add(1, std::memory_order_relaxed);
  const auto first = reinterpret_cast<std::uintptr_t>(raw + sizeof(void*));
  char* aligned =
      raw + ((first + alignment - 1) & ~(std::uintptr_t{alignment} - 1)) - reinterpret_cast<std::uintptr_t>(raw);
  std::memcpy(aligned - sizeof(void*), &raw, sizeof raw);
  return aligned;
}

void deallocate_large(void* ptr, std::size_t size, std::size_t alignment) noexcept {
  large_deallocations.fetch_add(1, std::memory_order_relaxed);
  if (alignment <= natural_alignment) {
    hooks.deallocate(ptr, size, natural_alignment);
    return;
  }
  char* raw;
  std::memcpy(&raw, static_cast<char*>(ptr) - sizeof(void*), sizeof raw);
  hooks.deallocate(raw, over_aligned_size(size, alignment), natural_alignment);
}

}  // namespace detail

void reserve_thread_chunk() {
  detail::heap& h = detail::local_heap();
  if (h.bump == nullptr) detail::carve_chunk(h);
}

}  // namespace courier::pool
