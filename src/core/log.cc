#include "core/log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/settings.hpp"
#include "weft/error.hpp"

namespace weft {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};
std::atomic<bool> g_tagged{false};
std::atomic<unsigned> g_subsystems{kAllLogSubsystems};
std::atomic<int> g_fd{2};
std::atomic<int> g_process{0};
thread_local int t_replica = -1;
constexpr const char* kSubsysNames[] = {"init", "coll", "mem", "launch"};


// "2026-12-01T05:00:01.123456Z ": UTC, so that files of several hosts sort together.
void append_time(std::string& line) {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  ::gmtime_r(&ts.tv_sec, &t);
  char buf[96];  // (sized for any int the format may print)
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000);
  line += buf;
}
}  // namespace

// The levels' spellings are the settings table's (core/settings.cc), in LogLevel's order.
LogLevel parse_log_level(std::string_view text) {
  return static_cast<LogLevel>(settings::choice_of(settings::Setting::log, text));
}

std::string_view log_level_name(LogLevel level) {
  return settings::spec(settings::Setting::log).choices[static_cast<std::size_t>(level)];
}

LogLevel parse_debug_level(std::string_view text) {
  return static_cast<LogLevel>(settings::choice_of(settings::Setting::debug, text));
}

std::string_view debug_level_name(LogLevel level) {
  return settings::spec(settings::Setting::debug).choices[static_cast<std::size_t>(level)];
}

unsigned parse_log_subsystems(std::string_view text) {
  unsigned mask = 0;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    std::string_view item = text.substr(at, comma - at);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    unsigned bit = 0;
    for (int i = 0; i < 4; ++i)
      if (item == kSubsysNames[i]) bit = 1u << i;
    if (bit == 0)
      throw InvalidArgument("WEFT_DEBUG_SUBSYS=" + std::string(text) + ": \"" + std::string(item) +
                            "\" is not a subsystem; use a comma-separated list of init, coll, mem, launch");
    mask |= bit;
    at = comma + 1;
  }
  return mask;
}

std::string expand_log_file_pattern(std::string_view pattern, int process) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    const char c = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    ++i;
    if (c == 'h') {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      out += host;
    } else if (c == 'p') {
      out += std::to_string(::getpid());
    } else if (c == 'r') {
      out += std::to_string(process);
    } else if (c == '%') {
      out += '%';
    } else {
      throw InvalidArgument("WEFT_DEBUG_FILE=" + std::string(pattern) + ": \"%" + std::string(c ? 1 : 0, c) +
                            "\" is not a pattern; use %h (host), %p (pid), %r (instance) or %%");
    }
  }
  return out;
}

namespace {

// A debug log is appended to (the instances of a job may share one), so it cannot be renamed into place like
// weft's other files; instead (issue 21, item 8) a symlink at its name is refused (O_NOFOLLOW), as is a FIFO
// or device (opened non-blocking, so a FIFO cannot hang the runtime) and a file of another user (planted in
// a shared directory to read the log, or to have weft append to a file it names).
int open_log_file(const std::string& path) {
  const int f = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
  if (f < 0) {
    const int error = errno;
    throw InvalidArgument("WEFT_DEBUG_FILE: cannot open " + path + ": " +
                          (error == ELOOP   ? std::string("it is a symbolic link (weft does not write through one)")
                           : error == ENXIO ? std::string("it is not a regular file")  // a FIFO nobody reads
                                            : std::string(std::strerror(error))));
  }
  struct stat st {};
  std::string refusal;
  if (::fstat(f, &st) != 0) refusal = std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) refusal = "it is not a regular file";
  else if (st.st_uid != ::geteuid()) refusal = "it belongs to another user (uid " + std::to_string(st.st_uid) + ")";
  if (!refusal.empty()) {
    ::close(f);
    throw InvalidArgument("WEFT_DEBUG_FILE: cannot open " + path + ": " + refusal);
  }
  ::fcntl(f, F_SETFL, O_APPEND);  // blocking writes from here on
  return f;
}

}  // namespace

void configure_log(const LogConfig& config) {
  int fd = 2;
  if (!config.file.empty()) {
    // One descriptor per path for the process's life: a line being written by another thread while a new
    // Runtime reconfigures must never land in a closed (or reused) descriptor.
    static std::mutex mutex;
    static std::map<std::string, int> open_files;
    std::lock_guard lock(mutex);
    auto it = open_files.find(config.file);
    if (it == open_files.end()) {
      const int f = open_log_file(config.file);
      it = open_files.emplace(config.file, f).first;
    }
    fd = it->second;
  }
  g_fd.store(fd);
  g_process.store(config.process);
  g_subsystems.store(config.subsystems);
  g_tagged.store(config.tagged);
  g_level.store(static_cast<int>(config.level));
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed); }
bool log_enabled(LogLevel level, LogSubsys subsys) {
  if (!log_enabled(level)) return false;
  // Warnings and errors are never filtered by subsystem: a filter must not hide a problem.
  return level <= LogLevel::warn || subsys == LogSubsys::general ||
         (g_subsystems.load(std::memory_order_relaxed) & static_cast<unsigned>(subsys)) != 0;
}

void set_log_replica(int replica) { t_replica = replica; }
int log_replica() { return t_replica; }

void log(LogLevel level, std::string_view message) { log(level, LogSubsys::general, message); }

void log(LogLevel level, LogSubsys subsys, std::string_view message) {
  if (!log_enabled(level, subsys)) return;
  std::string head;
  const bool tagged = g_tagged.load(std::memory_order_relaxed);
  if (tagged) {
    append_time(head);
    head += "[proc " + std::to_string(g_process.load(std::memory_order_relaxed));
    if (t_replica >= 0) head += "/replica " + std::to_string(t_replica);
    head += "] ";
  }
  head += "weft: ";
  head += log_level_name(level);
  head += ": ";
  if (tagged && subsys != LogSubsys::general) {
    for (int i = 0; i < 4; ++i)
      if (static_cast<unsigned>(subsys) == 1u << i) head += std::string("[") + kSubsysNames[i] + "] ";
  }
  std::string line = head;
  if (!tagged) {
    line += message;
  } else {
    // Every line of a multi-line message (a timeout's list of missing replicas) carries the tags, so that
    // grep and sort by time keep it together with its first line.
    for (std::size_t at = 0; at <= message.size();) {
      const std::size_t eol = std::min(message.find('\n', at), message.size());
      if (at > 0) line += "\n" + head;
      line += message.substr(at, eol - at);
      at = eol + 1;
    }
  }
  line += '\n';
  // One write() so lines of concurrent replicas do not interleave.
  [[maybe_unused]] ssize_t written = ::write(g_fd.load(std::memory_order_relaxed), line.data(), line.size());
}

}  // namespace weft
