// Reading Fashion-MNIST's IDX files through zlib (which reads gzip and plain files alike).
#include "dataset.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>

namespace mnist {
namespace {

constexpr std::int64_t kMaxBytes = std::int64_t{1} << 31;  // far above the 47 MB of the training images

// The whole (decompressed) content of `path`.
std::vector<std::uint8_t> read_all(const std::string& path) {
  if (!std::filesystem::exists(path)) throw std::runtime_error(path + ": no such file");
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::vector<std::uint8_t> bytes;
  std::uint8_t chunk[1 << 16];
  for (;;) {
    const int n = gzread(file, chunk, sizeof chunk);
    if (n < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      throw std::runtime_error(path + ": corrupt or truncated compressed data (" + message + ")");
    }
    if (n == 0) {
      // gzread reports a stream cut short only through gzerror (Z_BUF_ERROR: unexpected end of file).
      int code = Z_OK;
      const std::string message = gzerror(file, &code);
      if (code != Z_OK) {
        gzclose(file);
        throw std::runtime_error(path + ": corrupt or truncated compressed data (" + message + ")");
      }
      break;
    }
    bytes.insert(bytes.end(), chunk, chunk + n);
    if (static_cast<std::int64_t>(bytes.size()) > kMaxBytes) {
      gzclose(file);
      throw std::runtime_error(path + ": larger than " + std::to_string(kMaxBytes) + " bytes; not an IDX file");
    }
  }
  gzclose(file);
  return bytes;
}

std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

// File name of one part, preferring the .gz Debian ships, else the plain file.
std::string part_path(const std::string& dir, const std::string& stem) {
  const std::string gz = dir + "/" + stem + ".gz";
  if (std::filesystem::exists(gz)) return gz;
  const std::string plain = dir + "/" + stem;
  if (std::filesystem::exists(plain)) return plain;
  throw std::runtime_error("Fashion-MNIST: neither " + gz + " nor " + plain + " exists");
}

Split load_split(const std::string& dir, const std::string& prefix) {
  const std::string images_path = part_path(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = part_path(dir, prefix + "-labels-idx1-ubyte");
  const IdxFile images = read_idx(images_path, 3);
  const IdxFile labels = read_idx(labels_path, 1);
  if (images.dims[1] != 28 || images.dims[2] != 28)
    throw std::runtime_error(images_path + ": images are " + std::to_string(images.dims[1]) + "x" +
                             std::to_string(images.dims[2]) + ", expected 28x28");
  if (images.dims[0] != labels.dims[0])
    throw std::runtime_error(images_path + " holds " + std::to_string(images.dims[0]) + " images but " + labels_path +
                             " holds " + std::to_string(labels.dims[0]) + " labels");
  const std::int64_t n = images.dims[0];
  std::vector<float> pixels(images.data.size());
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(images.data[i]) / 255.0f;
  std::vector<std::int32_t> classes(labels.data.size());
  for (std::size_t i = 0; i < classes.size(); ++i) {
    if (labels.data[i] >= kClasses)
      throw std::runtime_error(labels_path + ": label " + std::to_string(labels.data[i]) + " at index " +
                               std::to_string(i) + " is not a class 0..9");
    classes[i] = labels.data[i];
  }
  return {weft::Array::from_vector(pixels, {n, kImagePixels}), weft::Array::from_vector(classes, {n})};
}

}  // namespace

IdxFile parse_idx(const std::vector<std::uint8_t>& bytes, int expected_rank, const std::string& name) {
  if (bytes.size() < 4) throw std::runtime_error(name + ": truncated IDX header (" + std::to_string(bytes.size()) + " bytes)");
  // Magic: two zero bytes, the element type (0x08 = unsigned byte), the number of dimensions.
  if (bytes[0] != 0 || bytes[1] != 0) throw std::runtime_error(name + ": not an IDX file (bad magic)");
  if (bytes[2] != 0x08)
    throw std::runtime_error(name + ": IDX element type 0x" + std::to_string(bytes[2]) + " is not unsigned byte (0x08)");
  const int rank = bytes[3];
  if (rank != expected_rank)
    throw std::runtime_error(name + ": IDX file of rank " + std::to_string(rank) + ", expected " +
                             std::to_string(expected_rank));
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  if (bytes.size() < header) throw std::runtime_error(name + ": truncated IDX header");
  IdxFile file;
  std::int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const std::int64_t dim = big_endian_u32(&bytes[4 + 4 * d]);
    file.dims.push_back(dim);
    if (dim != 0 && count > kMaxBytes / dim) throw std::runtime_error(name + ": IDX dimensions overflow");
    count *= dim;
  }
  if (static_cast<std::int64_t>(bytes.size() - header) != count)
    throw std::runtime_error(name + ": IDX header promises " + std::to_string(count) + " bytes of data, the file has " +
                             std::to_string(bytes.size() - header) + " (truncated or corrupt)");
  file.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return file;
}

IdxFile read_idx(const std::string& path, int expected_rank) { return parse_idx(read_all(path), expected_rank, path); }

Dataset load_dataset(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) {
    std::string hint = dir == kDefaultDataDir ? " (install the Debian package dataset-fashion-mnist, or pass --data DIR)"
                                              : "";
    throw std::runtime_error("Fashion-MNIST: data directory " + dir + " does not exist" + hint);
  }
  return {load_split(dir, "train"), load_split(dir, "t10k")};
}

}  // namespace mnist
