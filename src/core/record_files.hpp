// How the instances and weftrun write their records in the job directory (core/launcher_protocol.hpp names
// them). Header-only: weftrun and its instance wrapper include it without linking weft.
//
// The job directory is private to the job (weftrun makes it 0700), but a record's name is predictable, and a
// user may point WEFT_JOB_DIR anywhere: no record is ever written through a symlink (issue 21, item 8).
// A record written whole goes to a temporary of an unpredictable name, created O_EXCL|O_NOFOLLOW, then
// renamed into place (a reader never sees half of it); a record appended to (an instance's error lines,
// several writers over time) is opened O_APPEND|O_NOFOLLOW (and non-blocking: a FIFO there cannot hang the
// writer). Failures are ignored, as before: a record is a help for the launcher, never a reason to fail.
#pragma once
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace weft::launcher {

inline bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

inline bool append_record(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && write_all(fd, text);
  ::close(fd);
  return ok;
}

inline bool write_record(const std::string& path, std::string_view text) {
  std::uint64_t bits = 0;
  if (::getrandom(&bits, sizeof bits, 0) != static_cast<ssize_t>(sizeof bits)) return false;
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, ".tmp-%016llx", static_cast<unsigned long long>(bits));
  const std::string temp = path + suffix;
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool written = write_all(fd, text);
  const bool closed = ::close(fd) == 0;
  if (written && closed && ::rename(temp.c_str(), path.c_str()) == 0) return true;
  ::unlink(temp.c_str());
  return false;
}

}  // namespace weft::launcher
