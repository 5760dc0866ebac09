// Leveled logging (WEFT_LOG = error|warn|info|debug, default warn), and its debug mode (reliability R22:
// WEFT_DEBUG = OFF|WARN|INFO|TRACE, WEFT_DEBUG_SUBSYS, WEFT_DEBUG_FILE; docs/settings.md).
//
// Plain lines are "weft: <level>: <message>" on stderr: weftrun and users' scripts look for that text. In
// debug mode (any WEFT_DEBUG* setting) every line is tagged "<UTC time> [proc P/replica R] weft: <level>:
// ...", info and debug lines are kept only for the chosen subsystems, and lines may go to a file per process.
// The configuration is process-wide (one stderr, one file), set by each Runtime as it starts.
#pragma once
#include <string>
#include <string_view>

namespace weft {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

// Where a line comes from, for WEFT_DEBUG_SUBSYS. `general` lines are always shown (at their level).
enum class LogSubsys : unsigned { general = 0, init = 1, coll = 2, mem = 4, launch = 8 };
constexpr unsigned kAllLogSubsystems = 1 | 2 | 4 | 8;

// Parses a WEFT_LOG value; throws InvalidArgument naming the value and the choices.
LogLevel parse_log_level(std::string_view text);
std::string_view log_level_name(LogLevel level);  // "warn"
// Parses a WEFT_DEBUG value (OFF, WARN, INFO, TRACE; any case) onto the WEFT_LOG levels: OFF = error (errors
// are still printed), TRACE = debug. Throws InvalidArgument naming WEFT_DEBUG and the choices.
LogLevel parse_debug_level(std::string_view text);
std::string_view debug_level_name(LogLevel level);  // "TRACE"
// Parses WEFT_DEBUG_SUBSYS ("init,coll,mem,launch", any subset, comma-separated) into a mask; throws
// InvalidArgument naming the unknown entry.
unsigned parse_log_subsystems(std::string_view text);
// WEFT_DEBUG_FILE's pattern for this process: %h = host name, %p = pid, %r = the process's index in the job
// (its instance; 0 alone), %% = %. Throws InvalidArgument for another % sequence.
std::string expand_log_file_pattern(std::string_view pattern, int process);

struct LogConfig {
  LogLevel level = LogLevel::warn;
  bool tagged = false;                    // debug mode: time and [proc P/replica R] on every line
  unsigned subsystems = kAllLogSubsystems;  // info and debug lines of other subsystems are dropped
  std::string file;                       // the expanded WEFT_DEBUG_FILE; empty = stderr
  int process = 0;
};
// Applies `config` process-wide. Opens `file` for appending (kept open for the process's life); a file that
// cannot be opened is an InvalidArgument naming WEFT_DEBUG_FILE, the path and the reason.
void configure_log(const LogConfig& config);

void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
bool log_enabled(LogLevel level, LogSubsys subsys);
// Writes one line in one write() (concurrent replicas' lines never interleave), if enabled.
void log(LogLevel level, std::string_view message);
void log(LogLevel level, LogSubsys subsys, std::string_view message);
// The replica running on this thread (-1: none), named by tagged lines.
void set_log_replica(int replica);
int log_replica();

}  // namespace weft
