#include "core/log.hpp"

#include <unistd.h>

#include <atomic>
#include <string>

#include "weft/error.hpp"

namespace weft {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};
constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
}  // namespace

LogLevel parse_log_level(std::string_view text) {
  for (int i = 0; i < 4; ++i)
    if (text == kNames[i]) return static_cast<LogLevel>(i);
  throw InvalidArgument("WEFT_LOG=" + std::string(text) + " is not a log level; use error, warn, info or debug");
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed); }

void log(LogLevel level, std::string_view message) {
  if (!log_enabled(level)) return;
  std::string line = "weft: ";
  line += kNames[static_cast<int>(level)];
  line += ": ";
  line += message;
  line += '\n';
  // One write() so lines of concurrent replicas do not interleave.
  [[maybe_unused]] ssize_t written = ::write(2, line.data(), line.size());
}

}  // namespace weft
