// Files for the array and checkpoint formats (npy.cc, runtime/checkpoint.cc): an atomic writer and a bounded
// reader. Internal: never included by a public header.
//
// AtomicFile is how weft writes every file (checkpoints, npy, flight-recorder dumps, traces, launcher
// records): a temporary file next to the target (same directory, so the rename cannot cross file systems),
// fsynced, renamed over the target, the directory fsynced: readers, and whoever looks after a crash, see the
// old file or the complete new one, never a truncated one. A writer destroyed without commit() (an exception,
// a failed write) removes its temporary file; a process killed mid-write leaves it behind under a hidden name
// (".<target>.tmp-<16 random hex digits>"), never under the target's name.
//
// Files other users can touch (issue 21, items 8 and 9): the target's directory may be shared (/tmp, a
// WEFT_DUMP directory). The temporary name is unpredictable and created O_EXCL|O_NOFOLLOW, so a name planted
// there in advance (a symlink to a victim file) is never written through, and two jobs never share a
// temporary; the rename replaces a symlink at the target itself, never its target. A file that is replaced
// keeps its mode (and its owner and group where the process may set them); a new file gets 0666 less the
// umask, as open() gives.
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
  // `durable` = false skips the fsyncs (a diagnostic dump must not wait on a slow disk).
  AtomicFile(std::string path, std::string op, bool durable = true);
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
  bool durable_ = true;
  bool committed_ = false;
};

// Writes `text` to `path` through an AtomicFile (`op` prefixes its errors).
void write_file(const std::string& path, std::string_view text, const std::string& op, bool durable = true);

// A file opened for reading at given offsets; every read is bounds-checked against the size seen at open.
class InputFile {
 public:
  // Fails with InvalidArgument "<op>: cannot open '<path>': <reason>", also for a directory and for anything
  // that is not a regular file (a FIFO would block open() until a writer came; it is opened non-blocking
  // and refused).
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

// Untrusted text for a message: printable ASCII as is, anything else (a control character, a byte of a
// UTF-8 sequence, a backslash) as \xNN, at most `max` characters of it (then "...").
std::string printable(std::string_view text, std::size_t max = 40);

}  // namespace weft::io
