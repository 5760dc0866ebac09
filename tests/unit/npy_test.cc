// numpy .npy files (weft/npy.hpp): round trips of every dtype and shape, headers built by hand from the
// format's description (numpy/lib/format.py: magic "\x93NUMPY", major, minor, little-endian header length
// of 2 bytes for 1.0 and 4 bytes for 2.0/3.0, a Python dict literal, the data), big-endian and
// Fortran-ordered data, and malformed files refused with their error text. Interop with numpy itself is in
// tests/npy/ (numpy_interop.py).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "../support/errors.hpp"
#include "../support/temp_dir.hpp"
#include "weft/error.hpp"
#include "weft/npy.hpp"

namespace weft {
namespace {
namespace npy_test {

using testing::ErrorOf;
using testing::ExpectContains;
using testing::TempDir;

const std::string kMagic("\x93NUMPY", 6);

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A file as the format describes it: preamble for version major.0, the dict as given (no padding added),
// then the data bytes.
std::string NpyFile(int major, const std::string& dict, const std::string& data = "") {
  std::string out = kMagic;
  out += static_cast<char>(major);
  out += '\0';
  const int length_bytes = major == 1 ? 2 : 4;
  for (int k = 0; k < length_bytes; ++k) out += static_cast<char>((dict.size() >> (8 * k)) & 0xff);
  return out + dict + data;
}

std::string Dict(const std::string& descr, bool fortran, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape + ", }\n";
}

// Little-endian / big-endian bytes of an integer of `bytes` bytes.
std::string LE(std::uint64_t v, int bytes) {
  std::string out;
  for (int k = 0; k < bytes; ++k) out += static_cast<char>((v >> (8 * k)) & 0xff);
  return out;
}
std::string BE(std::uint64_t v, int bytes) {
  std::string out;
  for (int k = bytes - 1; k >= 0; --k) out += static_cast<char>((v >> (8 * k)) & 0xff);
  return out;
}
std::uint64_t Bits(double d) {
  std::uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}
std::uint32_t Bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::int64_t Count(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// Deterministic bytes (splitmix64) for every dtype but bool, whose elements are 0 or 1: NaN payloads,
// infinities, subnormals and integer extremes all occur, and a round trip must keep every bit.
Array Sample(DType dtype, const Shape& shape, std::uint64_t seed) {
  const std::size_t n = static_cast<std::size_t>(Count(shape)) * dtype_size(dtype);
  std::vector<std::uint8_t> bytes(n);
  std::uint64_t x = seed;
  for (std::size_t i = 0; i < n; ++i) {
    x += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    bytes[i] = static_cast<std::uint8_t>((z ^ (z >> 31)) & 0xff);
    if (dtype == DType::boolean) bytes[i] = bytes[i] % 3 == 0;
  }
  return Array::from_bytes(dtype, shape, bytes.data());
}

std::string BytesOf(const Array& a) { return std::string(reinterpret_cast<const char*>(a.bytes()), a.nbytes()); }

void ExpectIdentical(const Array& actual, const Array& expected, const std::string& what) {
  EXPECT_EQ(dtype_name(actual.dtype()), dtype_name(expected.dtype())) << what;
  EXPECT_EQ(shape_str(actual.shape()), shape_str(expected.shape())) << what;
  EXPECT_TRUE(BytesOf(actual) == BytesOf(expected)) << what << ": the bytes differ";
}

// ---- writing: the exact bytes ----------------------------------------------------------------------------

// Known answer: numpy 1.24's np.lib.format.write_array(f, np.arange(6, dtype='<i4').reshape(2, 3),
// version=(1, 0)) writes this 128-byte header (118 = 0x76 bytes of dict, padded with spaces, then '\n').
TEST(NpyTest, WritesTheHeaderNumpyWrites) {
  const std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string expected_header = kMagic + std::string("\x01\x00\x76\x00", 4) + dict + std::string(58, ' ') + "\n";
  ASSERT_EQ(expected_header.size(), 128u);
  std::string data;
  for (int i = 0; i < 6; ++i) data += LE(static_cast<std::uint64_t>(i), 4);
  EXPECT_EQ(serialize_npy(Array::from_vector<std::int32_t>({0, 1, 2, 3, 4, 5}, {2, 3})), expected_header + data);
}

// The dict of every dtype weft writes (numpy's descr strings), and the data offset is a multiple of 64.
TEST(NpyTest, DescrOfEveryDtype) {
  const std::vector<std::pair<DType, std::string>> cases = {
      {DType::f32, "'<f4'"}, {DType::f64, "'<f8'"}, {DType::f16, "'<f2'"}, {DType::bf16, "'<f4'"}, {DType::i8, "'|i1'"},
      {DType::i32, "'<i4'"}, {DType::i64, "'<i8'"}, {DType::u8, "'|u1'"},  {DType::boolean, "'|b1'"},
  };
  for (const auto& [dtype, descr] : cases) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const std::string bytes = serialize_npy(Array::zeros({3}, dtype));
    ASSERT_GE(bytes.size(), 10u);
    const std::size_t dict_bytes = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    EXPECT_EQ((10 + dict_bytes) % 64, 0u);
    const std::size_t item = dtype == DType::bf16 ? 4 : dtype_size(dtype);
    EXPECT_EQ(bytes.size(), 10 + dict_bytes + 3 * item);
    const std::string dict = "{'descr': " + descr + ", 'fortran_order': False, 'shape': (3,), }";
    EXPECT_EQ(bytes.substr(10, dict.size()), dict);
    EXPECT_EQ(bytes[10 + dict_bytes - 1], '\n');
  }
}

// ---- round trips ---------------------------------------------------------------------------------------------

TEST(NpyTest, RoundTripsEveryDtypeAndShape) {
  const std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::i8, DType::i32, DType::i64, DType::u8, DType::boolean};
  const std::vector<Shape> shapes = {{}, {0}, {1}, {7}, {2, 3}, {3, 0, 2}, {2, 3, 4}, {1, 1, 1, 5}};
  std::uint64_t seed = 1;
  for (DType dtype : dtypes)
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(shape));
      const Array a = Sample(dtype, shape, seed++);
      ExpectIdentical(parse_npy(serialize_npy(a)), a, "parse_npy(serialize_npy(a))");
    }
}

// bfloat16 has no numpy dtype: it is written as float32, whose bits are the bfloat16 bits shifted up 16.
TEST(NpyTest, Bfloat16IsWrittenAsFloat32) {
  const std::vector<std::uint16_t> bits = {0x0000, 0x8000, 0x3f80, 0xc040, 0x7f80, 0xff80, 0x0001, 0x7f7f, 0x3e20};
  const Array a = Array::from_bytes(DType::bf16, {3, 3}, bits.data());
  std::vector<std::uint32_t> wide;
  for (std::uint16_t b : bits) wide.push_back(static_cast<std::uint32_t>(b) << 16);
  ExpectIdentical(parse_npy(serialize_npy(a)), Array::from_bytes(DType::f32, {3, 3}, wide.data()), "bf16");
}

TEST(NpyTest, LargeArraysThroughFiles) {
  TempDir dir;
  const std::vector<std::pair<DType, Shape>> cases = {{DType::f32, {1 << 20}}, {DType::f64, {512, 1031}}, {DType::u8, {3, 1000001}}};
  for (const auto& [dtype, shape] : cases) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(shape));
    const Array a = Sample(dtype, shape, 99);
    const std::string path = dir.file("large.npy");
    save_npy(path, a);
    ExpectIdentical(load_npy(path), a, "load_npy(save_npy(a))");
  }
  // Saving leaves only the target behind (the temporary file was renamed over it).
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"large.npy"});
}

// A header longer than 65535 bytes needs version 2.0 (4-byte length); weft switches to it by itself.
TEST(NpyTest, LongHeadersUseVersion2) {
  const Shape shape(22000, 1);  // "1, " per dimension: about 66000 bytes of dict
  const Array a = Array::from_vector<std::int32_t>({-7}).reshape(shape);
  const std::string bytes = serialize_npy(a);
  ASSERT_GT(bytes.size(), 12u);
  EXPECT_EQ(bytes[6], '\x02');
  EXPECT_EQ(bytes[7], '\x00');
  const std::size_t dict_bytes = static_cast<unsigned char>(bytes[8]) | static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8 |
                                 static_cast<std::size_t>(static_cast<unsigned char>(bytes[10])) << 16;
  EXPECT_GT(dict_bytes, 65535u);
  EXPECT_EQ((12 + dict_bytes) % 64, 0u);
  ExpectIdentical(parse_npy(bytes), a, "version 2.0 round trip");
  // One dimension fewer than the limit stays at version 1.0.
  EXPECT_EQ(serialize_npy(Array::zeros({2, 3}, DType::f32))[6], '\x01');
}

// ---- reading headers built by hand --------------------------------------------------------------------------

struct ReadCase {
  std::string name;
  std::string file;
  Array expected;
};

TEST(NpyTest, ReadsHandBuiltFiles) {
  std::string f4;
  for (float v : {1.5f, -2.0f}) f4 += LE(Bits(v), 4);
  std::string be_i4 = BE(1, 4) + BE(0xfffffffeu, 4) + BE(0x01020304u, 4);
  // Fortran order, shape (2, 3), a[i][j] = 10 i + j: the file lists columns: a00 a10 a01 a11 a02 a12.
  std::string fortran_i4;
  for (int v : {0, 10, 1, 11, 2, 12}) fortran_i4 += LE(static_cast<std::uint64_t>(v), 4);
  // Fortran order, shape (2, 3, 4): element (i, j, k) at position i + 2 j + 6 k, value 100 i + 10 j + k.
  std::vector<std::int64_t> f3(24), c3(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        f3[i + 2 * j + 6 * k] = 100 * i + 10 * j + k;
        c3[(i * 3 + j) * 4 + k] = 100 * i + 10 * j + k;
      }
  std::string fortran_be_i8, fortran_le_i8;
  for (std::int64_t v : f3) {
    fortran_be_i8 += BE(static_cast<std::uint64_t>(v), 8);
    fortran_le_i8 += LE(static_cast<std::uint64_t>(v), 8);
  }
  std::vector<std::int32_t> c2 = {0, 1, 2, 10, 11, 12};

  const std::vector<ReadCase> cases = {
      {"v1 <f4", NpyFile(1, Dict("<f4", false, "(2,)"), f4), Array::from_vector<float>({1.5f, -2.0f})},
      {"v2 <f4", NpyFile(2, Dict("<f4", false, "(2,)"), f4), Array::from_vector<float>({1.5f, -2.0f})},
      {"v3 <f4", NpyFile(3, Dict("<f4", false, "(2,)"), f4), Array::from_vector<float>({1.5f, -2.0f})},
      {"big-endian int32", NpyFile(1, Dict(">i4", false, "(3,)"), be_i4), Array::from_vector<std::int32_t>({1, -2, 0x01020304})},
      {"big-endian float64", NpyFile(1, Dict(">f8", false, "()"), BE(Bits(-0.1), 8)), Array::scalar(-0.1, DType::f64)},
      {"big-endian float32", NpyFile(2, Dict(">f4", false, "(1,)"), BE(Bits(3.25f), 4)), Array::from_vector<float>({3.25f})},
      {"big-endian float16", NpyFile(1, Dict(">f2", false, "(2,)"), BE(0x3c00, 2) + BE(0xc500, 2)),
       Array::from_doubles({1.0, -5.0}, {2}, DType::f16)},
      {"little-endian float16", NpyFile(1, Dict("<f2", false, "(2,)"), LE(0x3c00, 2) + LE(0xc500, 2)),
       Array::from_doubles({1.0, -5.0}, {2}, DType::f16)},
      {"big-endian int64", NpyFile(1, Dict(">i8", false, "(1,)"), BE(0x8000000000000000ull, 8)),
       Array::from_vector<std::int64_t>({INT64_MIN})},
      {"int8", NpyFile(1, Dict("|i1", false, "(3,)"), "\x80\x7f\xff"), Array::from_vector<std::int8_t>({-128, 127, -1})},
      {"uint8 with '<'", NpyFile(1, Dict("<u1", false, "(2,)"), "\xff\x01"), Array::from_vector<std::uint8_t>({255, 1})},
      {"bool: any non-zero byte is True", NpyFile(1, Dict("|b1", false, "(3,)"), std::string("\x00\x02\x01", 3)),
       Array::from_vector<bool>({false, true, true})},
      {"no byte order", NpyFile(1, Dict("i4", false, "(1,)"), LE(5, 4)), Array::from_vector<std::int32_t>({5})},
      {"native '='", NpyFile(1, Dict("=i4", false, "(1,)"), LE(6, 4)), Array::from_vector<std::int32_t>({6})},
      {"Fortran 2-d", NpyFile(1, Dict("<i4", true, "(2, 3)"), fortran_i4), Array::from_vector(c2, {2, 3})},
      {"Fortran 3-d", NpyFile(1, Dict("<i8", true, "(2, 3, 4)"), fortran_le_i8), Array::from_vector(c3, {2, 3, 4})},
      {"Fortran big-endian 3-d", NpyFile(3, Dict(">i8", true, "(2, 3, 4)"), fortran_be_i8), Array::from_vector(c3, {2, 3, 4})},
      {"Fortran 1-d is C order", NpyFile(1, Dict("<i4", true, "(2,)"), LE(1, 4) + LE(2, 4)), Array::from_vector<std::int32_t>({1, 2})},
      {"Fortran empty", NpyFile(1, Dict("<i4", true, "(2, 0)")), Array::zeros({2, 0}, DType::i32)},
      {"0-d", NpyFile(1, Dict("<i4", false, "()"), LE(9, 4)), Array::scalar(9, DType::i32)},
      {"empty", NpyFile(1, Dict("<f8", false, "(0,)")), Array::zeros({0}, DType::f64)},
      {"empty with a huge dimension", NpyFile(1, Dict("<f8", false, "(0, 9223372036854775807)")),
       Array::zeros({0, INT64_MAX}, DType::f64)},
      {"double quotes, keys reordered, no trailing comma",
       NpyFile(1, "{\"shape\": (1,), \"fortran_order\": False, \"descr\": \"<i4\"}", LE(3, 4)), Array::from_vector<std::int32_t>({3})},
      {"spaces everywhere and Python 2 longs",
       NpyFile(1, "  {  'descr' :'<i4' ,'fortran_order':False,'shape':( 1L , 2L , )  }  \n\t ", LE(1, 4) + LE(2, 4)),
       Array::from_vector<std::int32_t>({1, 2}, {1, 2})},
  };
  for (const ReadCase& c : cases) {
    SCOPED_TRACE(c.name);
    Array got;
    ASSERT_NO_THROW(got = parse_npy(c.file, c.name));
    ExpectIdentical(got, c.expected, c.name);
  }
}

// ---- malformed files ------------------------------------------------------------------------------------

struct BadCase {
  std::string name;
  std::string file;
  std::string error;  // the message after "parse_npy: '<name>': "
};

TEST(NpyTest, RefusesMalformedFilesWithTheProblemNamed) {
  const std::string ok_dict = Dict("<f4", false, "(3,)");
  const std::string data12(12, '\0');
  const std::vector<BadCase> cases = {
      {"empty", "", "truncated: 0 bytes is too short for the magic string and version"},
      {"magic only", kMagic, "truncated: 6 bytes is too short for the magic string and version"},
      {"bad magic", "\x93NUMPZ\x01\x00", "not a .npy file: it does not start with the magic string \\x93NUMPY (found '\\x93NUMPZ')"},
      {"a text file", "hello world, not numpy", "not a .npy file"},
      {"version 4.0", kMagic + std::string("\x04\x00\x00\x00", 4), "unsupported format version 4.0 (weft reads 1.0, 2.0 and 3.0)"},
      {"version 1.1", kMagic + std::string("\x01\x01\x00\x00", 4), "unsupported format version 1.1"},
      {"version 0.0", kMagic + std::string("\x00\x00\x00\x00", 4), "unsupported format version 0.0"},
      {"no header length", kMagic + std::string("\x01\x00\x05", 3), "truncated: the header length field needs 10 bytes, the file has 9"},
      {"v2 header length cut", kMagic + std::string("\x02\x00\x05\x00\x00", 5), "the header length field needs 12 bytes, the file has 11"},
      {"truncated header", NpyFile(1, ok_dict).substr(0, 30), "truncated header: it declares " + std::to_string(ok_dict.size()) + " bytes but the file has 20 after the preamble"},
      {"v2 header length 4 GiB", kMagic + std::string("\x02\x00\xff\xff\xff\xff{}", 8), "truncated header: it declares 4294967295 bytes but the file has 2"},
      {"truncated data", NpyFile(1, ok_dict, std::string(8, '\0')), "data is truncated: float32 (3,) needs 12 bytes but the file has 8 after the header"},
      {"trailing data", NpyFile(1, ok_dict, std::string(16, '\0')), "the file has 4 bytes after the data of float32 (3,) (12 bytes)"},
      {"huge shape overflows", NpyFile(1, Dict("<f4", false, "(4294967296, 4294967296)"), data12), "shape (4294967296, 4294967296) has more elements than fit in 64 bits"},
      {"overflow past a zero", NpyFile(1, Dict("<f4", false, "(9223372036854775807, 2, 0)"), ""), "has more elements than fit in 64 bits"},
      {"dimension beyond 64 bits", NpyFile(1, Dict("<f4", false, "(99999999999999999999,)"), data12), "dimension 99999999999999999999 does not fit in 64 bits"},
      {"huge but finite shape", NpyFile(1, Dict("<f4", false, "(1000000000000,)"), data12), "data is truncated: float32 (1000000000000,) needs 4000000000000 bytes but the file has 12"},
      {"elements times size overflow", NpyFile(1, Dict("<f8", false, "(9223372036854775807,)"), data12), "needs 9223372036854775807 x 8 bytes"},
      {"negative dimension", NpyFile(1, Dict("<f4", false, "(-3,)"), data12), "negative dimension in the shape"},
      {"shape not a tuple", NpyFile(1, Dict("<f4", false, "[3]"), data12), "the shape must be a tuple, found a list"},
      {"(3) is not a tuple", NpyFile(1, Dict("<f4", false, "(3)"), data12), "the shape (n) is not a tuple; a 1-d shape is written (n,)"},
      {"dimension not a number", NpyFile(1, Dict("<f4", false, "(3.0,)"), data12), "expected ')' after a dimension in the shape, found '.'"},
      {"unclosed shape", NpyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,"), "expected a dimension (a non-negative integer) in the shape, found the end of the header"},
      {"missing shape", NpyFile(1, "{'descr': '<f4', 'fortran_order': False}"), "the header has no 'shape'"},
      {"missing descr", NpyFile(1, "{'fortran_order': False, 'shape': (3,)}"), "the header has no 'descr'"},
      {"missing fortran_order", NpyFile(1, "{'descr': '<f4', 'shape': (3,)}"), "the header has no 'fortran_order'"},
      {"unknown key", NpyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}", data12), "unexpected key 'x' (a .npy header has exactly descr, fortran_order and shape)"},
      {"duplicate key", NpyFile(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", data12), "the key 'descr' appears twice"},
      {"fortran_order not a bool", NpyFile(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", data12), "fortran_order must be True or False, found '0'"},
      {"lower-case true", NpyFile(1, "{'descr': '<f4', 'fortran_order': true, 'shape': (3,)}", data12), "fortran_order must be True or False"},
      {"no dict", NpyFile(1, "'descr': '<f4'"), "bad header at byte 0 of the dict: expected '{' at the start of the header dict, found '''"},
      {"unquoted key", NpyFile(1, "{descr: '<f4'}"), "expected a quoted string for a key, found 'd'"},
      {"missing colon", NpyFile(1, "{'descr' '<f4'}"), "expected ':' after the key 'descr', found '''"},
      {"missing comma", NpyFile(1, "{'descr': '<f4' 'shape': (3,)}"), "expected '}' after the value of 'descr', found '''"},
      {"unterminated string", NpyFile(1, "{'descr: '<f4'}"), "bad header at byte 10 of the dict: expected ':' after the key 'descr: ', found '<'"},
      {"string runs off the end", NpyFile(1, "{'descr"), "bad header at byte 1 of the dict: unterminated string"},
      {"escape in a string", NpyFile(1, "{'de\\x73cr': '<f4'}"), "escape sequences in strings are not supported"},
      {"text after the dict", NpyFile(1, Dict("<f4", false, "(3,)") + "junk", data12), "unexpected text after the header dict: 'junk'"},
      {"NUL padding", NpyFile(1, Dict("<f4", false, "(3,)") + std::string(1, '\0'), data12), "unexpected text after the header dict: '\\x00'"},
      {"structured dtype", NpyFile(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}"), "structured dtypes (a list descr) are not supported"},
      {"complex", NpyFile(1, Dict("<c8", false, "(3,)"), data12), "unsupported dtype '<c8' (weft reads float16, float32, float64, int8, int32, int64, uint8 and bool)"},
      {"uint32", NpyFile(1, Dict("<u4", false, "(3,)"), data12), "unsupported dtype '<u4'"},
      {"int16", NpyFile(1, Dict("<i2", false, "(3,)"), data12), "unsupported dtype '<i2'"},
      {"bytes", NpyFile(1, Dict("|S3", false, "(3,)"), data12), "unsupported dtype '|S3'"},
      {"object", NpyFile(1, Dict("|O", false, "(3,)"), data12), "unsupported dtype '|O'"},
      {"datetime", NpyFile(1, Dict("<M8[ns]", false, "(3,)"), data12), "unsupported dtype '<M8[ns]'"},
      {"control characters named", NpyFile(1, Dict("<\x01\xff", false, "(3,)"), data12), "unsupported dtype '<\\x01\\xff'"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string error = ErrorOf<InvalidArgument>([&] { parse_npy(c.file, c.name); });
    ExpectContains(error, {"parse_npy: '" + c.name + "': " , c.error});
  }
}

TEST(NpyTest, FileErrorsNameTheFile) {
  TempDir dir;
  const std::string missing = dir.file("missing.npy");
  ExpectContains(ErrorOf<InvalidArgument>([&] { load_npy(missing); }),
                 {"load_npy: cannot open '" + missing + "': No such file or directory"});
  ExpectContains(ErrorOf<InvalidArgument>([&] { load_npy(dir.path()); }),
                 {"load_npy: cannot open '" + dir.path() + "': it is a directory"});
  const std::string cut = dir.file("cut.npy");
  {
    const std::string whole = serialize_npy(Array::arange(10));
    std::ofstream(cut, std::ios::binary) << whole.substr(0, whole.size() - 4);
  }
  ExpectContains(ErrorOf<InvalidArgument>([&] { load_npy(cut); }),
                 {"load_npy: '" + cut + "': data is truncated: float32 (10,) needs 40 bytes but the file has 36 after the header"});
  const std::string nowhere = dir.file("no-such-dir/x.npy");
  ExpectContains(ErrorOf<InvalidArgument>([&] { save_npy(nowhere, Array::arange(3)); }),
                 {"save_npy: cannot create a temporary file in '" + dir.file("no-such-dir") + "' to write '" + nowhere +
                  "': No such file or directory"});
}

// Saving over an existing file replaces it whole; nothing else is left in the directory.
TEST(NpyTest, SaveReplacesTheTarget) {
  TempDir dir;
  const std::string path = dir.file("w.npy");
  save_npy(path, Array::arange(1000, DType::i64));
  const Array small = Array::from_vector<std::int8_t>({1, 2});
  save_npy(path, small);
  ExpectIdentical(load_npy(path), small, "after overwriting");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.npy"});
}

// Files other users can touch (issue 21, items 2, 8 and 9): a FIFO is refused at once instead of blocking in
// open(); a save keeps the mode the user gave the file and a new file follows the umask; the temporary file is
// created under an unpredictable name, so names planted in advance (symlinks to a victim, here at every name
// of the old scheme ".<target>.tmp-<pid>-<n>") neither redirect the write nor stop the save.
TEST(NpyTest, FilesOtherUsersCanTouch) {
  TempDir dir;
  const std::string fifo = dir.file("fifo.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::promise<void> returned;
  std::thread unblock([&, done = returned.get_future()] {  // so that the old behaviour (blocking until a writer comes) fails, not hangs
    if (done.wait_for(std::chrono::seconds(3)) == std::future_status::ready) return;
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  });
  const auto start = std::chrono::steady_clock::now();
  const std::string error = ErrorOf<InvalidArgument>([&] { load_npy(fifo); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  returned.set_value();
  unblock.join();
  EXPECT_LT(seconds, 1.0);
  EXPECT_EQ(error, "load_npy: cannot open '" + fifo + "': it is not a regular file (a FIFO)");
  // Nor is a FIFO (or a symlink to one) replaced by a save: renamed over, it would be gone.
  const std::string link_to_fifo = dir.file("fifo-link.npy");
  ASSERT_EQ(::symlink(fifo.c_str(), link_to_fifo.c_str()), 0);
  for (const std::string& target : {fifo, link_to_fifo})
    EXPECT_EQ(ErrorOf<InvalidArgument>([&] { save_npy(target, Array::arange(3)); }),
              "save_npy: cannot write '" + target + "': it is not a regular file (a FIFO); weft writes a file by renaming a new one "
              "into its place");
  struct stat fifo_st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &fifo_st), 0);
  EXPECT_TRUE(S_ISFIFO(fifo_st.st_mode));
  ::unlink(link_to_fifo.c_str());

  const std::string path = dir.file("w.npy");
  auto mode = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return st.st_mode & 07777;
  };
  const mode_t old_mask = ::umask(077);
  save_npy(path, Array::arange(3));
  EXPECT_EQ(mode(), 0600u);
  ::umask(022);
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  save_npy(path, Array::arange(4));
  EXPECT_EQ(mode(), 0640u) << "the save reset the file's mode";
  ::umask(old_mask);

  const std::string victim = dir.file("victim");
  WriteText(victim, "precious");
  for (int n = 0; n < 300; ++n)
    ASSERT_EQ(::symlink(victim.c_str(), (dir.file(".w.npy.tmp-") + std::to_string(::getpid()) + "-" + std::to_string(n)).c_str()), 0);
  save_npy(path, Array::arange(5));
  ExpectIdentical(load_npy(path), Array::arange(5), "after the save past the planted names");
  std::ifstream in(victim);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "precious");
}

// Every prefix of valid files and every single-byte corruption of their headers parses or is refused with
// an InvalidArgument: never a crash or another exception (the fuzzer's property, run on a fixed set).
TEST(NpyTest, EveryTruncationAndHeaderCorruptionIsAnInvalidArgument) {
  const std::vector<std::string> files = {
      serialize_npy(Sample(DType::f32, {2, 3}, 5)),
      NpyFile(3, Dict(">i8", true, "(2, 3, 4)"), std::string(192, '\x01')),
      NpyFile(2, "{\"descr\": \"|b1\", \"shape\": (), \"fortran_order\": False}", "\x01"),
  };
  // 1 when parse_npy refuses the bytes with an InvalidArgument naming them, 0 when it parses them.
  auto refused = [](const std::string& bytes) {
    try {
      parse_npy(bytes, "variant");
      return 0;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("parse_npy: 'variant': ", 0), 0u) << e.what();
      return 1;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an InvalidArgument: " << e.what();
      return 1;
    }
  };
  int flips = 0, flips_refused = 0;
  for (const std::string& file : files) {
    ASSERT_EQ(refused(file), 0);
    for (std::size_t n = 0; n < file.size(); ++n) EXPECT_EQ(refused(file.substr(0, n)), 1) << "prefix of " << n << " bytes";
    for (std::size_t i = 0; i < std::min<std::size_t>(file.size(), 140); ++i)
      for (unsigned char flip : {0x01, 0x20, 0x80, 0xff}) {
        std::string v = file;
        v[i] = static_cast<char>(static_cast<unsigned char>(v[i]) ^ flip);
        ++flips;
        flips_refused += refused(v);
      }
  }
  // Most flips break the header; some (in the padding, in values) leave a valid file.
  EXPECT_GT(flips_refused, flips / 2);
  EXPECT_LT(flips_refused, flips);
}

}  // namespace npy_test
}  // namespace
}  // namespace weft
