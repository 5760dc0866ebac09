// Reads {"dtype", "shape", "data"} objects into weft arrays (json_array.hpp).
#include "json_array.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

namespace conformance {
namespace {

// One floating element. JSON has no NaN or infinity; accept the spellings other writers use.
double parse_float(const json& value, const std::string& what) {
  if (value.is_number()) return value.get<double>();
  if (value.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (value.is_string()) {
    std::string text = value.get<std::string>();
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (text == "inf" || text == "infinity" || text == "+inf") return std::numeric_limits<double>::infinity();
    if (text == "-inf" || text == "-infinity") return -std::numeric_limits<double>::infinity();
  }
  throw std::runtime_error(what + ": not a number: " + value.dump());
}

// One integer element of a dtype whose values lie in [lo, hi]; int64 is read as an integer because doubles
// round beyond 2^53.
std::int64_t parse_integer(const json& value, std::int64_t lo, std::int64_t hi, weft::DType dtype,
                           const std::string& what) {
  if (!value.is_number_integer()) throw std::runtime_error(what + ": not an integer: " + value.dump());
  const bool in_range = value.is_number_unsigned()
                            ? value.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)
                            : value.get<std::int64_t>() >= lo && value.get<std::int64_t>() <= hi;
  if (!in_range)
    throw std::runtime_error(what + ": " + value.dump() + " is out of range for " + std::string(weft::dtype_name(dtype)));
  return value.get<std::int64_t>();
}

bool parse_bool(const json& value, const std::string& what) {
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number_integer() && (value.get<std::int64_t>() == 0 || value.get<std::int64_t>() == 1))
    return value.get<std::int64_t>() == 1;
  throw std::runtime_error(what + ": not a bool value: " + value.dump());
}

void flatten(const json& data, std::vector<const json*>& out) {
  if (data.is_array()) {
    for (const json& item : data) flatten(item, out);
  } else {
    out.push_back(&data);
  }
}

template <class T>
std::pair<std::int64_t, std::int64_t> range_of() {
  return {std::numeric_limits<T>::min(), std::numeric_limits<T>::max()};
}

}  // namespace

int parse_int(const json& value, const std::string& what, int lo, int hi) {
  bool in_range = false;
  if (value.is_number_unsigned()) {
    const std::uint64_t v = value.get<std::uint64_t>();
    in_range = hi >= 0 && v <= static_cast<std::uint64_t>(hi) && static_cast<std::int64_t>(v) >= lo;
  } else if (value.is_number_integer()) {
    const std::int64_t v = value.get<std::int64_t>();
    in_range = v >= lo && v <= hi;
  }
  if (!in_range)
    throw std::runtime_error(what + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                             "], not " + value.dump());
  return static_cast<int>(value.get<std::int64_t>());
}

weft::Array parse_array(const json& spec, const std::string& what) {
  if (!spec.is_object()) throw std::runtime_error(what + " is not an object with dtype, shape and data");
  for (const char* key : {"dtype", "shape", "data"})
    if (!spec.contains(key)) throw std::runtime_error(what + " has no \"" + key + "\"");
  if (!spec.at("dtype").is_string()) throw std::runtime_error(what + ".dtype is not a string");
  const weft::DType dtype = weft::dtype_from_name(spec.at("dtype").get<std::string>());
  const json& dims = spec.at("shape");
  weft::Shape shape;
  if (!dims.is_array()) throw std::runtime_error(what + ".shape is not a list");
  for (const json& d : dims) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
      throw std::runtime_error(what + ".shape holds " + d.dump() + ", not a size");
    shape.push_back(d.get<std::int64_t>());
  }
  std::vector<const json*> elements;
  flatten(spec.at("data"), elements);
  if (static_cast<std::int64_t>(elements.size()) != weft::num_elements(shape))
    throw std::runtime_error(what + ": shape " + weft::shape_str(shape) + " needs " +
                             std::to_string(weft::num_elements(shape)) + " values, data has " +
                             std::to_string(elements.size()));

  if (dtype == weft::DType::i64) {
    std::vector<std::int64_t> values;
    const auto [lo, hi] = range_of<std::int64_t>();
    for (const json* e : elements) values.push_back(parse_integer(*e, lo, hi, dtype, what));
    return weft::Array::from_bytes(dtype, shape, values.data());  // not from_vector: it reads () as (n,)
  }
  std::vector<double> values;
  values.reserve(elements.size());
  for (const json* e : elements) {
    switch (dtype) {
      case weft::DType::boolean: values.push_back(parse_bool(*e, what) ? 1.0 : 0.0); break;
      case weft::DType::i8: {
        const auto [lo, hi] = range_of<std::int8_t>();
        values.push_back(static_cast<double>(parse_integer(*e, lo, hi, dtype, what)));
        break;
      }
      case weft::DType::u8: {
        const auto [lo, hi] = range_of<std::uint8_t>();
        values.push_back(static_cast<double>(parse_integer(*e, lo, hi, dtype, what)));
        break;
      }
      case weft::DType::i32: {
        const auto [lo, hi] = range_of<std::int32_t>();
        values.push_back(static_cast<double>(parse_integer(*e, lo, hi, dtype, what)));
        break;
      }
      default: values.push_back(parse_float(*e, what)); break;
    }
  }
  return weft::Array::from_doubles(values, shape, dtype);
}

}  // namespace conformance
