// The cumulative sums and products (cumulative.hpp): one running total per line along the axis, a plain loop
// over [outer, n, inner] in scan order, so each result is exactly the sequential total numpy's cumsum gives.
#include "array/cumulative.hpp"

#include <type_traits>

#include "array/element_types.hpp"
#include "array/reduction_dtypes.hpp"

namespace weft::detail {
namespace {

using namespace kernels;

// Integers in their unsigned type, so an overflow wraps (as JAX's) instead of being undefined.
template <class C>
struct Wrapping {
  using type = C;
};
template <class C>
  requires(std::is_integral_v<C> && !std::is_same_v<C, bool>)
struct Wrapping<C> {
  using type = std::make_unsigned_t<C>;
};
template <class C>
using wrapping_t = typename Wrapping<C>::type;

template <class S>
void scan(const S* x, S* y, std::int64_t outer, std::int64_t n, std::int64_t inner, Cumulative op, bool reverse) {
  using W = wrapping_t<compute_t<S>>;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      W acc = op == Cumulative::sum ? W(0) : W(1);
      for (std::int64_t step = 0; step < n; ++step) {
        const std::int64_t at = (o * n + (reverse ? n - 1 - step : step)) * inner + i;
        const W v = static_cast<W>(Traits<S>::load(x[at]));
        acc = op == Cumulative::sum ? static_cast<W>(acc + v) : static_cast<W>(acc * v);
        y[at] = Traits<S>::store(static_cast<compute_t<S>>(acc));
      }
    }
  }
}

}  // namespace

Array cumulative(const Array& x, int axis, Cumulative op, bool reverse) {
  const Array in = x.astype(sum_dtype(x.dtype()));
  Array out = Array::empty(in.shape(), in.dtype());
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= in.shape()[static_cast<std::size_t>(d)];
  for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < in.shape().size(); ++d) inner *= in.shape()[d];
  const std::int64_t n = in.shape()[static_cast<std::size_t>(axis)];
  dispatch(in.dtype(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    if constexpr (std::is_same_v<S, Bool8>) {
      throw InvalidArgument("cumulative: bool accumulates in int32");  // sum_dtype never gives bool
    } else {
      scan(elements<S>(in), mutable_elements<S>(out), outer, n, inner, op, reverse);
    }
  });
  return out;
}

}  // namespace weft::detail
