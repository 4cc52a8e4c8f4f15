#pragma once
// A counting replacement of the global operator new/delete, shared by the allocation tests and
// the benchmarks. Link counting_allocator.cpp (the CMake object library
// courier_counting_allocator) into an executable to replace its operator new; the counters
// cover every form (plain, array, nothrow, aligned) on every thread.
//
// Sizes are the allocator's usable sizes (malloc_usable_size) on both sides, so live_bytes() is
// exact with respect to what operator new handed out. The counters are relaxed atomics:
// thread-safe and cheap. Direct malloc() calls, and memory from other hooks such as Courier's pool
// chunks (mimalloc), are not counted here.

#include <cstddef>
#include <cstdint>

namespace counting_allocator {

/// operator new calls since the process started.
std::uint64_t allocation_count();

/// Bytes allocated through operator new and not yet deleted.
std::uint64_t live_bytes();

/// The highest live_bytes() since the process started or the last reset_peak().
std::uint64_t peak_live_bytes();

/// Sets peak_live_bytes() to the current live_bytes().
void reset_peak();

/// A function called on every operator new (after it is counted), on the allocating thread, with
/// the size asked for; nullptr (the default) for none. For finding where an allocation comes from
/// (print a backtrace); it must not allocate itself.
using trap_function = void (*)(std::size_t bytes) noexcept;
void set_trap(trap_function trap);

}  // namespace counting_allocator
