// courier-wire-bench: single-thread encode and decode throughput of a small call frame (a token plus five
// int32 items, like the seeds' perf test), coalesced into 64 KiB buffers as a connection would write them.
//
// Prints a '#' line with the machine, then two result lines, the medians of 5 runs (--runs N), each
// followed by a '#' line with its GB/s and allocations per frame (counted by the shared counting
// operator new, tests/support):
//   wire-encode frames_per_s=<n>
//   wire-decode frames_per_s=<n>
// --quick: a smoke run of well under 2 s (one run unless --runs says more); --only encode|decode.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "courier/wire.hpp"

#include "bench_util.hpp"
#include "counting_allocator.hpp"

namespace w = courier::wire;

namespace {

struct add5 {
  static constexpr courier::token token{"ADD_"};
  std::int32_t a = 0, b = 0, c = 0, d = 0, e = 0;
  auto fields() { return std::tie(a, b, c, d, e); }
  auto fields() const { return std::tie(a, b, c, d, e); }
};

constexpr std::size_t batch_bytes = 64 * 1024;

struct run_result {
  double frames_per_s;
  double bytes_per_s;
  double allocs_per_frame;
};

template <class F>
run_result measure(std::size_t frames, std::size_t frame_bytes, F&& body) {
  const long a0 = static_cast<long>(counting_allocator::allocation_count());
  const auto t0 = std::chrono::steady_clock::now();
  body();
  const auto t1 = std::chrono::steady_clock::now();
  const long a1 = static_cast<long>(counting_allocator::allocation_count());
  const double s = std::chrono::duration<double>(t1 - t0).count();
  return {frames / s, static_cast<double>(frames * frame_bytes) / s, static_cast<double>(a1 - a0) / frames};
}

run_result median(std::vector<run_result> runs) {
  std::sort(runs.begin(), runs.end(), [](auto& x, auto& y) { return x.frames_per_s < y.frames_per_s; });
  return runs[runs.size() / 2];
}

volatile std::int64_t sink;

}  // namespace

int main(int argc, char** argv) {
  std::string only;
  const auto opts = courier_bench::parse_options(
      argc, argv, "The wire codec's encode and decode on one thread",
      [&](CLI::App& app) { app.add_option("--only", only, "run just this figure (encode, decode)"); });
  if (!opts.ok) return opts.exit_code;
  if (!only.empty() && only != "encode" && only != "decode") {  // scripts/run hands every bench the same line
    std::printf("courier-wire-bench: --only %s names no figure of this benchmark (encode, decode)\n", only.c_str());
    return 0;
  }
  const bool quick = opts.quick;
  const bool encode_figure = only.empty() || only == "encode", decode_figure = only.empty() || only == "decode";
  const std::size_t total_frames = quick ? 2'000'000 : 50'000'000;
  const int runs = opts.runs;

  w::out_buffer probe;
  if (!w::encode(probe, add5{}, {w::kind::call, 1, 0})) return 1;
  const std::size_t frame_bytes = probe.size();
  const std::size_t per_batch = batch_bytes / frame_bytes;
  const std::size_t batches = total_frames / per_batch;
  const std::size_t frames = batches * per_batch;

  // Encode: fill a 64 KiB buffer with frames, "write" it (here: nothing), clear it, again.
  w::out_buffer out(batch_bytes);
  std::vector<run_result> enc;
  for (int r = 0; encode_figure && r < runs + 1; ++r) {
    auto res = measure(frames, frame_bytes, [&] {
      std::uint64_t txn = 0;
      for (std::size_t b = 0; b < batches; ++b) {
        out.clear();
        for (std::size_t i = 0; i < per_batch; ++i) {
          ++txn;
          const auto v = static_cast<std::int32_t>(txn);
          if (!w::encode(out, add5{v, v + 1, v + 2, v + 3, v + 4}, {w::kind::call, txn, 0})) std::abort();
        }
        sink = static_cast<std::int64_t>(out.data()[out.size() - 1]);
      }
    });
    if (r > 0) enc.push_back(res);  // the first run warms caches and the buffer
  }

  // Decode: the same 64 KiB of frames, fed whole to the decoder, each frame decoded into an add5.
  out.clear();
  for (std::size_t i = 0; i < per_batch; ++i) {
    const auto v = static_cast<std::int32_t>(i);
    if (!w::encode(out, add5{v, v, v, v, v}, {w::kind::call, i + 1, 0})) return 1;
  }
  const auto input = out.view();
  w::decoder dec;
  std::vector<run_result> decs;
  for (int r = 0; decode_figure && r < runs + 1; ++r) {
    auto res = measure(frames, frame_bytes, [&] {
      std::int64_t sum = 0;
      std::size_t n = 0;
      add5 m;
      for (std::size_t b = 0; b < batches; ++b) {
        dec.feed(input);
        for (;;) {
          auto f = dec.next();
          if (!f) break;
          if (!w::decode(*f, m)) std::abort();
          sum += m.a + m.e;
          ++n;
        }
      }
      if (n != frames) std::abort();
      sink = sum;
    });
    if (r > 0) decs.push_back(res);
  }

  std::printf(
      "# machine: %s; one thread; %zu-byte call frames (token + 5 x int32) in %zu KiB buffers; median of %d run(s)%s\n",
      courier_bench::machine_description().c_str(), frame_bytes, batch_bytes / 1024, runs, quick ? "; --quick" : "");
  if (encode_figure) {
    const auto e = median(enc);
    std::printf("wire-encode frames_per_s=%.0f\n", e.frames_per_s);
    std::printf("# wire-encode: %.2f GB/s, %.3f allocations/frame\n", e.bytes_per_s / 1e9, e.allocs_per_frame);
  }
  if (decode_figure) {
    const auto d = median(decs);
    std::printf("wire-decode frames_per_s=%.0f\n", d.frames_per_s);
    std::printf("# wire-decode: %.2f GB/s, %.3f allocations/frame\n", d.bytes_per_s / 1e9, d.allocs_per_frame);
  }
  return 0;
}
