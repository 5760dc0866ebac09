// The reductions of several buffers, element-wise and in a fixed order (the collectives' all-reduce and
// reduce-scatter, over shared memory, over the transports' partials, around the ring; the in-process
// transport's all-reduce): one kernel set for every path, so a result never depends on which path computed it.
// See member_reductions.hpp.
#include "array/member_reductions.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "array/element_types.hpp"
#include "weft/error.hpp"

namespace weft::kernels {
namespace {

// Elements per block: the accumulator stays in L1 while the inputs stream by.
constexpr std::int64_t kBlock = kReductionBlock;

// out[i] = in[0][i] (op) in[1][i] (op) ... in member order, so every member of a group gets bitwise the same
// result. Load converts an input element to the accumulator type, Combine folds, Store writes the output.
template <class In, class Acc, class Out, class Load, class Combine, class Store>
void reduce_blocks(std::span<const std::byte* const> inputs, std::byte* output, std::int64_t count, Load load,
                   Combine combine, Store store) {
  Acc acc[kBlock];
  for (std::int64_t base = 0; base < count; base += kBlock) {
    const std::int64_t len = std::min(kBlock, count - base);
    const In* x0 = reinterpret_cast<const In*>(inputs[0]) + base;
    for (std::int64_t i = 0; i < len; ++i) acc[i] = load(x0[i]);
    for (std::size_t m = 1; m < inputs.size(); ++m) {
      const In* xm = reinterpret_cast<const In*>(inputs[m]) + base;
      for (std::int64_t i = 0; i < len; ++i) acc[i] = combine(acc[i], load(xm[i]));
    }
    Out* out = reinterpret_cast<Out*>(output) + base;
    for (std::int64_t i = 0; i < len; ++i) out[i] = store(acc[i]);
  }
}

// The same fold for types reduced in place (no conversion): out = x0 (op) x1, then two more inputs per pass,
// always in member order. Works straight in the output through restrict pointers so the compiler
// vectorises it, blocked so the output block stays in L1 while the inputs stream by.
template <class T, class Combine>
void reduce_direct(std::span<const std::byte* const> inputs, std::byte* output, std::int64_t count, Combine combine) {
  T* __restrict out = reinterpret_cast<T*>(output);
  const std::size_t n = inputs.size();
  for (std::int64_t base = 0; base < count; base += kBlock) {
    const std::int64_t len = std::min(kBlock, count - base);
    T* __restrict o = out + base;
    const T* __restrict x0 = reinterpret_cast<const T*>(inputs[0]) + base;
    if (n == 1) {
      for (std::int64_t i = 0; i < len; ++i) o[i] = x0[i];
      continue;
    }
    const T* __restrict x1 = reinterpret_cast<const T*>(inputs[1]) + base;
    for (std::int64_t i = 0; i < len; ++i) o[i] = combine(x0[i], x1[i]);
    std::size_t m = 2;
    for (; m + 1 < n; m += 2) {
      const T* __restrict a = reinterpret_cast<const T*>(inputs[m]) + base;
      const T* __restrict b = reinterpret_cast<const T*>(inputs[m + 1]) + base;
      for (std::int64_t i = 0; i < len; ++i) o[i] = combine(combine(o[i], a[i]), b[i]);
    }
    if (m < n) {
      const T* __restrict a = reinterpret_cast<const T*>(inputs[m]) + base;
      for (std::int64_t i = 0; i < len; ++i) o[i] = combine(o[i], a[i]);
    }
  }
}

// Floating inputs, accumulated in Acc (float for 16-bit floats) and stored back as In (max and min propagate
// NaN: element_types.hpp's max_nan / min_nan, the array ops' own); a 16-bit sum can be kept
// in float32 instead (`wide`: a mean's sums, divided before they are rounded).
template <class In, class Acc, class Load, class Store>
void reduce_float(ReduceOp op, std::span<const std::byte* const> in, std::byte* out, std::int64_t n, Load load,
                  Store store, bool wide) {
  auto add = [](Acc a, Acc b) { return a + b; };
  if constexpr (std::is_same_v<In, Acc>) {
    switch (op) {
      case ReduceOp::sum: return reduce_direct<In>(in, out, n, add);
      case ReduceOp::prod: return reduce_direct<In>(in, out, n, [](Acc a, Acc b) { return a * b; });
      case ReduceOp::max: return reduce_direct<In>(in, out, n, max_nan<Acc>);
      case ReduceOp::min: return reduce_direct<In>(in, out, n, min_nan<Acc>);
      default: return;
    }
  } else {
    if (wide) return reduce_blocks<In, Acc, Acc>(in, out, n, load, add, [](Acc a) { return a; });
    switch (op) {
      case ReduceOp::sum: return reduce_blocks<In, Acc, In>(in, out, n, load, add, store);
      case ReduceOp::prod: return reduce_blocks<In, Acc, In>(in, out, n, load, [](Acc a, Acc b) { return a * b; }, store);
      case ReduceOp::max: return reduce_blocks<In, Acc, In>(in, out, n, load, max_nan<Acc>, store);
      case ReduceOp::min: return reduce_blocks<In, Acc, In>(in, out, n, load, min_nan<Acc>, store);
      default: return;
    }
  }
}

// Integer inputs: sums and products wrap modulo 2^bits (computed unsigned, so no undefined behaviour).
template <class T>
void reduce_int(ReduceOp op, std::span<const std::byte* const> in, std::byte* out, std::int64_t n) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::sum:
      return reduce_direct<T>(in, out, n, [](T a, T b) { return static_cast<T>(static_cast<U>(a) + static_cast<U>(b)); });
    case ReduceOp::prod:
      return reduce_direct<T>(in, out, n, [](T a, T b) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(b)); });
    case ReduceOp::max: return reduce_direct<T>(in, out, n, [](T a, T b) { return std::max(a, b); });
    case ReduceOp::min: return reduce_direct<T>(in, out, n, [](T a, T b) { return std::min(a, b); });
    default: return;
  }
}

// bool: JAX sums (and multiplies) bools as int32; max is "or", min is "and".
void reduce_bool(ReduceOp op, std::span<const std::byte* const> in, std::byte* out, std::int64_t n) {
  using I = std::int32_t;
  auto load = [](std::uint8_t v) { return static_cast<I>(v != 0); };
  auto same = [](I a) { return a; };
  auto to_bool = [](I a) { return static_cast<std::uint8_t>(a); };
  switch (op) {
    case ReduceOp::sum: return reduce_blocks<std::uint8_t, I, I>(in, out, n, load, [](I a, I b) { return a + b; }, same);
    case ReduceOp::prod: return reduce_blocks<std::uint8_t, I, I>(in, out, n, load, [](I a, I b) { return a * b; }, same);
    case ReduceOp::max: return reduce_blocks<std::uint8_t, I, std::uint8_t>(in, out, n, load, [](I a, I b) { return a | b; }, to_bool);
    case ReduceOp::min: return reduce_blocks<std::uint8_t, I, std::uint8_t>(in, out, n, load, [](I a, I b) { return a & b; }, to_bool);
    default: return;
  }
}

// out[i] = convert(sums[i] / divisor) for i < count: a sum in Sum, divided in Div, stored as Out. May run in
// place when Sum and Out are the same type.
template <class Sum, class Div, class Out, class Store>
void divide_as(const std::byte* sums, std::byte* out, std::int64_t count, int divisor, Store store) {
  const Div d = static_cast<Div>(divisor);
  for (std::int64_t i = 0; i < count; ++i) {
    Sum s;
    std::memcpy(&s, sums + i * sizeof(Sum), sizeof(Sum));
    const Out o = store(static_cast<Div>(s) / d);
    std::memcpy(out + i * sizeof(Out), &o, sizeof(Out));
  }
}

}  // namespace

void reduce_in_order(DType dtype, ReduceOp op, std::span<const std::byte* const> in, std::byte* out,
                     std::int64_t count, bool wide) {
  if (op == ReduceOp::mean) throw Error("internal error: a mean reached the reduction kernels (it is a sum and a division)");
  if (count <= 0) return;
  auto same = [](auto v) { return v; };
  switch (dtype) {
    case DType::f32: return reduce_float<float, float>(op, in, out, count, same, same, wide);
    case DType::f64: return reduce_float<double, double>(op, in, out, count, same, same, wide);
    case DType::f16: return reduce_float<std::uint16_t, float>(op, in, out, count, half_to_float, float_to_half, wide);
    case DType::bf16: return reduce_float<std::uint16_t, float>(op, in, out, count, bf16_to_float, float_to_bf16, wide);
    case DType::i8: return reduce_int<std::int8_t>(op, in, out, count);
    case DType::u8: return reduce_int<std::uint8_t>(op, in, out, count);
    case DType::i32: return reduce_int<std::int32_t>(op, in, out, count);
    case DType::i64: return reduce_int<std::int64_t>(op, in, out, count);
    case DType::boolean: return reduce_bool(op, in, out, count);
  }
}

void divide_sums(DType sums_dtype, const std::byte* sums, DType out_dtype, std::byte* out, std::int64_t count,
                 int divisor) {
  auto same = [](auto v) { return v; };
  switch (sums_dtype) {
    case DType::f32:
      if (out_dtype == DType::f16) return divide_as<float, float, std::uint16_t>(sums, out, count, divisor, float_to_half);
      if (out_dtype == DType::bf16) return divide_as<float, float, std::uint16_t>(sums, out, count, divisor, float_to_bf16);
      return divide_as<float, float, float>(sums, out, count, divisor, same);
    case DType::f64: return divide_as<double, double, double>(sums, out, count, divisor, same);
    case DType::i8: return divide_as<std::int8_t, float, float>(sums, out, count, divisor, same);
    case DType::u8: return divide_as<std::uint8_t, float, float>(sums, out, count, divisor, same);
    case DType::i32: return divide_as<std::int32_t, float, float>(sums, out, count, divisor, same);
    case DType::i64: return divide_as<std::int64_t, double, double>(sums, out, count, divisor, same);
    default: throw Error("internal error: no mean of " + std::string(dtype_name(sums_dtype)) + " sums");
  }
}

}  // namespace weft::kernels
