// Files for the array and checkpoint formats (npy.cc, runtime/checkpoint.cc): an atomic writer and a bounded
// reader. Internal: never included by a public header.
//
// AtomicFile writes a temporary file next to the target (same directory, so the rename cannot cross file
// systems), fsyncs it, renames it over the target and fsyncs the directory: readers, and whoever looks after
// a crash, see the old file or the complete new one, never a truncated one. A writer that is destroyed
// without commit() (an exception, a failed write) removes its temporary file; a process killed mid-write
// leaves it behind under a hidden name (".<target>.tmp-<pid>-<n>"), never under the target's name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace weft::io {

class AtomicFile {
 public:
  // `op` prefixes error messages ("save_npy"). Creating the temporary file fails with InvalidArgument
  // (the path is unusable: no such directory, no permission); later I/O errors are weft::Error.
  AtomicFile(std::string path, std::string op);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync, close, rename over the target, fsync the directory. Nothing may be written afterwards.
  void commit();
  const std::string& temp_path() const { return temp_; }

 private:
  [[noreturn]] void fail(const std::string& what, int error) const;
  std::string path_, op_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// A file opened for reading at given offsets; every read is bounds-checked against the size seen at open.
class InputFile {
 public:
  // Fails with InvalidArgument "<op>: cannot open '<path>': <reason>" (also for directories).
  InputFile(std::string path, std::string op);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  std::uint64_t size() const { return size_; }
  // Reads exactly `bytes` at `offset` into `out`; a range beyond size() or a short read is an
  // InvalidArgument "<op>: '<path>': <what> is truncated ...".
  void read(std::uint64_t offset, void* out, std::size_t bytes, std::string_view what) const;

 private:
  std::string path_, op_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace weft::io
