// Fashion-MNIST from its IDX files (the format of LeCun's MNIST: a big-endian header of magic, dimensions,
// then unsigned bytes), as Debian's dataset-fashion-mnist ships them: gzip-compressed, in
// /usr/share/datasets/fashion-mnist. Plain (uncompressed) files are read too.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <weft/array.hpp>

namespace mnist {

inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kImagePixels = 28 * 28;
inline constexpr int kClasses = 10;

// One split of the data set: images as float32 (n, 784) scaled to [0, 1], labels as int32 (n,).
struct Split {
  weft::Array images;
  weft::Array labels;
  std::int64_t size() const { return labels.size(); }
};

struct Dataset {
  Split train;
  Split test;
};

// Reads train-{images-idx3,labels-idx1}-ubyte[.gz] and t10k-... from `dir`. A missing, truncated or corrupt
// file, or files that disagree (image and label counts, labels out of 0..9), throw std::runtime_error naming
// the file and the problem (and, for a missing directory, the Debian package that provides it).
Dataset load_dataset(const std::string& dir);

// The pieces, for tests: an IDX file's dimensions and bytes. `expected_rank` = 3 for images, 1 for labels.
struct IdxFile {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};
IdxFile read_idx(const std::string& path, int expected_rank);
// Parses an IDX file already in memory (decompressed); `name` appears in error messages.
IdxFile parse_idx(const std::vector<std::uint8_t>& bytes, int expected_rank, const std::string& name);

}  // namespace mnist
