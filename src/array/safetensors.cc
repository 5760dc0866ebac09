// The .safetensors format (safetensors.hpp): the writer, and the reader that treats the file as untrusted input.
#include "array/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <span>
#include <tuple>

#include "array/bounded_json.hpp"
#include "weft/error.hpp"

namespace weft::safetensors {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr std::uint64_t kMaxHeaderBytes = io::JsonBounds{}.max_bytes;  // 100 MiB: the safetensors library's own limit

const char* dtype_code(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i8: return "I8";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

std::optional<DType> dtype_from_code(const std::string& name) {
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::i32, DType::i64, DType::u8, DType::boolean})
    if (name == dtype_code(d)) return d;
  return std::nullopt;
}

}  // namespace

std::optional<std::int64_t> json_int(const json& j) {
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(v);
  }
  if (j.is_number_integer()) return j.get<std::int64_t>();
  return std::nullopt;
}

std::optional<std::uint64_t> checked_count(const Shape& shape) {
  std::uint64_t n = 1;
  bool empty = false;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / static_cast<std::uint64_t>(d))
      return std::nullopt;
    n *= static_cast<std::uint64_t>(d);
  }
  return empty ? 0 : n;
}

std::string type_str(DType dtype, const Shape& shape) { return std::string(dtype_name(dtype)) + " " + shape_str(shape); }

// ---- writing ---------------------------------------------------------------------------------------------------

void write(const std::string& path, const std::vector<std::pair<std::string, std::string>>& metadata,
           const std::vector<NamedTensor>& tensors, const std::string& op) {
  ordered_json header;
  ordered_json meta;
  for (const auto& [key, value] : metadata) meta[key] = value;
  header["__metadata__"] = std::move(meta);
  std::uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    const std::uint64_t bytes = t.data.nbytes();
    header[t.name] = {{"dtype", dtype_code(t.data.dtype())}, {"shape", t.data.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the safetensors library writes
  char length[8];
  for (int k = 0; k < 8; ++k) length[k] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * k)) & 0xff);
  io::AtomicFile file(path, op);
  file.write(length, 8);
  file.write(text);
  for (const NamedTensor& t : tensors) file.write(t.data.bytes(), t.data.nbytes());
  file.commit();
}

// ---- reading ---------------------------------------------------------------------------------------------------

namespace {

TensorInfo tensor_info(const std::string& name, const json& j, std::uint64_t data_bytes, const Reader& file) {
  const std::string who = "tensor '" + io::printable(name, 200) + "'";
  if (!j.is_object()) file.fail(who + " is not a JSON object");
  const auto dtype_it = j.find("dtype");
  if (dtype_it == j.end() || !dtype_it->is_string()) file.fail(who + " has no dtype string");
  const auto dtype = dtype_from_code(dtype_it->get<std::string>());
  if (!dtype) file.fail(who + " has dtype \"" + io::printable(dtype_it->get<std::string>()) + "\", which weft does not read");
  TensorInfo t{*dtype, {}, 0, 0};
  const auto shape_it = j.find("shape");
  if (shape_it == j.end() || !shape_it->is_array()) file.fail(who + " has no shape list");
  for (const json& d : *shape_it) {
    const auto v = json_int(d);
    if (!v || *v < 0) file.fail(who + ": the shape is not a list of non-negative integers");
    t.shape.push_back(*v);
  }
  const auto count = checked_count(t.shape);
  if (!count) file.fail(who + ": shape " + shape_str(t.shape) + " has more elements than fit in 64 bits");
  const auto offsets = j.find("data_offsets");
  if (offsets == j.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    file.fail(who + " has no data_offsets [begin, end]");
  t.begin = (*offsets)[0].get<std::uint64_t>();
  t.end = (*offsets)[1].get<std::uint64_t>();
  if (t.begin > t.end) file.fail(who + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] are reversed");
  if (t.end > data_bytes)
    file.fail(who + " needs bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ") of the data, which holds only " +
              std::to_string(data_bytes) + ": the file is truncated");
  const std::uint64_t item = dtype_size(t.dtype);
  if (*count > (t.end - t.begin) / item || *count * item != t.end - t.begin)
    file.fail(who + " is " + type_str(t.dtype, t.shape) + " but its data_offsets span " + std::to_string(t.end - t.begin) + " bytes");
  return t;
}

// The format's rule for the data section (safetensors' own validation): the tensors' data_offsets, in order,
// are contiguous and non-overlapping and cover the data exactly, so no byte belongs to two tensors (two
// variables trained from the same bytes) or to none (trailing bytes, a gap).
void check_coverage(const std::map<std::string, TensorInfo>& tensors, std::uint64_t data_bytes, const Reader& file) {
  std::vector<std::pair<const std::string*, const TensorInfo*>> order;
  for (const auto& [name, t] : tensors) order.emplace_back(&name, &t);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end, *a.first) < std::tie(b.second->begin, b.second->end, *b.first);
  });
  auto range = [](const TensorInfo& t) { return std::to_string(t.begin) + ", " + std::to_string(t.end); };
  std::uint64_t covered = 0;
  const std::pair<const std::string*, const TensorInfo*>* previous = nullptr;
  for (const auto& entry : order) {
    const auto& [name, t] = entry;
    if (t->begin < covered)
      file.fail("tensor '" + io::printable(*name, 200) + "': data_offsets [" + range(*t) + "] overlap tensor '" +
                io::printable(*previous->first, 200) + "' [" + range(*previous->second) + "]");
    if (t->begin > covered)
      file.fail("bytes [" + std::to_string(covered) + ", " + std::to_string(t->begin) +
                ") of the data belong to no tensor (data_offsets must cover the data without gaps)");
    covered = t->end;
    previous = &entry;
  }
  if (covered < data_bytes)
    file.fail(std::to_string(data_bytes - covered) +
              " bytes after the last tensor's data (the data section must end where the tensors do)");
}

}  // namespace

void Reader::fail(const std::string& what) const { throw InvalidArgument(op_ + ": '" + path_ + "': " + what); }

Reader::Reader(const std::string& path, const std::string& op) : path_(path), op_(op), file_(path, op) {
  if (file_.size() < 8)
    fail("truncated: " + std::to_string(file_.size()) + " bytes is too short for the 8-byte header length");
  unsigned char length_bytes[8];
  file_.read(0, length_bytes, 8, "the header length");
  std::uint64_t header_bytes = 0;
  for (int k = 0; k < 8; ++k) header_bytes |= static_cast<std::uint64_t>(length_bytes[k]) << (8 * k);
  if (header_bytes > kMaxHeaderBytes)
    fail("the header length " + std::to_string(header_bytes) + " is over 100 MiB: not a safetensors file, or a corrupt one");
  if (header_bytes > file_.size() - 8)
    fail("truncated: the header declares " + std::to_string(header_bytes) + " bytes but the file has " +
         std::to_string(file_.size() - 8) + " after the length");
  std::string text(static_cast<std::size_t>(header_bytes), '\0');
  file_.read(8, text.data(), text.size(), "the header");
  // Bounded (depth, values, bytes) and refusing duplicate keys: a small file must not take gigabytes, and a
  // key given twice must not silently mean its last value.
  const json header = io::parse_bounded_json(text, "the header", [this](const std::string& what) { fail(what); });
  if (!header.is_object()) fail("the header is not a JSON object");
  data_start_ = 8 + header_bytes;
  const std::uint64_t data_bytes = file_.size() - data_start_;
  for (const auto& [name, value] : header.items()) {
    if (name != "__metadata__") {
      tensors_.emplace(name, tensor_info(name, value, data_bytes, *this));
      continue;
    }
    if (!value.is_object()) fail("__metadata__ is not a JSON object");
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string()) fail("metadata \"" + io::printable(key, 200) + "\" is not a string");
      metadata_[key] = v.get<std::string>();
    }
  }
  check_coverage(tensors_, data_bytes, *this);
}

void Reader::read(const std::string& name, const TensorInfo& t, Array& out) const {
  if (out.nbytes() > 0) file_.read(data_start_ + t.begin, out.mutable_bytes(), out.nbytes(), "the data of tensor '" + name + "'");
  if (t.dtype == DType::boolean)  // weft's bools are 0 or 1; another writer's may be any non-zero byte
    for (std::byte& b : std::span<std::byte>(out.mutable_bytes(), out.nbytes())) b = b != std::byte{0} ? std::byte{1} : std::byte{0};
}

}  // namespace weft::safetensors
