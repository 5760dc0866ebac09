// numpy's .npy format (numpy/lib/format.py, NEP 1): a magic string, a version, a little-endian header
// length, a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)} and the raw data.
//
// The reader faces untrusted files (and a fuzzer): the dict is parsed by a small hand-written parser that
// accepts exactly the literals numpy writes (quoted strings, True/False, tuples of non-negative integers)
// and nothing that needs evaluating; every length is checked against the bytes that are really there
// before anything is allocated, and every problem is an InvalidArgument "<op>: '<file>': <what>".
#include "weft/npy.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "array/file_io.hpp"
#include "weft/error.hpp"

namespace weft {
namespace {

static_assert(std::endian::native == std::endian::little, "the npy reader assumes a little-endian host");

constexpr std::string_view kMagic{"\x93NUMPY", 6};
constexpr std::size_t kAlign = 64;  // numpy aligns the data to 64 bytes since 1.14

struct Context {
  std::string op, name;
  [[noreturn]] void fail(const std::string& what) const { throw InvalidArgument(op + ": '" + name + "': " + what); }
};

using io::printable;  // untrusted text in messages: \xNN escapes, at most 40 characters

// ---- dtypes ------------------------------------------------------------------------------------------

struct NpyType {
  char kind;
  std::size_t size;
  DType dtype;
};
constexpr NpyType kTypes[] = {
    {'f', 2, DType::f16}, {'f', 4, DType::f32}, {'f', 8, DType::f64}, {'i', 1, DType::i8},
    {'i', 4, DType::i32}, {'i', 8, DType::i64}, {'u', 1, DType::u8},  {'b', 1, DType::boolean},
};

struct Descr {
  DType dtype;
  bool swap;  // stored big-endian
};

[[noreturn]] void unsupported_descr(const std::string& descr, const Context& ctx) {
  ctx.fail("unsupported dtype '" + printable(descr) +
           "' (weft reads float16, float32, float64, int8, int32, int64, uint8 and bool)");
}

Descr parse_descr(const std::string& descr, const Context& ctx) {
  std::string_view d = descr;
  char order = '=';
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) {
    order = d[0];
    d.remove_prefix(1);
  }
  if (d.size() != 2 || d[1] < '1' || d[1] > '9') unsupported_descr(descr, ctx);
  const std::size_t size = static_cast<std::size_t>(d[1] - '0');
  for (const NpyType& t : kTypes)
    if (t.kind == d[0] && t.size == size) return {t.dtype, order == '>' && size > 1};
  unsupported_descr(descr, ctx);
}

// numpy's descr for what weft writes: little-endian, '|' where byte order does not apply.
const char* descr_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return "<f4";
    case DType::bf16: return "<f4";  // written as float32
    case DType::f64: return "<f8";
    case DType::f16: return "<f2";
    case DType::i8: return "|i1";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::u8: return "|u1";
    case DType::boolean: return "|b1";
  }
  throw InvalidArgument("save_npy: unknown dtype tag " + std::to_string(static_cast<int>(dtype)));
}

// ---- the header dict -----------------------------------------------------------------------------------

struct Header {
  DType dtype = DType::f32;
  bool swap = false;
  bool fortran = false;
  Shape shape;
};

class DictParser {
 public:
  DictParser(std::string_view text, const Context& ctx) : s_(text), ctx_(ctx) {}

  Header parse() {
    Header h;
    bool have_descr = false, have_order = false, have_shape = false;
    skip_space();
    expect('{', "at the start of the header dict");
    for (;;) {
      skip_space();
      if (eat('}')) break;
      const std::size_t key_at = i_;
      const std::string key = parse_string("a key");
      skip_space();
      expect(':', "after the key '" + printable(key) + "'");
      skip_space();
      auto once = [&](bool& seen) {
        if (seen) fail_at(key_at, "the key '" + key + "' appears twice");
        seen = true;
      };
      if (key == "descr") {
        once(have_descr);
        if (peek() == '[') fail("structured dtypes (a list descr) are not supported");
        const Descr d = parse_descr(parse_string("the descr value"), ctx_);
        h.dtype = d.dtype;
        h.swap = d.swap;
      } else if (key == "fortran_order") {
        once(have_order);
        h.fortran = parse_bool();
      } else if (key == "shape") {
        once(have_shape);
        h.shape = parse_shape();
      } else {
        fail_at(key_at, "unexpected key '" + printable(key) + "' (a .npy header has exactly descr, fortran_order and shape)");
      }
      skip_space();
      if (eat(',')) continue;
      expect('}', "after the value of '" + key + "'");
      break;
    }
    skip_space();
    if (i_ != s_.size()) fail("unexpected text after the header dict: '" + printable(s_.substr(i_)) + "'");
    if (!have_descr) fail("the header has no 'descr'");
    if (!have_order) fail("the header has no 'fortran_order'");
    if (!have_shape) fail("the header has no 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { ctx_.fail("bad header: " + what); }
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    ctx_.fail("bad header at byte " + std::to_string(at) + " of the dict: " + what);
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c, const std::string& where) {
    if (eat(c)) return;
    fail_at(i_, std::string("expected '") + c + "' " + where + ", found " + found());
  }
  std::string found() const {
    if (i_ >= s_.size()) return "the end of the header";
    std::string out(1, '\'');  // built by appending: "'" + std::string trips a false g++ 12 -Wrestrict
    out += printable(s_.substr(i_, 1));
    out += '\'';
    return out;
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r' ||
                              s_[i_] == '\f' || s_[i_] == '\v'))
      ++i_;
  }
  std::string parse_string(const char* what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail_at(i_, std::string("expected a quoted string for ") + what + ", found " + found());
    const std::size_t start = ++i_;
    while (i_ < s_.size() && s_[i_] != quote) {
      if (s_[i_] == '\\') fail_at(i_, "escape sequences in strings are not supported");
      if (s_[i_] == '\n') fail_at(i_, "unterminated string");
      ++i_;
    }
    if (i_ >= s_.size()) fail_at(start - 1, "unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool parse_bool() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    fail_at(i_, "fortran_order must be True or False, found " + found());
  }
  std::int64_t parse_int() {
    const std::size_t start = i_;
    if (peek() == '-') fail_at(i_, "negative dimension in the shape");
    if (peek() < '0' || peek() > '9') fail_at(i_, "expected a dimension (a non-negative integer) in the shape, found " + found());
    std::int64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      const int digit = s_[i_++] - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
        std::size_t end = i_;
        while (end < s_.size() && s_[end] >= '0' && s_[end] <= '9') ++end;
        fail_at(start, "dimension " + printable(s_.substr(start, end - start)) + " does not fit in 64 bits");
      }
      value = value * 10 + digit;
    }
    if (peek() == 'L' || peek() == 'l') ++i_;  // Python 2's long literals, as old numpy wrote them
    return value;
  }
  Shape parse_shape() {
    const std::size_t start = i_;
    if (peek() == '[') fail_at(i_, "the shape must be a tuple, found a list");
    expect('(', "to open the shape tuple");
    Shape shape;
    bool trailing_comma = false;
    for (;;) {
      skip_space();
      if (eat(')')) break;
      shape.push_back(parse_int());
      skip_space();
      trailing_comma = eat(',');
      if (!trailing_comma) {
        skip_space();
        expect(')', "after a dimension in the shape");
        break;
      }
    }
    // "(3)" is the integer 3 in Python, not a tuple: numpy refuses it too.
    if (shape.size() == 1 && !trailing_comma) fail_at(start, "the shape (n) is not a tuple; a 1-d shape is written (n,)");
    return shape;
  }

  std::string_view s_;
  const Context& ctx_;
  std::size_t i_ = 0;
};

// Where the dict starts and how long it is, from the first (up to) 12 bytes of the file.
struct Preamble {
  int major = 1;
  std::size_t dict_offset = 0;
  std::uint64_t dict_bytes = 0;
};

Preamble parse_preamble(std::string_view first, std::uint64_t total, const Context& ctx) {
  if (total < kMagic.size() + 2 && first.substr(0, std::min(first.size(), kMagic.size())) == kMagic.substr(0, first.size()))
    ctx.fail("truncated: " + std::to_string(total) + " bytes is too short for the magic string and version");
  if (first.substr(0, kMagic.size()) != kMagic)
    ctx.fail("not a .npy file: it does not start with the magic string \\x93NUMPY (found '" +
             printable(first.substr(0, kMagic.size())) + "')");
  Preamble p;
  const auto major = static_cast<unsigned char>(first[6]), minor = static_cast<unsigned char>(first[7]);
  if (major < 1 || major > 3 || minor != 0)
    ctx.fail("unsupported format version " + std::to_string(major) + "." + std::to_string(minor) +
             " (weft reads 1.0, 2.0 and 3.0)");
  p.major = major;
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  p.dict_offset = kMagic.size() + 2 + length_bytes;
  if (total < p.dict_offset)
    ctx.fail("truncated: the header length field needs " + std::to_string(p.dict_offset) + " bytes, the file has " +
             std::to_string(total));
  for (std::size_t k = 0; k < length_bytes; ++k)
    p.dict_bytes |= static_cast<std::uint64_t>(static_cast<unsigned char>(first[8 + k])) << (8 * k);
  if (p.dict_bytes > total - p.dict_offset)
    ctx.fail("truncated header: it declares " + std::to_string(p.dict_bytes) + " bytes but the file has " +
             std::to_string(total - p.dict_offset) + " after the preamble");
  return p;
}

// Checks the element count against the bytes that follow the header; returns the data size in bytes.
std::size_t check_data_size(const Header& h, std::uint64_t available, const Context& ctx) {
  const std::size_t item = dtype_size(h.dtype);
  // Every partial product must fit, even past a zero dimension: weft multiplies shapes in order.
  std::uint64_t count = 1;
  bool empty = false;
  for (std::int64_t d : h.shape) {
    if (d == 0) {
      empty = true;
      continue;
    }
    if (count > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / static_cast<std::uint64_t>(d))
      ctx.fail("shape " + shape_str(h.shape) + " has more elements than fit in 64 bits");
    count *= static_cast<std::uint64_t>(d);
  }
  if (empty) count = 0;
  const std::string type = std::string(dtype_name(h.dtype)) + " " + shape_str(h.shape);
  if (count > available / item) {
    const std::string needs = count > std::numeric_limits<std::uint64_t>::max() / item
                                  ? std::to_string(count) + " x " + std::to_string(item)
                                  : std::to_string(count * item);
    ctx.fail("data is truncated: " + type + " needs " + needs + " bytes but the file has " + std::to_string(available) +
             " after the header");
  }
  if (count * item != available)
    ctx.fail("the file has " + std::to_string(available - count * item) + " bytes after the data of " + type + " (" +
             std::to_string(count * item) + " bytes)");
  return static_cast<std::size_t>(count * item);
}

template <class U>
void byteswap_all(std::byte* data, std::size_t count) {
  U* p = reinterpret_cast<U*>(data);
  for (std::size_t i = 0; i < count; ++i) {
    U v;
    std::memcpy(&v, p + i, sizeof(U));
    v = static_cast<U>(__builtin_bswap64(static_cast<std::uint64_t>(v)) >> (64 - 8 * sizeof(U)));
    std::memcpy(p + i, &v, sizeof(U));
  }
}

// Fortran-ordered data (column-major over `shape`) into row-major order.
template <class U>
void fortran_to_c(const std::byte* src_bytes, std::byte* dst_bytes, const Shape& shape) {
  const int n = static_cast<int>(shape.size());
  std::vector<std::int64_t> stride(n), index(n, 0);
  std::int64_t s = 1;
  for (int a = 0; a < n; ++a) {
    stride[a] = s;
    s *= shape[a];
  }
  const U* src = reinterpret_cast<const U*>(src_bytes);
  U* dst = reinterpret_cast<U*>(dst_bytes);
  const std::int64_t inner = shape[n - 1], inner_stride = stride[n - 1];
  const std::int64_t rows = num_elements(shape) / inner;
  std::int64_t offset = 0;  // source offset of (index[0..n-2], 0)
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t k = 0; k < inner; ++k) *dst++ = src[offset + k * inner_stride];
    for (int a = n - 2; a >= 0; --a) {  // odometer over the outer axes, last fastest
      offset += stride[a];
      if (++index[a] < shape[a]) break;
      offset -= stride[a] * shape[a];
      index[a] = 0;
    }
  }
}

// `raw` holds the file's data bytes as read: fixes byte order, bool values and element order.
Array finish(const Header& h, Array raw) {
  const std::size_t item = dtype_size(h.dtype);
  const auto count = static_cast<std::size_t>(raw.size());
  if (count == 0) return h.fortran ? raw.reshape(h.shape) : raw;
  std::byte* data = raw.mutable_bytes();
  if (h.swap) {
    if (item == 2) byteswap_all<std::uint16_t>(data, count);
    if (item == 4) byteswap_all<std::uint32_t>(data, count);
    if (item == 8) byteswap_all<std::uint64_t>(data, count);
  }
  if (h.dtype == DType::boolean)
    for (std::size_t i = 0; i < count; ++i) data[i] = data[i] != std::byte{0} ? std::byte{1} : std::byte{0};
  if (!h.fortran || h.shape.size() < 2) return raw;
  Array out = Array::empty(h.shape, h.dtype);
  std::byte* dst = out.mutable_bytes();
  switch (item) {
    case 1: fortran_to_c<std::uint8_t>(data, dst, h.shape); break;
    case 2: fortran_to_c<std::uint16_t>(data, dst, h.shape); break;
    case 4: fortran_to_c<std::uint32_t>(data, dst, h.shape); break;
    default: fortran_to_c<std::uint64_t>(data, dst, h.shape); break;
  }
  return out;
}

// Parses everything before the data. `head` holds the first bytes of the file: at least the preamble and
// the dict when the file has them (the caller reads min(file size, what the preamble declares)).
template <class ReadHead>
std::pair<Header, std::size_t> parse_head(std::uint64_t total, const ReadHead& read_head, const Context& ctx) {
  const std::string first = read_head(0, static_cast<std::size_t>(std::min<std::uint64_t>(total, 12)));
  const Preamble p = parse_preamble(first, total, ctx);
  const std::string dict = read_head(p.dict_offset, static_cast<std::size_t>(p.dict_bytes));
  const Header h = DictParser(dict, ctx).parse();
  const std::size_t data_offset = p.dict_offset + static_cast<std::size_t>(p.dict_bytes);
  return {h, data_offset};
}

Shape storage_shape(const Header& h) {
  if (!h.fortran) return h.shape;
  return Shape(h.shape.rbegin(), h.shape.rend());
}

// The preamble and the dict numpy would write for `array` (shape_str is Python's tuple repr).
std::string serialize_npy_header(const Array& array) {
  const std::string dict = std::string("{'descr': '") + descr_of(array.dtype()) +
                           "', 'fortran_order': False, 'shape': " + shape_str(array.shape()) + ", }";
  // The dict is padded with spaces and ends in a newline so that the data starts 64-byte aligned.
  for (int major : {1, 2}) {
    const std::size_t preamble = kMagic.size() + 2 + (major == 1 ? 2 : 4);
    const std::size_t unpadded = preamble + dict.size() + 1;
    const std::size_t padded = (unpadded + kAlign - 1) / kAlign * kAlign;
    const std::uint64_t dict_bytes = padded - preamble;
    if (major == 1 && dict_bytes > 0xffff) continue;  // the 2-byte length of version 1.0 cannot hold it
    if (dict_bytes > 0xffffffffull) throw InvalidArgument("save_npy: shape " + shape_str(array.shape()) + " is too long for a .npy header");
    std::string out(kMagic);
    out += static_cast<char>(major);
    out += '\0';
    for (std::size_t k = 0; k < (major == 1 ? 2u : 4u); ++k) out += static_cast<char>((dict_bytes >> (8 * k)) & 0xff);
    out += dict;
    out.append(padded - unpadded, ' ');
    out += '\n';
    return out;
  }
  throw InvalidArgument("save_npy: shape " + shape_str(array.shape()) + " is too long for a .npy header");
}

}  // namespace

std::string serialize_npy(const Array& array) {
  const Array data = array.dtype() == DType::bf16 ? array.astype(DType::f32) : array;
  std::string out = serialize_npy_header(array);
  out.append(reinterpret_cast<const char*>(data.bytes()), data.nbytes());
  return out;
}

void save_npy(const std::string& path, const Array& array) {
  const Array data = array.dtype() == DType::bf16 ? array.astype(DType::f32) : array;
  io::AtomicFile file(path, "save_npy");
  file.write(serialize_npy_header(array));
  file.write(data.bytes(), data.nbytes());
  file.commit();
}

Array parse_npy(const std::string& bytes, const std::string& name) {
  const Context ctx{"parse_npy", name};
  auto read_head = [&](std::size_t offset, std::size_t n) { return bytes.substr(offset, n); };
  const auto [header, data_offset] = parse_head(bytes.size(), read_head, ctx);
  const std::size_t n = check_data_size(header, bytes.size() - data_offset, ctx);
  Array raw = Array::empty(storage_shape(header), header.dtype);
  if (n > 0) std::memcpy(raw.mutable_bytes(), bytes.data() + data_offset, n);
  return finish(header, std::move(raw));
}

Array load_npy(const std::string& path) {
  const Context ctx{"load_npy", path};
  const io::InputFile file(path, "load_npy");
  auto read_head = [&](std::size_t offset, std::size_t n) {
    std::string out(n, '\0');
    file.read(offset, out.data(), n, "the header");
    return out;
  };
  const auto [header, data_offset] = parse_head(file.size(), read_head, ctx);
  const std::size_t n = check_data_size(header, file.size() - data_offset, ctx);
  Array raw = Array::empty(storage_shape(header), header.dtype);
  if (n > 0) file.read(data_offset, raw.mutable_bytes(), n, "the data");
  return finish(header, std::move(raw));
}

}  // namespace weft
