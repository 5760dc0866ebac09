// Atomic file writes and bounded reads (see file_io.hpp for why the write goes through a renamed temporary,
// under an unpredictable name, keeping the replaced file's mode).
#include "array/file_io.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <cerrno>
#include <cstring>
#include <string>

#include "weft/error.hpp"

namespace weft::io {
namespace {

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string reason(int error) { return std::strerror(error); }

// 16 hex digits from the kernel's random source: a temporary name nobody can plant in advance.
std::string random_suffix() {
  std::uint64_t bits = 0;
  static std::atomic<std::uint64_t> fallback{0};
  if (::getrandom(&bits, sizeof bits, 0) != static_cast<ssize_t>(sizeof bits))
    bits = (static_cast<std::uint64_t>(::getpid()) << 32) ^ fallback.fetch_add(0x9e3779b97f4a7c15ull) ^
           static_cast<std::uint64_t>(::time(nullptr));
  static const char* hex = "0123456789abcdef";
  std::string out(16, '0');
  for (int k = 0; k < 16; ++k) out[k] = hex[(bits >> (4 * k)) & 15];
  return out;
}

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a plain file";
}

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string op, bool durable)
    : path_(std::move(path)), op_(std::move(op)), durable_(durable) {
  if (path_.empty() || path_.back() == '/')
    throw InvalidArgument(op_ + ": '" + path_ + "' is not a file name");
  const std::string dir = directory_of(path_);
  // A device, FIFO or directory at the target, or a symlink to one (/dev/stdout), is refused: the rename
  // would replace it (as root, /dev/full itself), not write into it. A symlink to a regular file is replaced
  // by the new file, its target left alone.
  struct stat seen {};
  if (::stat(path_.c_str(), &seen) == 0 && !S_ISREG(seen.st_mode)) {
    if (S_ISDIR(seen.st_mode)) throw InvalidArgument(op_ + ": cannot write '" + path_ + "': it is a directory");
    throw InvalidArgument(op_ + ": cannot write '" + path_ + "': it is not a regular file (" + kind_of(seen.st_mode) +
                          "); weft writes a file by renaming a new one into its place");
  }
  struct stat old {};
  const bool replaces = ::lstat(path_.c_str(), &old) == 0;
  for (int attempt = 0;; ++attempt) {
    temp_ = dir + "/." + base_of(path_) + ".tmp-" + random_suffix();
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    const int error = errno;
    if ((error == EEXIST || error == EINTR) && attempt < 100) continue;
    throw InvalidArgument(op_ + ": cannot create a temporary file in '" + dir + "' to write '" + path_ +
                          "': " + reason(error));
  }
  // The file it replaces keeps its permissions (item 9): owner and group first (chown clears the set-id
  // bits), where allowed; then the mode.
  if (replaces && S_ISREG(old.st_mode)) {
    [[maybe_unused]] const int owned = ::fchown(fd_, old.st_uid, old.st_gid);  // EPERM: another owner; keep ours
    if (::fchmod(fd_, old.st_mode & 07777) != 0) {
      const int error = errno;
      ::close(fd_);
      fd_ = -1;
      ::unlink(temp_.c_str());
      throw InvalidArgument(op_ + ": cannot give the new '" + path_ + "' the old one's mode: " + reason(error));
    }
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::fail(const std::string& what, int error) const {
  throw Error(op_ + ": writing '" + path_ + "' failed: " + what + ": " + reason(error));
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  if (fd_ < 0) throw Error(op_ + ": writing '" + path_ + "' after it was committed");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const std::size_t chunk = bytes < (std::size_t{1} << 30) ? bytes : (std::size_t{1} << 30);
    const ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error(op_ + ": '" + path_ + "' was already committed");
  // Data first, then the name: after a crash the target is the old file or the complete new one.
  if (durable_ && ::fsync(fd_) != 0) fail("fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", errno);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("rename from '" + temp_ + "'", errno);
  committed_ = true;
  if (!durable_) return;
  // The rename itself is durable only once the directory is.
  const int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) fail("opening its directory to sync it", errno);
  const int synced = ::fsync(dir);
  const int error = errno;
  ::close(dir);
  // Some file systems cannot sync a directory (EINVAL); the rename has still happened.
  if (synced != 0 && error != EINVAL) fail("fsync of its directory", error);
}

void write_file(const std::string& path, std::string_view text, const std::string& op, bool durable) {
  AtomicFile file(path, op, durable);
  file.write(text);
  file.commit();
}

InputFile::InputFile(std::string path, std::string op) : path_(std::move(path)), op_(std::move(op)) {
  // Non-blocking: opening a FIFO for reading would otherwise wait for a writer, forever (item 2).
  do {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) throw InvalidArgument(op_ + ": cannot open '" + path_ + "': " + reason(errno));
  struct stat st {};
  std::string refusal;
  if (::fstat(fd_, &st) != 0) refusal = reason(errno);
  else if (S_ISDIR(st.st_mode)) refusal = "it is a directory";
  else if (!S_ISREG(st.st_mode)) refusal = std::string("it is not a regular file (") + kind_of(st.st_mode) + ")";
  if (!refusal.empty()) {
    ::close(fd_);
    fd_ = -1;
    throw InvalidArgument(op_ + ": cannot open '" + path_ + "': " + refusal);
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read(std::uint64_t offset, void* out, std::size_t bytes, std::string_view what) const {
  if (offset > size_ || bytes > size_ - offset)
    throw InvalidArgument(op_ + ": '" + path_ + "': " + std::string(what) + " is truncated: it needs " + std::to_string(bytes) +
                          " bytes at offset " + std::to_string(offset) + " but the file has " + std::to_string(size_));
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    const std::size_t chunk = bytes < (std::size_t{1} << 30) ? bytes : (std::size_t{1} << 30);
    const ssize_t n = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(op_ + ": reading '" + path_ + "' failed: " + reason(errno));
    }
    if (n == 0)
      throw InvalidArgument(op_ + ": '" + path_ + "': " + std::string(what) + " is truncated: the file ended at byte " +
                            std::to_string(offset) + " (it shrank while being read)");
    p += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

std::string printable(std::string_view text, std::size_t max) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (i == max) return out + "...";
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace weft::io
