// Comparison of a computed array with an expected one, shared by both case kinds: dtype, shape, then every
// value under the case's tolerance. The failure text names the first differing elements so a report line
// says what went wrong without rerunning.
#pragma once
#include <optional>
#include <string>

#include <weft/array.hpp>

namespace conformance {

// `exact`: bitwise equal (NaN equals NaN, -0.0 differs from 0.0; int64 compared as integers). Otherwise
// |got - expected| <= atol + rtol * |expected|, and NaN / +-inf must match exactly.
struct Tolerance {
  bool exact = true;
  double rtol = 0;
  double atol = 0;
};

// "exact" or "rtol 1e-05, atol 1e-06".
std::string tolerance_str(const Tolerance& tolerance);

// Empty when `got` matches `want`; otherwise why not, e.g.
//   "dtype: got float64, expected float32"
//   "shape: got (2, 3), expected (3, 2)"
//   "2 of 6 elements differ (exact): [0, 1] got 1.5, expected 1.25; [1, 2] got nan, expected 0"
// (at most the first three differing elements are listed, by their index).
std::optional<std::string> compare_arrays(const weft::Array& got, const weft::Array& want, const Tolerance& tolerance);

}  // namespace conformance
