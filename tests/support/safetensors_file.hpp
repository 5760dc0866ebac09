// A .safetensors file as its published description reads it (an 8-byte little-endian header length, a JSON
// header, the data), written independently of weft's reader and writer: tests parse what weft saved and
// build edited or malformed files from it (tests/inproc/checkpoint_test.cc, tests/training/resume_test.cc).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

namespace weft::testing {

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

struct SafetensorsBytes {
  nlohmann::json header;
  std::string data;
  std::uint64_t header_bytes = 0;
};

inline SafetensorsBytes ParseSafetensorsBytes(const std::string& bytes) {
  SafetensorsBytes f;
  for (int k = 0; k < 8; ++k) f.header_bytes |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes.at(k))) << (8 * k);
  f.header = nlohmann::json::parse(bytes.substr(8, f.header_bytes));
  f.data = bytes.substr(8 + f.header_bytes);
  return f;
}

// A file of this header text (padded with spaces to 8 bytes, as the format allows) and these data bytes.
inline std::string SafetensorsWithHeaderText(std::string text, const std::string& data) {
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  for (int k = 0; k < 8; ++k) out += static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * k)) & 0xff);
  return out + text + data;
}

inline std::string SafetensorsWithHeader(const nlohmann::json& header, const std::string& data) {
  return SafetensorsWithHeaderText(header.dump(), data);
}

}  // namespace weft::testing
