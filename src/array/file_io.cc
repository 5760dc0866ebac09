// Atomic file writes and bounded reads (see file_io.hpp for why the write goes through a renamed temporary).
#include "array/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
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

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string op) : path_(std::move(path)), op_(std::move(op)) {
  if (path_.empty() || path_.back() == '/')
    throw InvalidArgument(op_ + ": '" + path_ + "' is not a file name");
  const std::string dir = directory_of(path_);
  // Unique per process and per writer; O_EXCL guards against a leftover of a killed process whose pid
  // was reused.
  static std::atomic<std::uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    temp_ = dir + "/." + base_of(path_) + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    const int error = errno;
    if (error == EEXIST && attempt < 100) continue;
    if (error == EINTR) continue;
    throw InvalidArgument(op_ + ": cannot create a temporary file in '" + dir + "' to write '" + path_ +
                          "': " + reason(error));
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
  if (::fsync(fd_) != 0) fail("fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", errno);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("rename from '" + temp_ + "'", errno);
  committed_ = true;
  // The rename itself is durable only once the directory is.
  const int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) fail("opening its directory to sync it", errno);
  const int synced = ::fsync(dir);
  const int error = errno;
  ::close(dir);
  // Some file systems cannot sync a directory (EINVAL); the rename has still happened.
  if (synced != 0 && error != EINVAL) fail("fsync of its directory", error);
}

InputFile::InputFile(std::string path, std::string op) : path_(std::move(path)), op_(std::move(op)) {
  do {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) throw InvalidArgument(op_ + ": cannot open '" + path_ + "': " + reason(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int error = errno;
    ::close(fd_);
    throw InvalidArgument(op_ + ": cannot open '" + path_ + "': " + reason(error));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    throw InvalidArgument(op_ + ": cannot open '" + path_ + "': it is a directory");
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

}  // namespace weft::io
