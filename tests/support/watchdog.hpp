#pragma once
/// @file
/// A hang must fail fast and say where it happened: `courier_test::watchdog wd{"label", 20s};` at the
/// top of a test starts a thread that aborts the process, naming the label, unless the watchdog is
/// destroyed (the test finished) first. CTest's own timeout is the backstop; this one names the test.
///
/// Every bound a test sets on time goes through scaled(): a sanitizer build runs every thread several
/// times slower, and a loaded 2-core machine slower again, so a bound that holds in Release must
/// stretch with the build (as LLVM's lit and Chromium's TestTimeouts do). The watchdog and
/// eventually() scale their limits themselves; a test scales the rest (waits, server time-outs, the
/// slack it allows a timer). COURIER_TEST_TIME_SCALE=N raises the factor (never lowers it).
///
/// Thread-safety: one watchdog per scope; it is not meant to be shared.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#if defined(__SANITIZE_THREAD__)
#define COURIER_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COURIER_TEST_TSAN 1
#endif
#endif

namespace courier_test {

/// The build's slowness, times COURIER_TEST_TIME_SCALE where that is larger: ThreadSanitizer 5,
/// AddressSanitizer 2, otherwise 1.
inline double time_scale() {
  static const double factor = [] {
#if defined(COURIER_TEST_TSAN)
    double f = 5;
#elif defined(__SANITIZE_ADDRESS__)
    double f = 2;
#else
    double f = 1;
#endif
    if (const char* raised = std::getenv("COURIER_TEST_TIME_SCALE")) {
      char* end = nullptr;
      const double asked = std::strtod(raised, &end);
      if (end != raised && asked > f) f = asked;
    }
    return f;
  }();
  return factor;
}

/// `d` stretched by time_scale(), in the same unit.
template <class Rep, class Period>
std::chrono::duration<Rep, Period> scaled(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration<Rep, Period>(static_cast<Rep>(static_cast<double>(d.count()) * time_scale()));
}

class watchdog {
 public:
  explicit watchdog(std::string label, std::chrono::milliseconds limit = std::chrono::seconds(20))
      : label_(std::move(label)), thread_([this, limit = scaled(limit)] { watch(limit); }) {}
  explicit watchdog(std::chrono::milliseconds limit) : watchdog("(unnamed test)", limit) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;

  ~watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  void watch(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    if (wake_.wait_for(lock, limit, [this] { return done_; })) return;
    std::fprintf(stderr, "\nwatchdog: test '%s' did not finish within %lld ms; aborting\n", label_.c_str(),
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::abort();
  }

  std::string label_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members it reads exist
};

/// Polls `done` every millisecond until it holds or scaled(limit) passes; returns its last value.
template <class Predicate>
bool eventually(Predicate done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + scaled(limit);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace courier_test
