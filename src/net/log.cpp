#include "courier/net/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "courier/net/options.hpp"

namespace courier::net {

const char* to_string(log_level level) noexcept {
  switch (level) {
    case log_level::error: return "error";
    case log_level::warning: return "warning";
    case log_level::info: return "info";
    case log_level::debug: break;
  }
  return "debug";
}

std::shared_ptr<const log_hook> log_for(const options& opts, std::string_view program_name) {
  // Not registered in spdlog's registry: two programs' hooks in one process (a test) keep apart,
  // and nothing outlives the hook. stderr_sink_mt serialises the lines of concurrent threads.
  auto logger =
      std::make_shared<spdlog::logger>(std::string(program_name), std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("%n %H:%M:%S.%e %l: %v");
  logger->set_level(spdlog::level::debug);
  logger->flush_on(spdlog::level::debug);  // a server killed by a signal leaves no line behind
  auto hook = std::make_shared<log_hook>();
  hook->threshold = opts.silent       ? log_level::error
                    : opts.debug >= 2 ? log_level::debug
                    : opts.debug == 1 ? log_level::info
                                      : log_level::warning;
  hook->write = [logger = std::move(logger)](log_level level, std::string_view line) {
    constexpr spdlog::level::level_enum levels[] = {spdlog::level::err, spdlog::level::warn, spdlog::level::info,
                                                    spdlog::level::debug};
    logger->log(levels[static_cast<int>(level)], "{}", line);
  };
  return hook;
}

}  // namespace courier::net
