// The weft side of the numpy interop test (numpy_interop.py drives it with Debian's /usr/bin/python3):
//   npy_tool write DIR        writes the fixed set of arrays below as DIR/<name>.npy
//   npy_tool check DIR        reads every file listed in DIR/manifest.txt ("<file> <dtype> <dim>...") and
//                             checks dtype, shape and every value against the shared formula
//   npy_tool checkpoint FILE  saves a small session's checkpoint (read back by the script without weft)
// Exit status 0 when everything matched; each mismatch is printed.
//
// The values follow one formula on both sides, by flat C-order index i (numpy_interop.py has its twin):
//   float16/32/64 (and bfloat16): (i % 17 - 8) / 4      int8: (37 i) % 256 - 128      uint8: (37 i) % 256
//   int32: (2654435761 i) mod 2^32 - 2^31               int64: (0x9E3779B97F4A7C15 i) mod 2^64 - 2^63
//   bool: i % 3 == 0
// plus one float32 file of special values (NaN, infinities, -0, the smallest subnormal, the largest float).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "weft/checkpoint.hpp"
#include "weft/npy.hpp"
#include "weft/session.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

using weft::Array;
using weft::DType;
using weft::Shape;

double formula(DType dtype, std::int64_t i) {
  const auto u = static_cast<std::uint64_t>(i);
  switch (dtype) {
    case DType::f16:
    case DType::bf16:
    case DType::f32:
    case DType::f64: return static_cast<double>(i % 17 - 8) / 4;
    case DType::i8: return static_cast<double>(static_cast<std::int64_t>((37 * u) % 256) - 128);
    case DType::u8: return static_cast<double>((37 * u) % 256);
    case DType::i32: return static_cast<double>(static_cast<std::int64_t>((2654435761u * u) % 4294967296u) - 2147483648);
    case DType::boolean: return i % 3 == 0 ? 1 : 0;
    case DType::i64: break;
  }
  return 0;  // int64 is compared exactly, see int64_formula
}

std::int64_t int64_formula(std::int64_t i) {
  const std::uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(i);
  return static_cast<std::int64_t>(x - 0x8000000000000000ull);
}

Array make(DType dtype, const Shape& shape) {
  const std::int64_t n = weft::num_elements(shape);
  if (dtype == DType::i64) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = int64_formula(i);
    return Array::from_bytes(dtype, shape, v.data());
  }
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = formula(dtype, i);
  return Array::from_doubles(v, shape, dtype);
}

std::vector<float> specials() {
  return {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity(), -0.0f, std::numeric_limits<float>::denorm_min(),
          std::numeric_limits<float>::max()};
}

int write(const std::string& dir) {
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
  };
  const std::vector<Entry> entries = {
      {"f16_2x3", DType::f16, {2, 3}},     {"f32_5", DType::f32, {5}},         {"f64_2x3x4", DType::f64, {2, 3, 4}},
      {"bf16_4", DType::bf16, {4}},        {"i8_300", DType::i8, {300}},       {"i32_3x7", DType::i32, {3, 7}},
      {"i64_2x2", DType::i64, {2, 2}},     {"u8_256", DType::u8, {256}},       {"bool_9", DType::boolean, {9}},
      {"f32_scalar", DType::f32, {}},      {"i32_empty", DType::i32, {0}},     {"f64_empty_3x0", DType::f64, {3, 0}},
      {"f32_large", DType::f32, {1000, 1000}},
  };
  for (const Entry& e : entries) weft::save_npy(dir + "/" + e.name + ".npy", make(e.dtype, e.shape));
  weft::save_npy(dir + "/f32_special.npy", Array::from_vector(specials()));
  return 0;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

int check(const std::string& dir) {
  std::ifstream manifest(dir + "/manifest.txt");
  if (!manifest) {
    std::cerr << "npy_tool: no " << dir << "/manifest.txt\n";
    return 2;
  }
  int files = 0, failures = 0;
  std::string line;
  while (std::getline(manifest, line)) {
    std::istringstream in(line);
    std::string file, dtype_name;
    if (!(in >> file >> dtype_name)) continue;
    Shape shape;
    for (std::int64_t d; in >> d;) shape.push_back(d);
    ++files;
    auto fail = [&](const std::string& what) {
      std::cout << "MISMATCH " << file << ": " << what << "\n";
      ++failures;
    };
    Array a;
    try {
      a = weft::load_npy(dir + "/" + file);
    } catch (const std::exception& e) {
      fail(e.what());
      continue;
    }
    const DType dtype = weft::dtype_from_name(dtype_name);
    if (a.dtype() != dtype) fail(std::string("dtype ") + std::string(weft::dtype_name(a.dtype())));
    if (a.shape() != shape) fail("shape " + weft::shape_str(a.shape()));
    if (a.dtype() != dtype || a.shape() != shape) continue;
    if (file.find("special") != std::string::npos) {
      const std::vector<float> want = specials();
      const auto got = a.data<float>();
      for (std::size_t i = 0; i < want.size(); ++i)
        if (!(std::isnan(want[i]) ? std::isnan(got[i]) : same_bits(got[i], want[i]))) fail("special value " + std::to_string(i));
      continue;
    }
    for (std::int64_t i = 0; i < a.size(); ++i) {
      const bool ok = dtype == DType::i64 ? a.data<std::int64_t>()[static_cast<std::size_t>(i)] == int64_formula(i)
                                          : a.value_at(i) == formula(dtype, i);
      if (!ok) {
        fail("element " + std::to_string(i) + " is " + std::to_string(a.value_at(i)));
        break;
      }
    }
  }
  std::cout << "checked " << files << " files, " << failures << " mismatches\n";
  return files > 0 && failures == 0 ? 0 : 1;
}

// A session of 4 replicas: a plain float32 (2, 3) variable, an int32 (3,) variable grouped in 2 groups
// (one row per group: row g = formula + 1000 g), a bfloat16 (4,) variable and a remote buffer entry of
// uint8 (5,) not bound to a variable (one row per replica: formula + r).
int checkpoint(const std::string& path) {
  weft::Runtime rt({.device_count = 4});
  weft::Session s({.replicas = 4, .runtime = &rt});
  s.variable(make(DType::f32, {2, 3}), std::nullopt, weft::Retrieval::one_per_group, "w");
  Array grouped = Array::stack({make(DType::i32, {3}), make(DType::i32, {3}) + 1000.0});
  s.variable(grouped, s.replica_grouping(1, 2), weft::Retrieval::one_per_group, "layer.0/bias");
  s.variable(make(DType::bf16, {4}), std::nullopt, weft::Retrieval::one_per_group, "scale");
  weft::RemoteBuffer buffer = s.remote_buffer({5}, DType::u8, 1);
  s.run([&](weft::Replica& r) { r.remote_store(buffer, 0, make(DType::u8, {5}) + static_cast<double>(r.index())); });
  weft::save_checkpoint(s, path, {{"step", "7"}, {"note", "written by npy_tool"}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: npy_tool write|check DIR | npy_tool checkpoint FILE\n";
    return 2;
  }
  const std::string mode = argv[1];
  try {
    if (mode == "write") return write(argv[2]);
    if (mode == "check") return check(argv[2]);
    if (mode == "checkpoint") return checkpoint(argv[2]);
  } catch (const std::exception& e) {
    std::cerr << "npy_tool: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "npy_tool: unknown mode " << mode << "\n";
  return 2;
}
