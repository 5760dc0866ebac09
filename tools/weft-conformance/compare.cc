// Comparison of computed and expected arrays (compare.hpp).
#include "compare.hpp"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

namespace conformance {
namespace {

constexpr int kListed = 3;  // differing elements named in a report; the count covers the rest

// Shortest text that reads back as the value in its own precision.
std::string format_double(double value, weft::DType dtype) {
  if (std::isnan(value)) return "nan";
  char buffer[64];
  std::to_chars_result result;
  if (dtype == weft::DType::f32 || dtype == weft::DType::f16 || dtype == weft::DType::bf16)
    result = std::to_chars(buffer, buffer + sizeof buffer, static_cast<float>(value));
  else
    result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

std::string format_element(const weft::Array& a, std::int64_t i) {
  if (a.dtype() == weft::DType::i64) return std::to_string(a.data<std::int64_t>()[static_cast<std::size_t>(i)]);
  return format_double(a.value_at(i), a.dtype());
}

// Row-major flat index -> "[i, j, k]".
std::string index_str(std::int64_t flat, const weft::Shape& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string text = "[";
  for (std::size_t d = 0; d < index.size(); ++d) text += (d ? ", " : "") + std::to_string(index[d]);
  return text + "]";
}

// Bitwise on doubles: every dtype but int64 converts to double exactly and injectively, so this is bitwise
// equality in the array's own dtype.
bool same_bits(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

bool close_enough(double got, double want, const Tolerance& t) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::isinf(got) || std::isinf(want)) return got == want;
  return std::abs(got - want) <= t.atol + t.rtol * std::abs(want);
}

bool element_matches(const weft::Array& got, const weft::Array& want, std::int64_t i, const Tolerance& t) {
  if (want.dtype() == weft::DType::i64) {
    const auto g = got.data<std::int64_t>()[static_cast<std::size_t>(i)];
    const auto w = want.data<std::int64_t>()[static_cast<std::size_t>(i)];
    if (t.exact) return g == w;
    return close_enough(static_cast<double>(g), static_cast<double>(w), t);
  }
  const double g = got.value_at(i);
  const double w = want.value_at(i);
  return t.exact ? same_bits(g, w) : close_enough(g, w, t);
}

}  // namespace

std::string tolerance_str(const Tolerance& tolerance) {
  if (tolerance.exact) return "exact";
  return "rtol " + format_double(tolerance.rtol, weft::DType::f64) + ", atol " +
         format_double(tolerance.atol, weft::DType::f64);
}

std::optional<std::string> compare_arrays(const weft::Array& got, const weft::Array& want, const Tolerance& tolerance) {
  if (got.dtype() != want.dtype())
    return "dtype: got " + std::string(weft::dtype_name(got.dtype())) + ", expected " +
           std::string(weft::dtype_name(want.dtype()));
  if (got.shape() != want.shape())
    return "shape: got " + weft::shape_str(got.shape()) + ", expected " + weft::shape_str(want.shape());

  std::vector<std::int64_t> listed;
  std::int64_t differing = 0;
  for (std::int64_t i = 0; i < want.size(); ++i) {
    if (element_matches(got, want, i, tolerance)) continue;
    if (static_cast<int>(listed.size()) < kListed) listed.push_back(i);
    ++differing;
  }
  if (differing == 0) return std::nullopt;

  std::ostringstream reason;
  reason << differing << " of " << want.size() << " elements differ (" << tolerance_str(tolerance) << "): ";
  for (std::size_t k = 0; k < listed.size(); ++k) {
    reason << (k ? "; " : "") << index_str(listed[k], want.shape()) << " got " << format_element(got, listed[k])
           << ", expected " << format_element(want, listed[k]);
  }
  if (differing > static_cast<std::int64_t>(listed.size())) reason << "; ...";
  return reason.str();
}

}  // namespace conformance
