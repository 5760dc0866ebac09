// integer_pow (integer_pow.hpp): square and multiply with the array's own products.
#include "array/integer_pow.hpp"

namespace weft::detail {

Array integer_pow(const Array& x, std::int64_t y) {
  if (y == 0) return Array::full(x.shape(), 1.0, x.dtype());
  const bool invert = y < 0;
  // |y| unsigned: -y of the most negative int64 would overflow.
  std::uint64_t n = invert ? std::uint64_t{0} - static_cast<std::uint64_t>(y) : static_cast<std::uint64_t>(y);
  Array result;
  bool have = false;
  Array base = x;
  while (n > 0) {
    if (n & 1) {
      result = have ? result * base : base;
      have = true;
    }
    n >>= 1;
    if (n > 0) base = base * base;
  }
  if (invert) result = Array::full({}, 1.0, x.dtype()) / result;
  return result;
}

}  // namespace weft::detail
