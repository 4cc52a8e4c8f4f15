// The echo client: sends messages with every item type (edge values included) and checks that each
// comes back unchanged. Same code over pipe, uds and tcp; only the options differ.
#include <courier/courier.hpp>
#include <courier/net/node.hpp>
#include <courier/net/options.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "echo_api.hpp"

int main(int argc, char** argv) {
  auto opts = courier::net::parse_options(argc, argv, "courier-echo-client");
  if (!opts) {
    std::fprintf(stderr, "%s", courier::net::options_error("courier-echo-client", opts.err()).c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", courier::net::options_help("courier-echo-client").c_str());
    return 0;
  }
  courier::system sys;
  courier::net::node net(sys);
  courier::net::connection_config base;
  base.name = "echo-client";
  auto connected = net.connect<echo::api>(opts->where, courier::net::config_from(*opts, base));
  if (!connected) {
    std::fprintf(stderr, "courier-echo-client: cannot connect: %s\n", connected.err().describe().c_str());
    return 1;
  }
  courier::actor_ref<echo::api> peer = *connected;

  echo::everything low;
  low.flag = false;
  low.i8 = std::numeric_limits<std::int8_t>::min();
  low.i16 = std::numeric_limits<std::int16_t>::min();
  low.i32 = std::numeric_limits<std::int32_t>::min();
  low.i64 = std::numeric_limits<std::int64_t>::min();
  low.f32 = -0.0f;
  low.f64 = std::numeric_limits<double>::denorm_min();

  echo::everything high;
  high.flag = true;
  high.i8 = std::numeric_limits<std::int8_t>::max();
  high.i16 = std::numeric_limits<std::int16_t>::max();
  high.i32 = std::numeric_limits<std::int32_t>::max();
  high.i64 = std::numeric_limits<std::int64_t>::max();
  high.u8 = std::numeric_limits<std::uint8_t>::max();
  high.u16 = std::numeric_limits<std::uint16_t>::max();
  high.u32 = std::numeric_limits<std::uint32_t>::max();
  high.u64 = std::numeric_limits<std::uint64_t>::max();
  high.f32 = std::numeric_limits<float>::max();
  high.f64 = std::numeric_limits<double>::infinity();
  high.text = "grüße, 世界, \xF0\x9F\x98\x80 and a NUL: " + std::string(1, '\0') + "!";
  for (int i = 0; i < 256; ++i) high.blob.push_back(static_cast<std::byte>(i));
  high.numbers = {1, -2, 3, -4, 5};
  high.where = {1.5, -2.25};
  high.path = {{0, 0}, {1, 1}, {2, 4}};

  echo::everything big = high;
  big.text.assign(1 << 20, 'x');  // a 1 MiB string: a frame far past one read

  int failures = 0;
  for (const auto* m : {&low, &high, &big}) {
    auto back = peer.ask(*m, opts->timeout);
    const bool same = back && *back == *m;
    std::printf("%-4s echo of %zu-byte text, %zu-byte binary, %zu numbers\n", same ? "ok" : "FAIL", m->text.size(),
                m->blob.size(), m->numbers.size());
    if (!back) std::printf("     %s\n", back.err().describe().c_str());
    if (!same) ++failures;
  }
  // NaN compares unequal to itself: check its bits came back.
  echo::everything nan_msg;
  nan_msg.f64 = std::numeric_limits<double>::quiet_NaN();
  auto back = peer.ask(nan_msg, opts->timeout);
  const bool nan_ok = back && std::isnan(back->f64);
  std::printf("%-4s echo of a NaN\n", nan_ok ? "ok" : "FAIL");
  if (!nan_ok) ++failures;
  std::printf("%s over %s\n", failures == 0 ? "passed" : "FAILED", to_string(opts->where).c_str());
  return failures == 0 ? 0 : 1;
}
