// numpy-compatible printing (numpy 1.24 arrayprint.py with the default options: precision 8, floatmode
// 'maxprec', suppress False, sign '-', linewidth 75, threshold 1000, edgeitems 3).
//
// Float digits follow numpy's Dragon4: the shortest digits that round-trip in the element's own type, cut to
// `precision` digits (exact rounding of the binary value) or extended to `min_digits` digits (exact digits
// of the binary value) where the format asks for it.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "weft/array.hpp"
#include "weft/error.hpp"

namespace weft {
namespace {

constexpr int kPrecision = 8;
constexpr int kLineWidth = 75;
constexpr std::int64_t kThreshold = 1000;
constexpr std::int64_t kEdgeItems = 3;

// ---- element access ---------------------------------------------------------------------------------

double float_at(const Array& a, std::int64_t i) { return a.value_at(i); }  // exact for every float dtype

std::int64_t int_at(const Array& a, std::int64_t i) {
  const std::byte* p = a.bytes();
  switch (a.dtype()) {
    case DType::i8: return reinterpret_cast<const std::int8_t*>(p)[i];
    case DType::i32: return reinterpret_cast<const std::int32_t*>(p)[i];
    case DType::i64: return reinterpret_cast<const std::int64_t*>(p)[i];
    case DType::u8: return reinterpret_cast<const std::uint8_t*>(p)[i];
    case DType::boolean: return reinterpret_cast<const std::uint8_t*>(p)[i] != 0 ? 1 : 0;
    default: return static_cast<std::int64_t>(a.value_at(i));
  }
}

// ---- Dragon4-style digit generation -----------------------------------------------------------------

// A non-negative decimal d[0].d[1]d[2]... x 10^exponent; zero is {"0", 0}.
struct Digits {
  std::string digits;
  int exponent = 0;
};

Digits parse_scientific(const char* text) {
  Digits out;
  const char* p = text;
  if (*p == '-' || *p == '+') ++p;
  for (; *p != '\0' && *p != 'e' && *p != 'E'; ++p) {
    if (*p >= '0' && *p <= '9') out.digits += *p;
  }
  if (*p == 'e' || *p == 'E') out.exponent = std::atoi(p + 1);
  if (out.digits.empty()) out.digits.assign(1, '0');
  return out;
}

void strip_trailing_zeros(Digits& d) {
  while (d.digits.size() > 1 && d.digits.back() == '0') d.digits.pop_back();
  if (d.digits == "0") d.exponent = 0;
}

// The value as the dtype would store it (for round-trip checks of 16-bit floats).
double round_to_type(double v, DType t) {
  switch (t) {
    case DType::f16: return half_to_float(double_to_half(v));
    case DType::bf16: return bf16_to_float(double_to_bf16(v));
    case DType::f32: return static_cast<float>(v);
    default: return v;
  }
}

// Shortest digits that read back to `v` (finite, >= 0) in dtype `t`.
Digits shortest(double v, DType t) {
  if (v == 0) return {"0", 0};
  char buf[64];
  if (t == DType::f32 || t == DType::f64) {
    std::to_chars_result r = t == DType::f32
                                 ? std::to_chars(buf, buf + sizeof(buf) - 1, static_cast<float>(v),
                                                 std::chars_format::scientific)
                                 : std::to_chars(buf, buf + sizeof(buf) - 1, v, std::chars_format::scientific);
    *r.ptr = '\0';
    Digits d = parse_scientific(buf);
    strip_trailing_zeros(d);
    return d;
  }
  // 16-bit floats: the shortest p for which a p-digit decimal reads back; among the candidates around the
  // correctly rounded one pick the closest that round-trips.
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
    const Digits nearest = parse_scientific(buf);
    const long long mantissa = std::atoll(nearest.digits.c_str());
    bool found = false;
    double best_error = 0;
    Digits best;
    for (long long m : {mantissa, mantissa - 1, mantissa + 1}) {
      if (m <= 0) continue;
      const std::string candidate = std::to_string(m) + "e" + std::to_string(nearest.exponent - (p - 1));
      const double value = std::strtod(candidate.c_str(), nullptr);
      if (round_to_type(value, t) != v) continue;
      const double error = std::fabs(value - v);
      if (!found || error < best_error) {
        found = true;
        best_error = error;
        std::snprintf(buf, sizeof(buf), "%.*e", p - 1, value);
        best = parse_scientific(buf);
      }
    }
    if (found) {
      strip_trailing_zeros(best);
      return best;
    }
  }
  std::snprintf(buf, sizeof(buf), "%.17e", v);
  Digits d = parse_scientific(buf);
  strip_trailing_zeros(d);
  return d;
}

// Exact binary value rounded (half to even) to `frac` digits after the point, scientific / positional.
Digits rounded_scientific(double v, int frac) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*e", frac, v);
  return parse_scientific(buf);
}

Digits rounded_positional(double v, int frac) {
  std::vector<char> buf(static_cast<std::size_t>(frac) + 400);
  std::snprintf(buf.data(), buf.size(), "%.*f", frac, v);
  std::string all;
  int whole = 0;
  bool seen_point = false;
  for (const char* p = buf.data(); *p != '\0'; ++p) {
    if (*p == '.') {
      seen_point = true;
    } else if (*p >= '0' && *p <= '9') {
      all += *p;
      if (!seen_point) ++whole;
    }
  }
  Digits d;
  d.exponent = whole - 1;
  std::size_t first = all.find_first_not_of('0');
  if (first == std::string::npos) return {"0", 0};
  d.digits = all.substr(first);
  d.exponent -= static_cast<int>(first);
  return d;
}

enum class Trim { keep, zeros, leave_one_zero, dpt_zeros };  // numpy's 'k', '.', '0', '-'

// dragon4_positional(x, precision, unique=True, fractional=True, trim, pad_left, pad_right), min_digits unset.
std::string format_positional(double x, DType t, int precision, Trim trim, int pad_left, int pad_right) {
  const bool negative = std::signbit(x);
  const double v = std::fabs(x);
  Digits d = shortest(v, t);
  const int frac_digits = std::max(0, static_cast<int>(d.digits.size()) - 1 - d.exponent);
  if (precision >= 0 && frac_digits > precision) d = rounded_positional(v, precision);
  std::string whole, frac;
  if (d.exponent >= 0) {
    const auto n_whole = static_cast<std::size_t>(d.exponent) + 1;
    if (d.digits.size() <= n_whole) {
      whole = d.digits + std::string(n_whole - d.digits.size(), '0');
    } else {
      whole = d.digits.substr(0, n_whole);
      frac = d.digits.substr(n_whole);
    }
  } else {
    whole = "0";
    frac = std::string(static_cast<std::size_t>(-d.exponent - 1), '0') + d.digits;
  }
  if (trim != Trim::keep) {
    while (!frac.empty() && frac.back() == '0') frac.pop_back();
  }
  if (trim == Trim::leave_one_zero && frac.empty()) frac = "0";
  std::string out = (negative ? "-" : "") + whole;
  if (!(trim == Trim::dpt_zeros && frac.empty())) out += "." + frac;
  if (pad_right >= static_cast<int>(frac.size())) {
    if (trim == Trim::dpt_zeros && frac.empty()) out += ' ';
    out += std::string(static_cast<std::size_t>(pad_right) - frac.size(), ' ');
  }
  const int left = static_cast<int>(whole.size()) + (negative ? 1 : 0);
  if (pad_left > left) out.insert(0, std::string(static_cast<std::size_t>(pad_left - left), ' '));
  return out;
}

// dragon4_scientific(x, precision, min_digits, unique=True, trim, pad_left, exp_digits).
std::string format_scientific(double x, DType t, int precision, int min_digits, Trim trim, int pad_left,
                              int exp_digits) {
  const bool negative = std::signbit(x);
  const double v = std::fabs(x);
  Digits d = shortest(v, t);
  const int frac_digits = static_cast<int>(d.digits.size()) - 1;
  if (precision >= 0 && frac_digits > precision) {
    d = rounded_scientific(v, precision);
  } else if (min_digits >= 0 && frac_digits < min_digits && v != 0) {
    d = rounded_scientific(v, min_digits);  // more digits of the exact value
  }
  std::string frac = d.digits.substr(1);
  if (trim == Trim::keep) {
    if (min_digits > static_cast<int>(frac.size())) frac += std::string(min_digits - frac.size(), '0');
  } else {
    while (!frac.empty() && frac.back() == '0') frac.pop_back();
    if (trim == Trim::leave_one_zero && frac.empty()) frac = "0";
  }
  std::string out;
  const int leftchars = 1 + (negative ? 1 : 0);
  if (pad_left > leftchars) out.append(static_cast<std::size_t>(pad_left - leftchars), ' ');
  if (negative) out += '-';
  out += d.digits[0];
  if (!(trim == Trim::dpt_zeros && frac.empty())) out += "." + frac;
  int exponent = d.exponent;
  out += exponent < 0 ? "e-" : "e+";
  exponent = std::abs(exponent);
  std::string exp_text = std::to_string(exponent);
  const int want = exp_digits < 0 ? 2 : exp_digits;
  if (static_cast<int>(exp_text.size()) < want) exp_text.insert(0, std::string(want - exp_text.size(), '0'));
  return out + exp_text;
}

// ---- numpy's FloatingFormat ---------------------------------------------------------------------------

class FloatingFormat {
 public:
  FloatingFormat(const std::vector<double>& data, DType dtype) : dtype_(dtype) {
    std::vector<double> finite;
    for (double x : data) {
      if (std::isfinite(x)) finite.push_back(x);
    }
    double max_val = 0, min_val = 0;
    bool any_nonzero = false;
    for (double x : finite) {
      if (x == 0) continue;
      const double ax = std::fabs(x);
      if (!any_nonzero) {
        max_val = min_val = ax;
        any_nonzero = true;
      } else {
        max_val = std::max(max_val, ax);
        min_val = std::min(min_val, ax);
      }
    }
    if (any_nonzero) {
      if (max_val >= 1.e8 || min_val < 0.0001 || ratio(max_val, min_val) > 1000.) exp_format_ = true;
    }
    if (finite.empty()) {
      pad_left_ = 0;
      pad_right_ = 0;
      trim_ = Trim::zeros;
      exp_size_ = -1;
      min_digits_ = -1;
    } else if (exp_format_) {
      std::size_t max_int = 0, max_frac = 0, max_exp = 0;
      for (double x : finite) {
        const std::string s = format_scientific(x, dtype_, kPrecision, -1, Trim::zeros, -1, -1);
        const std::size_t e = s.find('e');
        const std::size_t dot = s.find('.');
        max_int = std::max(max_int, dot);
        max_frac = std::max(max_frac, e - dot - 1);
        max_exp = std::max(max_exp, s.size() - e - 1);
      }
      exp_size_ = static_cast<int>(max_exp) - 1;
      trim_ = Trim::keep;
      precision_ = static_cast<int>(max_frac);
      min_digits_ = precision_;
      pad_left_ = static_cast<int>(max_int);
      pad_right_ = exp_size_ + 2 + precision_;
    } else {
      std::size_t max_int = 0, max_frac = 0;
      for (double x : finite) {
        const std::string s = format_positional(x, dtype_, kPrecision, Trim::zeros, -1, -1);
        const std::size_t dot = s.find('.');
        max_int = std::max(max_int, dot);
        max_frac = std::max(max_frac, s.size() - dot - 1);
      }
      pad_left_ = static_cast<int>(max_int);
      pad_right_ = static_cast<int>(max_frac);
      exp_size_ = -1;
      trim_ = Trim::zeros;
      min_digits_ = 0;
    }
    if (finite.size() != data.size()) {
      bool neginf = false;
      for (double x : data) neginf = neginf || (std::isinf(x) && x < 0);
      const int nanlen = 3;
      const int inflen = 3 + (neginf ? 1 : 0);
      const int offset = pad_right_ + 1;
      pad_left_ = std::max({pad_left_, nanlen - offset, inflen - offset});
    }
  }

  std::string operator()(double x) const {
    if (!std::isfinite(x)) {
      const std::string ret = std::isnan(x) ? "nan" : (x < 0 ? "-inf" : "inf");
      const int pad = pad_left_ + pad_right_ + 1 - static_cast<int>(ret.size());
      return std::string(static_cast<std::size_t>(std::max(pad, 0)), ' ') + ret;
    }
    if (exp_format_) return format_scientific(x, dtype_, precision_, min_digits_, trim_, pad_left_, exp_size_);
    return format_positional(x, dtype_, precision_, trim_, pad_left_, pad_right_);
  }

 private:
  // max/min computed in the array's own dtype, as numpy does.
  double ratio(double a, double b) const {
    switch (dtype_) {
      case DType::f64: return a / b;
      case DType::f32: return static_cast<float>(a) / static_cast<float>(b);
      default: return round_to_type(static_cast<double>(static_cast<float>(a) / static_cast<float>(b)), dtype_);
    }
  }

  DType dtype_;
  bool exp_format_ = false;
  int precision_ = kPrecision;
  int min_digits_ = -1;
  Trim trim_ = Trim::zeros;
  int pad_left_ = 0;
  int pad_right_ = 0;
  int exp_size_ = -1;
};

// ---- array2string ----------------------------------------------------------------------------------------

using ElementFormat = std::function<std::string(std::int64_t)>;

std::vector<std::int64_t> row_major_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

// Flat indices of the elements numpy shows (all, or the corners when summarising).
void shown_indices(const Shape& shape, const std::vector<std::int64_t>& strides, bool summarize, std::size_t axis,
                   std::int64_t base, std::vector<std::int64_t>& out) {
  if (axis == shape.size()) {
    out.push_back(base);
    return;
  }
  const std::int64_t n = shape[axis];
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    shown_indices(shape, strides, summarize, axis + 1, base + i * strides[axis], out);
  }
}

std::string rstrip(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

struct Printer {
  const Shape& shape;
  std::vector<std::int64_t> strides;
  ElementFormat format;
  std::string separator;
  bool summarize;

  void extend_line(std::string& s, std::string& line, const std::string& word, int line_width,
                   const std::string& next_line_prefix) const {
    bool needs_wrap = static_cast<int>(line.size() + word.size()) > line_width;
    if (line.size() <= next_line_prefix.size()) needs_wrap = false;
    if (needs_wrap) {
      s += rstrip(line) + "\n";
      line = next_line_prefix;
    }
    line += word;
  }

  std::string recurse(std::size_t axis, std::int64_t base, const std::string& hanging_indent, int curr_width) const {
    const std::size_t axes_left = shape.size() - axis;
    if (axes_left == 0) return format(base);
    const std::string next_hanging_indent = hanging_indent + " ";
    const int next_width = curr_width - 1;
    const std::int64_t a_len = shape[axis];
    const bool show_summary = summarize && 2 * kEdgeItems < a_len;
    const std::int64_t leading = show_summary ? kEdgeItems : 0;
    const std::int64_t trailing = show_summary ? kEdgeItems : a_len;
    const std::int64_t stride = strides[axis];
    auto child = [&](std::int64_t i) { return recurse(axis + 1, base + i * stride, next_hanging_indent, next_width); };
    std::string s;
    if (axes_left == 1) {
      const int sep_len = static_cast<int>(rstrip(separator).size());
      const int elem_width = curr_width - std::max(sep_len, 1);
      std::string line = hanging_indent;
      for (std::int64_t i = 0; i < leading; ++i) {
        extend_line(s, line, child(i), elem_width, hanging_indent);
        line += separator;
      }
      if (show_summary) {
        extend_line(s, line, "...", elem_width, hanging_indent);
        line += separator;
      }
      for (std::int64_t i = trailing; i > 1; --i) {
        extend_line(s, line, child(a_len - i), elem_width, hanging_indent);
        line += separator;
      }
      extend_line(s, line, child(a_len - 1), elem_width, hanging_indent);
      s += line;
    } else {
      const std::string line_sep = rstrip(separator) + std::string(axes_left - 1, '\n');
      for (std::int64_t i = 0; i < leading; ++i) s += hanging_indent + child(i) + line_sep;
      if (show_summary) s += hanging_indent + "..." + line_sep;
      for (std::int64_t i = trailing; i > 1; --i) s += hanging_indent + child(a_len - i) + line_sep;
      s += hanging_indent + child(a_len - 1);
    }
    // Remove the hanging indent and wrap in [].
    std::string out(1, '[');
    out.append(s, hanging_indent.size());
    out += ']';
    return out;
  }
};

ElementFormat make_format(const Array& a, const std::vector<std::int64_t>& shown) {
  const DType t = a.dtype();
  if (t == DType::boolean) {
    const std::string true_text = a.ndim() == 0 ? "True" : " True";
    return [&a, true_text](std::int64_t i) { return int_at(a, i) != 0 ? true_text : std::string("False"); };
  }
  if (is_integer(t)) {
    std::size_t width = 0;
    if (!shown.empty()) {
      std::int64_t lo = int_at(a, shown[0]), hi = lo;
      for (std::int64_t i : shown) {
        lo = std::min(lo, int_at(a, i));
        hi = std::max(hi, int_at(a, i));
      }
      width = std::max(std::to_string(lo).size(), std::to_string(hi).size());
    }
    return [&a, width](std::int64_t i) {
      std::string s = std::to_string(int_at(a, i));
      if (s.size() < width) s.insert(0, width - s.size(), ' ');
      return s;
    };
  }
  std::vector<double> data;
  data.reserve(shown.size());
  for (std::int64_t i : shown) data.push_back(float_at(a, i));
  FloatingFormat ff(data, t);
  return [&a, ff](std::int64_t i) { return ff(float_at(a, i)); };
}

std::string array2string(const Array& a, const std::string& separator, const std::string& prefix, int line_width) {
  if (a.size() == 0) return "[]";
  const Shape& shape = a.shape();
  const bool summarize = a.size() > kThreshold;
  const std::vector<std::int64_t> strides = row_major_strides(shape);
  std::vector<std::int64_t> shown;
  shown_indices(shape, strides, summarize, 0, 0, shown);
  Printer printer{shape, strides, make_format(a, shown), separator, summarize};
  const std::string next_line_prefix(prefix.size() + 1, ' ');  // skip over "[" and the prefix
  return printer.recurse(0, 0, next_line_prefix, line_width);
}

// str() of a numpy scalar (what str() of a 0-d array gives).
std::string scalar_str(const Array& a) {
  const DType t = a.dtype();
  if (t == DType::boolean) return int_at(a, 0) != 0 ? "True" : "False";
  if (is_integer(t)) return std::to_string(int_at(a, 0));
  const double v = float_at(a, 0);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  const double av = std::fabs(v);
  if (av == 0 || (av >= 1.e-4 && av < 1.e16)) return format_positional(v, t, -1, Trim::leave_one_zero, -1, -1);
  return format_scientific(v, t, -1, -1, Trim::dpt_zeros, -1, -1);
}

}  // namespace

namespace {
// A traced array prints as its type, as a weft.jit tracer does in Python: "Traced<float32[4,8]>".
std::string traced_str(const Array& array) {
  std::string dims;
  for (std::size_t i = 0; i < array.shape().size(); ++i) {
    if (i > 0) dims.push_back(',');
    dims.append(std::to_string(array.shape()[i]));
  }
  std::string text = "Traced<";
  text.append(dtype_name(array.dtype()));
  text.push_back('[');
  text.append(dims);
  text.append("]>");
  return text;
}
}  // namespace

std::string to_string(const Array& array) {
  if (array.traced()) return traced_str(array);
  if (array.ndim() == 0) return scalar_str(array);
  return array2string(array, " ", "", kLineWidth);
}

std::string repr(const Array& array, std::string_view prefix_name, bool always_dtype) {
  if (array.traced()) return traced_str(array);
  const DType t = array.dtype();
  const bool implied = t == DType::f64 || t == DType::i64 || t == DType::boolean;
  const bool skip_dtype = !always_dtype && implied && array.size() > 0;
  const std::string prefix = std::string(prefix_name) + "(";
  const std::string suffix = skip_dtype ? ")" : ",";
  std::string list;
  if (array.size() > 0 || array.shape() == Shape{0}) {
    list = array2string(array, ", ", prefix, kLineWidth - static_cast<int>(suffix.size()));
  } else {
    list = std::string("[], shape=").append(shape_str(array.shape()));
  }
  std::string text = prefix + list + suffix;
  if (skip_dtype) return text;
  std::string dtype_text = "dtype=";
  dtype_text.append(dtype_name(t)).append(")");
  const std::size_t newline = text.rfind('\n');
  const std::size_t last_line_len = newline == std::string::npos ? text.size() : text.size() - (newline + 1);
  if (static_cast<int>(last_line_len + dtype_text.size() + 1) > kLineWidth) {
    text += '\n';
    text.append(prefix.size(), ' ');
  } else {
    text += " ";
  }
  return text + dtype_text;
}

std::ostream& operator<<(std::ostream& os, const Array& array) { return os << to_string(array); }

}  // namespace weft
