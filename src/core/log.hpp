// Minimal leveled logging to stderr (WEFT_LOG = error|warn|info|debug, default warn).
#pragma once
#include <string_view>

namespace weft {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

// Parses a WEFT_LOG value; throws InvalidArgument naming the value and the choices.
LogLevel parse_log_level(std::string_view text);
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
// Writes "weft: <level>: <message>\n" to stderr in one write, if the level is enabled.
void log(LogLevel level, std::string_view message);

}  // namespace weft
