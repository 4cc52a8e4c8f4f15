#include "courier/pool.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "watchdog.hpp"

namespace pool = courier::pool;
namespace pd = courier::pool::detail;

namespace {

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

// White box: the owning thread's local free list for one class, to make a test independent of what
// earlier tests left on a heap this thread may have adopted.
pd::free_node*& local_list(std::uint8_t size_class) { return pd::local_heap().classes[size_class].local; }

// Empties this thread's local list for `size_class`, keeping the slots so they are not handed out.
std::vector<void*> drain_local(std::uint8_t size_class) {
  std::vector<void*> kept;
  while (local_list(size_class) != nullptr) kept.push_back(pd::allocate_small(size_class));
  return kept;
}

}  // namespace

TEST_CASE("class_of picks the smallest class that fits size and alignment", "[pool]") {
  CHECK(pd::class_of(1, 1) == 0);
  CHECK(pd::class_of(16, 16) == 0);
  CHECK(pd::class_of(17, 8) == 1);
  CHECK(pd::class_of(48, 16) == 2);
  CHECK(pd::class_of(33, 64) == 3);  // 48 is not a multiple of 64: the 64 class
  CHECK(pd::class_of(65, 64) == 5);  // 96 is not a multiple of 64, 128 is
  CHECK(pd::class_of(4096, 64) == pd::class_count - 1);
  CHECK(pd::class_of(4097, 16) == pd::large_class);
  CHECK(pd::class_of(16, 128) == pd::large_class);  // over max_alignment
  for (std::size_t c = 0; c < pd::class_count; ++c) {
    const std::size_t size = pd::class_sizes[c];
    CHECK(pd::class_of(size, 1) == c);
    CHECK(pd::class_sizes[pd::class_of(size, 16)] >= size);
  }
}

TEST_CASE("every size class: round trip, writable, reused last-in first-out", "[pool]") {
  for (std::size_t c = 0; c < pd::class_count; ++c) {
    const std::size_t size = pd::class_sizes[c];
    INFO("class size " << size);
    void* a = pool::allocate(size);
    void* b = pool::allocate(size);
    REQUIRE(a != nullptr);
    REQUIRE(b != nullptr);
    CHECK(a != b);
    // Distinct slots do not overlap.
    auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
    CHECK((pa + size <= pb || pb + size <= pa));
    std::memset(a, 0xAB, size);
    std::memset(b, 0xCD, size);
    CHECK(static_cast<unsigned char*>(a)[size - 1] == 0xAB);
    CHECK(static_cast<unsigned char*>(b)[0] == 0xCD);
    pool::deallocate(b, size);
    pool::deallocate(a, size);
    // Freed on the owner thread: the local list hands back the last slot freed first.
    void* again = pool::allocate(size);
    CHECK(again == a);
    void* again2 = pool::allocate(size);
    CHECK(again2 == b);
    pool::deallocate(again, size);
    pool::deallocate(again2, size);
  }
}

TEST_CASE("small slots are aligned as asked (16 and 64)", "[pool]") {
  for (std::size_t size : {1u, 8u, 16u, 24u, 40u, 64u, 100u, 200u, 1000u, 3000u, 4096u}) {
    for (std::size_t align : {16u, 64u}) {
      INFO("size " << size << " alignment " << align);
      std::vector<void*> slots;
      for (int i = 0; i < 9; ++i) {  // several, so a wrong stride shows up
        void* p = pool::allocate(size, align);
        CHECK(aligned(p, align));
        slots.push_back(p);
      }
      for (void* p : slots) pool::deallocate(p, size, align);
    }
  }
}

TEST_CASE("typed make/destroy run constructor and destructor in an aligned slot", "[pool]") {
  struct alignas(64) tracked {
    int* destroyed;
    int value;
    tracked(int* d, int v) : destroyed(d), value(v) {}
    ~tracked() { ++*destroyed; }
  };
  int destroyed = 0;
  tracked* t = pool::make<tracked>(&destroyed, 5);
  CHECK(aligned(t, 64));
  CHECK(t->value == 5);
  pool::destroy(t);
  CHECK(destroyed == 1);

  struct throws {
    throws() { throw 7; }
  };
  CHECK_THROWS_AS(pool::make<throws>(), int);
}

TEST_CASE("large path: over max_small_size or max_alignment, counted in stats", "[pool]") {
  const pool::statistics before = pool::stats();
  void* big = pool::allocate(pool::max_small_size + 1);
  std::memset(big, 1, pool::max_small_size + 1);
  void* huge = pool::allocate(1 << 20, 64);
  CHECK(aligned(huge, 64));
  void* over_aligned = pool::allocate(32, 256);
  CHECK(aligned(over_aligned, 256));
  const pool::statistics mid = pool::stats();
  CHECK(mid.large_allocations == before.large_allocations + 3);
  CHECK(mid.large_deallocations == before.large_deallocations);
  pool::deallocate(big, pool::max_small_size + 1);
  pool::deallocate(huge, 1 << 20, 64);
  pool::deallocate(over_aligned, 32, 256);
  const pool::statistics after = pool::stats();
  CHECK(after.large_allocations == mid.large_allocations);
  CHECK(after.large_deallocations == before.large_deallocations + 3);

  // Small sizes never touch the large counters.
  void* small = pool::allocate(pool::max_small_size);
  pool::deallocate(small, pool::max_small_size);
  CHECK(pool::stats().large_allocations == after.large_allocations);
}

TEST_CASE("steady state reuses slots: no new chunks", "[pool]") {
  constexpr std::size_t size = 256;
  std::vector<void*> slots;
  for (int i = 0; i < 100; ++i) slots.push_back(pool::allocate(size));
  for (void* p : slots) pool::deallocate(p, size);
  const auto chunks = pool::stats().chunks_allocated;
  for (int round = 0; round < 50; ++round) {
    slots.clear();
    for (int i = 0; i < 100; ++i) slots.push_back(pool::allocate(size));
    for (void* p : slots) pool::deallocate(p, size);
  }
  CHECK(pool::stats().chunks_allocated == chunks);
}

TEST_CASE("a new chunk is carved once a class's chunk is used up", "[pool]") {
  constexpr std::size_t size = 4096;  // 15 slots per 64 KiB chunk
  const std::uint8_t c = pd::class_of(size, alignof(std::max_align_t));
  std::vector<void*> kept = drain_local(c);
  const auto chunks = pool::stats().chunks_allocated;
  std::vector<void*> slots;
  for (std::size_t i = 0; i < 2 * pool::chunk_size / size; ++i) slots.push_back(pool::allocate(size));
  CHECK(pool::stats().chunks_allocated >= chunks + 1);
  for (void* p : slots) pool::deallocate(p, size);
  for (void* p : kept) pool::deallocate(p, size);
}

TEST_CASE("slots freed on another thread return to the owner and are reused", "[pool][concurrent]") {
  courier_test::watchdog wd("pool remote free", std::chrono::seconds(20));
  constexpr std::size_t size = 96;
  constexpr int count = 200;
  const std::uint8_t c = pd::class_of(size, alignof(std::max_align_t));

  std::set<void*> freed_remotely;
  std::set<void*> reused;
  std::uint64_t chunks_before_reuse = 0, chunks_after_reuse = 0;
  bool remote_list_filled = false;
  bool local_was_empty = false;

  // The owner runs on its own thread so the test controls exactly when it allocates.
  std::thread owner([&] {
    std::vector<void*> kept = drain_local(c);
    std::vector<void*> slots;
    for (int i = 0; i < count; ++i) slots.push_back(pool::allocate(size));
    freed_remotely.insert(slots.begin(), slots.end());

    std::thread other([&] {
      for (void* p : slots) pool::deallocate(p, size);  // remote frees: one CAS each
    });
    other.join();
    remote_list_filled = pd::local_heap().classes[c].remote.load() != nullptr;

    // The local list is empty, so the next allocation takes the whole remote list back.
    local_was_empty = local_list(c) == nullptr;
    chunks_before_reuse = pool::stats().chunks_allocated;
    std::vector<void*> again;
    for (int i = 0; i < count; ++i) again.push_back(pool::allocate(size));
    chunks_after_reuse = pool::stats().chunks_allocated;
    reused.insert(again.begin(), again.end());
    for (void* p : again) pool::deallocate(p, size);
    for (void* p : kept) pool::deallocate(p, size);
  });
  owner.join();

  CHECK(remote_list_filled);
  CHECK(local_was_empty);
  CHECK(chunks_after_reuse == chunks_before_reuse);
  CHECK(reused == freed_remotely);
}

TEST_CASE("concurrent remote frees from several threads lose no slot", "[pool][concurrent]") {
  courier_test::watchdog wd("pool concurrent remote free", std::chrono::seconds(30));
  constexpr std::size_t size = 48;
  constexpr int per_thread = 500;
  constexpr int threads = 4;
  const std::uint8_t c = pd::class_of(size, alignof(std::max_align_t));

  std::vector<void*> kept = drain_local(c);
  std::vector<std::vector<void*>> batches(threads);
  std::set<void*> all;
  for (auto& b : batches)
    for (int i = 0; i < per_thread; ++i) {
      b.push_back(pool::allocate(size));
      all.insert(b.back());
    }
  REQUIRE(all.size() == std::size_t{threads * per_thread});
  {
    std::vector<std::thread> freers;
    for (auto& b : batches)
      freers.emplace_back([&b] {
        for (void* p : b) pool::deallocate(p, size);
      });
    for (auto& t : freers) t.join();
  }
  REQUIRE(local_list(c) == nullptr);
  const auto chunks = pool::stats().chunks_allocated;
  std::set<void*> back;
  for (int i = 0; i < threads * per_thread; ++i) back.insert(pool::allocate(size));
  CHECK(pool::stats().chunks_allocated == chunks);
  CHECK(back == all);
  for (void* p : back) pool::deallocate(p, size);
  for (void* p : kept) pool::deallocate(p, size);
}

TEST_CASE("an exited thread's heap is parked, its slots stay valid, and a new thread adopts it", "[pool][concurrent]") {
  courier_test::watchdog wd("pool heap reuse", std::chrono::seconds(20));
  constexpr std::size_t size = 192;
  const std::uint8_t c = pd::class_of(size, alignof(std::max_align_t));

  pd::heap* first_heap = nullptr;
  void* survivor = nullptr;
  std::thread first([&] {
    survivor = pool::allocate(size);
    first_heap = pd::this_thread_heap;
    std::memset(survivor, 0x5A, size);
  });
  first.join();
  REQUIRE(first_heap != nullptr);
  CHECK(pd::this_thread_heap != first_heap);

  // The slot outlives its thread and can still be used and freed from here (a remote free).
  CHECK(static_cast<unsigned char*>(survivor)[size - 1] == 0x5A);
  pool::deallocate(survivor, size);

  pd::heap* second_heap = nullptr;
  bool got_survivor = false;
  std::thread second([&] {
    std::vector<void*> kept = drain_local(c);  // adopts the parked heap on first use
    second_heap = pd::this_thread_heap;
    void* p = pool::allocate(size);
    got_survivor = p == survivor;
    pool::deallocate(p, size);
    for (void* k : kept) pool::deallocate(k, size);
  });
  second.join();
  CHECK(second_heap == first_heap);
  CHECK(got_survivor);
}
