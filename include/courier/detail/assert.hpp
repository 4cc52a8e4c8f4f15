#pragma once
/// @file
/// COURIER_ASSERT(condition, message): checks a precondition in Debug and sanitizer builds (and
/// wherever COURIER_ENABLE_ASSERTIONS is defined to 1), and compiles to nothing in Release. A failed
/// check prints the condition, the message and the place, then aborts: a broken precondition is a
/// bug in the caller, not an error to handle.
///
/// Assertions never change a type's layout, so code built with them links with code built without.

#if !defined(COURIER_ENABLE_ASSERTIONS)
#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COURIER_ENABLE_ASSERTIONS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define COURIER_ENABLE_ASSERTIONS 1
#endif
#endif
#endif

#if defined(COURIER_ENABLE_ASSERTIONS) && COURIER_ENABLE_ASSERTIONS
#include <cstdio>
#include <cstdlib>

namespace courier::detail {

[[noreturn]] inline void assertion_failed(const char* condition, const char* message, const char* file,
                                          int line) noexcept {
  std::fprintf(stderr, "courier: precondition failed: %s (%s) at %s:%d\n", message, condition, file, line);
  std::abort();
}

}  // namespace courier::detail

#define COURIER_ASSERT(condition, message)                                          \
  do {                                                                              \
    if (!(condition)) [[unlikely]]                                                  \
      ::courier::detail::assertion_failed(#condition, message, __FILE__, __LINE__); \
  } while (false)
#else
#define COURIER_ASSERT(condition, message) \
  do {                                     \
  } while (false)
#endif
