// The .safetensors file format, beside npy (npy.cc): writing a file and reading one as untrusted input.
// Internal: the session checkpoints (runtime/checkpoint.cc) are its user; which variable is which tensor, and
// the session layout stored in the metadata, are theirs, not this file's.
//
// A file is an 8-byte little-endian header length, a JSON header and the tensors' bytes. The header maps each
// tensor's name to its dtype ("F32", ...), shape and data_offsets [begin, end) within the data, and the key
// "__metadata__" to string metadata. Reading checks every size, offset and type against the file before
// anything is allocated: a truncated or corrupt file is an InvalidArgument "<op>: '<path>': <what>".
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "array/file_io.hpp"
#include "weft/array.hpp"
#include "weft/dtype.hpp"

namespace weft::safetensors {

struct NamedTensor {
  std::string name;
  Array data;
};

// Writes `tensors` one after the other, their header entries in that order, and `metadata` (string pairs,
// in that order) under "__metadata__", atomically (io::AtomicFile; `op` prefixes its errors).
void write(const std::string& path, const std::vector<std::pair<std::string, std::string>>& metadata,
           const std::vector<NamedTensor>& tensors, const std::string& op);

struct TensorInfo {
  DType dtype;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // the tensor's bytes within the data (after the header)
};

// A file opened for reading, its header parsed and checked.
class Reader {
 public:
  Reader(const std::string& path, const std::string& op);

  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Reads tensor `name` (described by `t`) into `out`, an array of t's dtype and shape. Booleans come back
  // as 0 or 1 (another writer's may be any non-zero byte).
  void read(const std::string& name, const TensorInfo& t, Array& out) const;
  // Throws InvalidArgument "<op>: '<path>': <what>", as the reader's own errors read.
  [[noreturn]] void fail(const std::string& what) const;

 private:
  std::string path_, op_;
  io::InputFile file_;
  std::uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Helpers the checkpoint's layout reader shares with the header reader:
// a JSON integer that fits in int64_t, else nullopt;
std::optional<std::int64_t> json_int(const nlohmann::json& j);
// the element count of a shape whose every partial product fits in 64 bits, else nullopt;
std::optional<std::uint64_t> checked_count(const Shape& shape);
// "float32 (2, 3)" in messages.
std::string type_str(DType dtype, const Shape& shape);

}  // namespace weft::safetensors
