// The kernel table: one line per op, each a thin call into weft::ops / weft::Array with the equation's
// parameters unpacked. Dtype promotion happens here where an array function would not promote on its own
// (where's branches, concatenate's parts), so results match the inference rules exactly.
#include "kernels.hpp"

#include <cstring>
#include <map>

#include "array/cumulative.hpp"
#include "array/gelu.hpp"
#include "array/layer_norm.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft::program {
namespace {

using Ins = std::vector<Array>;
using Outs = std::vector<Array>;

const std::vector<std::int64_t>& ints(const Params& p, const char* name) {
  return std::get<std::vector<std::int64_t>>(p.at(name));
}
std::int64_t int_of(const Params& p, const char* name) { return std::get<std::int64_t>(p.at(name)); }
std::vector<int> as_int(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

ReduceAxes reduce_axes(const Params& p) {
  auto it = p.find("axes");
  if (it == p.end()) return ReduceAxes();
  return ReduceAxes(as_int(std::get<std::vector<std::int64_t>>(it->second)));
}
std::optional<int> optional_axis(const Params& p) {
  auto it = p.find("axis");
  if (it == p.end()) return std::nullopt;
  return static_cast<int>(std::get<std::int64_t>(it->second));
}

// out[o] = in[source(o)] for a row-major walk over `out_shape`, where axis d of the output starts at
// start[d] of the input and steps by step[d] (0: a broadcast axis).
Array strided_copy(const Array& in, const Shape& out_shape, const std::vector<std::int64_t>& start,
                   const std::vector<std::int64_t>& step) {
  Array out = Array::empty(out_shape, in.dtype());
  const std::int64_t total = out.size();
  if (total == 0) return out;
  const std::size_t elem = dtype_size(in.dtype());
  const std::size_t rank = out_shape.size();
  std::vector<std::int64_t> in_strides(rank, 1);
  for (std::size_t d = rank; d-- > 1;) in_strides[d - 1] = in_strides[d] * in.shape()[d];
  std::int64_t base = 0;
  for (std::size_t d = 0; d < rank; ++d) base += start[d] * in_strides[d];
  const std::byte* src = in.bytes();
  std::byte* dst = out.mutable_bytes();
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return out;
  }
  std::vector<std::int64_t> counter(rank, 0);
  const std::int64_t inner = out_shape[rank - 1];
  const std::int64_t inner_step = step[rank - 1] * in_strides[rank - 1];
  std::int64_t at = base;
  for (std::int64_t o = 0; o < total; o += inner) {
    if (inner_step == 1) {
      std::memcpy(dst + o * elem, src + at * elem, static_cast<std::size_t>(inner) * elem);
    } else {
      for (std::int64_t k = 0; k < inner; ++k) std::memcpy(dst + (o + k) * elem, src + (at + k * inner_step) * elem, elem);
    }
    for (std::size_t d = rank - 1; d-- > 0;) {
      at += step[d] * in_strides[d];
      if (++counter[d] < out_shape[d]) break;
      at -= counter[d] * step[d] * in_strides[d];
      counter[d] = 0;
    }
  }
  return out;
}

Outs broadcast_to(const Ins& in, const Params& p) {
  const Shape shape = ints(p, "shape");
  const Array& x = in[0];
  if (x.shape() == shape) return {x};
  // Read x as the target shape: leading new axes and size-1 axes step by 0.
  const std::size_t lead = shape.size() - x.shape().size();
  Array padded = x.reshape([&] {
    Shape s(lead, 1);
    s.insert(s.end(), x.shape().begin(), x.shape().end());
    return s;
  }());
  std::vector<std::int64_t> start(shape.size(), 0);
  std::vector<std::int64_t> step(shape.size(), 1);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (padded.shape()[d] == 1 && shape[d] != 1) step[d] = 0;
  }
  return {strided_copy(padded, shape, start, step)};
}

Outs slice(const Ins& in, const Params& p) {
  const auto& start = ints(p, "start");
  const auto& limit = ints(p, "limit");
  const auto& step = ints(p, "step");
  Shape shape(start.size());
  for (std::size_t d = 0; d < start.size(); ++d) {
    const std::int64_t span = step[d] > 0 ? limit[d] - start[d] : start[d] - limit[d];
    const std::int64_t s = step[d] > 0 ? step[d] : -step[d];
    shape[d] = span <= 0 ? 0 : (span + s - 1) / s;
  }
  return {strided_copy(in[0], shape, start, step)};
}

Outs concatenate(const Ins& in, const Params& p) {
  DType dtype = in.front().dtype();
  for (const Array& a : in) dtype = promote_types(dtype, a.dtype());
  std::vector<Array> parts;
  for (const Array& a : in) parts.push_back(a.astype(dtype));
  return {Array::concatenate(parts, static_cast<int>(int_of(p, "axis")))};
}

Outs integer_pow(const Ins& in, const Params& p) {
  std::int64_t y = int_of(p, "y");
  const Array& x = in[0];
  if (y == 0) return {Array::full(x.shape(), 1.0, x.dtype())};
  const bool invert = y < 0;
  if (invert) y = -y;
  // Square and multiply: x ** 2 is x * x exactly, as JAX's integer_pow.
  Array result;
  bool have = false;
  Array base = x;
  while (y > 0) {
    if (y & 1) {
      result = have ? result * base : base;
      have = true;
    }
    y >>= 1;
    if (y > 0) base = base * base;
  }
  if (invert) result = Array::full({}, 1.0, x.dtype()) / result;
  return {result};
}

Outs where(const Ins& in, const Params&) {
  const DType dtype = promote_types(in[1].dtype(), in[2].dtype());
  return {weft::where(in[0], in[1].astype(dtype), in[2].astype(dtype))};
}

Array cumulative(const Array& x, const Params& p, detail::Cumulative op) {
  const std::int64_t axis = int_of(p, "axis");
  return detail::cumulative(x, static_cast<int>(axis < 0 ? axis + x.ndim() : axis), op, flag(p, "reverse"));
}

using Table = std::map<std::string, Kernel>;

const Table& table() {
  static const Table kernels = {
      {"exp", [](const Ins& in, const Params&) -> Outs { return {weft::exp(in[0])}; }},
      {"log", [](const Ins& in, const Params&) -> Outs { return {weft::log(in[0])}; }},
      {"log1p", [](const Ins& in, const Params&) -> Outs { return {weft::log1p(in[0])}; }},
      {"tanh", [](const Ins& in, const Params&) -> Outs { return {weft::tanh(in[0])}; }},
      {"sqrt", [](const Ins& in, const Params&) -> Outs { return {weft::sqrt(in[0])}; }},
      {"rsqrt", [](const Ins& in, const Params&) -> Outs { return {weft::rsqrt(in[0])}; }},
      {"sigmoid", [](const Ins& in, const Params&) -> Outs { return {weft::sigmoid(in[0])}; }},
      {"layer_norm",
       [](const Ins& in, const Params&) -> Outs {
         return {detail::layer_norm(in[0], in[1], in[2], in[3].to_doubles().at(0))};
       }},
      {"layer_norm_vjp",
       [](const Ins& in, const Params&) -> Outs {
         detail::LayerNormGrads g = detail::layer_norm_vjp(in[0], in[1], in[2], in[3].to_doubles().at(0));
         return {std::move(g.dx), std::move(g.dscale), std::move(g.dbias)};
       }},
      {"gelu_tanh", [](const Ins& in, const Params&) -> Outs { return {detail::gelu_tanh(in[0])}; }},
      {"gelu_tanh_derivative",
       [](const Ins& in, const Params&) -> Outs { return {detail::gelu_tanh_derivative(in[0])}; }},
      {"abs", [](const Ins& in, const Params&) -> Outs { return {weft::abs(in[0])}; }},
      {"negative", [](const Ins& in, const Params&) -> Outs { return {-in[0]}; }},
      {"sign", [](const Ins& in, const Params&) -> Outs { return {weft::sign(in[0])}; }},
      {"relu", [](const Ins& in, const Params&) -> Outs { return {weft::relu(in[0])}; }},
      {"copy", [](const Ins& in, const Params&) -> Outs { return {in[0]}; }},  // arrays are immutable
      {"stop_gradient", [](const Ins& in, const Params&) -> Outs { return {in[0]}; }},
      // shard_map's pvary changes a value's type only (its varying axes): the data stays.
      {"pvary", [](const Ins& in, const Params&) -> Outs { return {in[0]}; }},
      // custom_vjp's call (custom_vjp.hpp): fwd's outputs, the operands after the primal inputs.
      {"custom_vjp_call", [](const Ins& in, const Params& p) -> Outs {
         const auto from = in.begin() + int_of(p, "primals");
         return {from, from + int_of(p, "outputs")};
       }},
      {"add", [](const Ins& in, const Params&) -> Outs { return {in[0] + in[1]}; }},
      {"subtract", [](const Ins& in, const Params&) -> Outs { return {in[0] - in[1]}; }},
      {"multiply", [](const Ins& in, const Params&) -> Outs { return {in[0] * in[1]}; }},
      {"divide", [](const Ins& in, const Params&) -> Outs { return {in[0] / in[1]}; }},
      {"power", [](const Ins& in, const Params&) -> Outs { return {weft::power(in[0], in[1])}; }},
      {"maximum", [](const Ins& in, const Params&) -> Outs { return {weft::maximum(in[0], in[1])}; }},
      {"minimum", [](const Ins& in, const Params&) -> Outs { return {weft::minimum(in[0], in[1])}; }},
      {"equal", [](const Ins& in, const Params&) -> Outs { return {weft::equal(in[0], in[1])}; }},
      {"not_equal", [](const Ins& in, const Params&) -> Outs { return {weft::not_equal(in[0], in[1])}; }},
      {"less", [](const Ins& in, const Params&) -> Outs { return {in[0] < in[1]}; }},
      {"less_equal", [](const Ins& in, const Params&) -> Outs { return {in[0] <= in[1]}; }},
      {"greater", [](const Ins& in, const Params&) -> Outs { return {in[0] > in[1]}; }},
      {"greater_equal", [](const Ins& in, const Params&) -> Outs { return {in[0] >= in[1]}; }},
      {"bitwise_and", [](const Ins& in, const Params&) -> Outs { return {in[0] & in[1]}; }},
      {"bitwise_or", [](const Ins& in, const Params&) -> Outs { return {in[0] | in[1]}; }},
      {"bitwise_xor", [](const Ins& in, const Params&) -> Outs { return {in[0] ^ in[1]}; }},
      {"bitwise_not", [](const Ins& in, const Params&) -> Outs { return {~in[0]}; }},
      {"integer_pow", integer_pow},
      {"where", where},
      {"astype", [](const Ins& in, const Params& p) -> Outs { return {in[0].astype(std::get<DType>(p.at("dtype")))}; }},
      {"sum", [](const Ins& in, const Params& p) -> Outs { return {weft::sum(in[0], reduce_axes(p), flag(p, "keepdims"))}; }},
      {"mean", [](const Ins& in, const Params& p) -> Outs { return {weft::mean(in[0], reduce_axes(p), flag(p, "keepdims"))}; }},
      {"max", [](const Ins& in, const Params& p) -> Outs { return {weft::max(in[0], reduce_axes(p), flag(p, "keepdims"))}; }},
      {"min", [](const Ins& in, const Params& p) -> Outs { return {weft::min(in[0], reduce_axes(p), flag(p, "keepdims"))}; }},
      {"argmax", [](const Ins& in, const Params& p) -> Outs { return {weft::argmax(in[0], optional_axis(p), flag(p, "keepdims"))}; }},
      {"argmin", [](const Ins& in, const Params& p) -> Outs { return {weft::argmin(in[0], optional_axis(p), flag(p, "keepdims"))}; }},
      {"cumsum", [](const Ins& in, const Params& p) -> Outs { return {cumulative(in[0], p, detail::Cumulative::sum)}; }},
      {"cumprod", [](const Ins& in, const Params& p) -> Outs { return {cumulative(in[0], p, detail::Cumulative::product)}; }},
      {"reshape", [](const Ins& in, const Params& p) -> Outs { return {in[0].reshape(ints(p, "shape"))}; }},
      {"transpose",
       [](const Ins& in, const Params& p) -> Outs {
         return {p.contains("perm") ? weft::transpose(in[0], as_int(ints(p, "perm"))) : weft::transpose(in[0])};
       }},
      {"broadcast_to", broadcast_to},
      {"matmul",
       [](const Ins& in, const Params& p) -> Outs {
         return {weft::matmul(in[0], in[1], {.transpose_a = flag(p, "transpose_a"), .transpose_b = flag(p, "transpose_b")})};
       }},
      {"softmax",
       [](const Ins& in, const Params& p) -> Outs { return {weft::softmax(in[0], optional_axis(p).value_or(-1))}; }},
      {"log_softmax",
       [](const Ins& in, const Params& p) -> Outs { return {weft::log_softmax(in[0], optional_axis(p).value_or(-1))}; }},
      {"logsumexp",
       [](const Ins& in, const Params& p) -> Outs {
         return {weft::logsumexp(in[0], static_cast<int>(int_of(p, "axis")), flag(p, "keepdims"))};
       }},
      {"concatenate", concatenate},
      {"slice", slice},
      {"take", [](const Ins& in, const Params& p) -> Outs { return {weft::take(in[0], in[1], optional_axis(p))}; }},
      {"one_hot",
       [](const Ins& in, const Params& p) -> Outs {
         return {weft::one_hot(in[0], static_cast<int>(int_of(p, "num_classes")), std::get<DType>(p.at("dtype")))};
       }},
  };
  return kernels;
}

}  // namespace

Kernel find_kernel(const std::string& op) {
  auto it = table().find(op);
  return it == table().end() ? nullptr : it->second;
}

}  // namespace weft::program
