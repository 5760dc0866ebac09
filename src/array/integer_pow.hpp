// x ** y for a fixed integer y (JAX's lax.integer_pow), the program layer's integer_pow kernel
// (src/program/ops/elementwise.cc). Internal: not part of the public array API (weft::power takes an array exponent).
#pragma once

#include <cstdint>

#include "weft/array.hpp"

namespace weft::detail {

// By squaring and multiplying, as JAX's integer_pow: x ** 2 is x * x exactly, x ** 0 is ones, and a negative
// y is 1 / x ** -y. The result has x's dtype.
Array integer_pow(const Array& x, std::int64_t y);

}  // namespace weft::detail
