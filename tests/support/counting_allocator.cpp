// Replaces the global operator new/delete to back the counters declared in
// counting_allocator.hpp. Uses only malloc/free underneath (no recursion into new).
#include "counting_allocator.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

#if defined(__APPLE__)
#include <malloc/malloc.h>
#define COUNTING_ALLOCATOR_USABLE_SIZE(p) ::malloc_size(p)
#elif defined(_WIN32)
#include <malloc.h>
#define COUNTING_ALLOCATOR_USABLE_SIZE(p) ::_msize(p)
#else
#include <malloc.h>
#define COUNTING_ALLOCATOR_USABLE_SIZE(p) ::malloc_usable_size(p)
#endif

namespace {

struct alignas(64) counters {
  std::atomic<std::uint64_t> allocs{0};
  std::atomic<std::uint64_t> live{0};
  std::atomic<std::uint64_t> peak{0};
};

// Constant-initialized (constexpr ctors), so it is usable before any dynamic
// initialization runs -- allocations during static init are counted too.
constinit counters g_counters;
constinit std::atomic<counting_allocator::trap_function> g_trap{nullptr};

inline void on_alloc(void* p) noexcept {
  auto sz = static_cast<std::uint64_t>(COUNTING_ALLOCATOR_USABLE_SIZE(p));
  g_counters.allocs.fetch_add(1, std::memory_order_relaxed);
  auto now = g_counters.live.fetch_add(sz, std::memory_order_relaxed) + sz;
  auto pk = g_counters.peak.load(std::memory_order_relaxed);
  while (now > pk && !g_counters.peak.compare_exchange_weak(pk, now, std::memory_order_relaxed))
    ;  // retry; pk reloaded by compare_exchange_weak
}

inline void on_free(void* p) noexcept {
  auto sz = static_cast<std::uint64_t>(COUNTING_ALLOCATOR_USABLE_SIZE(p));
  g_counters.live.fetch_sub(sz, std::memory_order_relaxed);
}

void* do_alloc(std::size_t n) {
  if (n == 0) n = 1;
  for (;;) {
    if (void* p = std::malloc(n)) {
      on_alloc(p);
      if (auto trap = g_trap.load(std::memory_order_relaxed)) trap(n);
      return p;
    }
    auto handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc{};
    handler();
  }
}

void* do_alloc_aligned(std::size_t n, std::align_val_t al) {
  auto a = static_cast<std::size_t>(al);
  if (a < sizeof(void*)) a = sizeof(void*);
  if (n == 0) n = 1;
  for (;;) {
    void* p = nullptr;
#if defined(_WIN32)
    p = ::_aligned_malloc(n, a);  // note: _msize does not apply; best effort
#else
    if (::posix_memalign(&p, a, n) != 0) p = nullptr;
#endif
    if (p) {
      on_alloc(p);
      if (auto trap = g_trap.load(std::memory_order_relaxed)) trap(n);
      return p;
    }
    auto handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc{};
    handler();
  }
}

inline void do_free(void* p) noexcept {
  if (!p) return;
  on_free(p);
  std::free(p);
}

inline void do_free_aligned(void* p) noexcept {
  if (!p) return;
  on_free(p);
#if defined(_WIN32)
  ::_aligned_free(p);
#else
  std::free(p);
#endif
}

}  // namespace

namespace counting_allocator {

std::uint64_t allocation_count() { return g_counters.allocs.load(std::memory_order_relaxed); }

std::uint64_t live_bytes() { return g_counters.live.load(std::memory_order_relaxed); }

std::uint64_t peak_live_bytes() { return g_counters.peak.load(std::memory_order_relaxed); }

void reset_peak() { g_counters.peak.store(g_counters.live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

void set_trap(trap_function trap) { g_trap.store(trap, std::memory_order_relaxed); }

}  // namespace counting_allocator

// -- replaced global allocation functions ------------------------------------

void* operator new(std::size_t n) { return do_alloc(n); }
void* operator new[](std::size_t n) { return do_alloc(n); }

void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return do_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return do_alloc(n);
  } catch (...) {
    return nullptr;
  }
}

void* operator new(std::size_t n, std::align_val_t al) { return do_alloc_aligned(n, al); }
void* operator new[](std::size_t n, std::align_val_t al) { return do_alloc_aligned(n, al); }
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  try {
    return do_alloc_aligned(n, al);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  try {
    return do_alloc_aligned(n, al);
  } catch (...) {
    return nullptr;
  }
}

void operator delete(void* p) noexcept { do_free(p); }
void operator delete[](void* p) noexcept { do_free(p); }
void operator delete(void* p, std::size_t) noexcept { do_free(p); }
void operator delete[](void* p, std::size_t) noexcept { do_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { do_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { do_free(p); }

void operator delete(void* p, std::align_val_t) noexcept { do_free_aligned(p); }
void operator delete[](void* p, std::align_val_t) noexcept { do_free_aligned(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { do_free_aligned(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { do_free_aligned(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { do_free_aligned(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { do_free_aligned(p); }
