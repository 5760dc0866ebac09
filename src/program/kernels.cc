// The kernel table: one line per op, each a thin call into weft::ops / weft::Array with the equation's
// parameters unpacked. Dtype promotion happens here where an array function would not promote on its own
// (where's branches, concatenate's parts), so results match the inference rules exactly.
#include "kernels.hpp"

#include <map>

#include "array/cumulative.hpp"
#include "array/gelu.hpp"
#include "array/integer_pow.hpp"
#include "array/layer_norm.hpp"
#include "array/strided_copy.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft::program {
namespace {

using Ins = std::vector<Array>;
using Outs = std::vector<Array>;

// A custom_vjp_call / custom_jvp_call: the identity on the function's outputs, the operands after the primals.
Outs custom_call_outputs(const Ins& in, const Params& p) {
  const auto from = in.begin() + param_int(p, "primals");
  return {from, from + param_int(p, "outputs")};
}
std::vector<int> as_int(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

ReduceAxes reduce_axes(const Params& p) {
  const auto* axes = param_if<std::vector<std::int64_t>>(p, "axes");
  return axes == nullptr ? ReduceAxes() : ReduceAxes(as_int(*axes));
}
std::optional<int> optional_axis(const Params& p) {
  const auto* axis = param_if<std::int64_t>(p, "axis");
  if (axis == nullptr) return std::nullopt;
  return static_cast<int>(*axis);
}

Outs broadcast_to(const Ins& in, const Params& p) {
  const Shape shape = param_ints(p, "shape");
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
  return {detail::strided_copy(padded, shape, start, step)};
}

Outs slice(const Ins& in, const Params& p) {
  const auto& start = param_ints(p, "start");
  const auto& limit = param_ints(p, "limit");
  const auto& step = param_ints(p, "step");
  Shape shape(start.size());
  for (std::size_t d = 0; d < start.size(); ++d) {
    const std::int64_t span = step[d] > 0 ? limit[d] - start[d] : start[d] - limit[d];
    const std::int64_t s = step[d] > 0 ? step[d] : -step[d];
    shape[d] = span <= 0 ? 0 : (span + s - 1) / s;
  }
  return {detail::strided_copy(in[0], shape, start, step)};
}

Outs concatenate(const Ins& in, const Params& p) {
  DType dtype = in.front().dtype();
  for (const Array& a : in) dtype = promote_types(dtype, a.dtype());
  std::vector<Array> parts;
  for (const Array& a : in) parts.push_back(a.astype(dtype));
  return {Array::concatenate(parts, static_cast<int>(param_int(p, "axis")))};
}

Outs where(const Ins& in, const Params&) {
  const DType dtype = promote_types(in[1].dtype(), in[2].dtype());
  return {weft::where(in[0], in[1].astype(dtype), in[2].astype(dtype))};
}

Array cumulative(const Array& x, const Params& p, detail::Cumulative op) {
  const std::int64_t axis = param_int(p, "axis");
  return detail::cumulative(x, static_cast<int>(axis < 0 ? axis + x.ndim() : axis), op, param_flag(p, "reverse"));
}

// take with per_example=B (take's batching rule, src/program/ops/indexing.cc): `axis` holds B equal blocks and
// indices [B, ...] index their example's block (negative from its end). Made positions in the whole axis here,
// each checked against its own block, so an index out of range is named by its example and its own value.
Outs take_per_example(const Ins& in, const Params& p) {
  const Array& x = in[0];
  const std::int64_t axis = param_int(p, "axis");
  const int ax = static_cast<int>(axis < 0 ? axis + x.ndim() : axis);
  const std::int64_t examples = param_int(p, "per_example");
  const std::int64_t n = x.shape()[static_cast<std::size_t>(ax)] / examples;
  std::vector<std::int64_t> index = in[1].astype(DType::i64).to_vector<std::int64_t>();
  const std::int64_t per = examples == 0 ? 0 : static_cast<std::int64_t>(index.size()) / examples;
  for (std::size_t k = 0; k < index.size(); ++k) {
    std::int64_t& i = index[k];
    const std::int64_t example = static_cast<std::int64_t>(k) / per;
    if (i < -n || i >= n) {
      throw InvalidArgument("take: index " + std::to_string(i) + " of example " + std::to_string(example) +
                            " (under vmap) is out of bounds for its axis of size " + std::to_string(n));
    }
    i = (i < 0 ? i + n : i) + example * n;
  }
  return {weft::take(x, Array::from_vector(index, in[1].shape()), ax)};
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
      // The custom-rule calls (custom_calls.hpp): fwd's / f's outputs, the operands after the primal inputs.
      {"custom_vjp_call", custom_call_outputs},
      {"custom_jvp_call", custom_call_outputs},
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
      {"integer_pow",
       [](const Ins& in, const Params& p) -> Outs { return {detail::integer_pow(in[0], param_int(p, "y"))}; }},
      {"where", where},
      {"astype", [](const Ins& in, const Params& p) -> Outs { return {in[0].astype(param_dtype(p))}; }},
      {"sum", [](const Ins& in, const Params& p) -> Outs { return {weft::sum(in[0], reduce_axes(p), param_flag(p, "keepdims"))}; }},
      {"mean", [](const Ins& in, const Params& p) -> Outs { return {weft::mean(in[0], reduce_axes(p), param_flag(p, "keepdims"))}; }},
      {"max", [](const Ins& in, const Params& p) -> Outs { return {weft::max(in[0], reduce_axes(p), param_flag(p, "keepdims"))}; }},
      {"min", [](const Ins& in, const Params& p) -> Outs { return {weft::min(in[0], reduce_axes(p), param_flag(p, "keepdims"))}; }},
      {"argmax", [](const Ins& in, const Params& p) -> Outs { return {weft::argmax(in[0], optional_axis(p), param_flag(p, "keepdims"))}; }},
      {"argmin", [](const Ins& in, const Params& p) -> Outs { return {weft::argmin(in[0], optional_axis(p), param_flag(p, "keepdims"))}; }},
      {"cumsum", [](const Ins& in, const Params& p) -> Outs { return {cumulative(in[0], p, detail::Cumulative::sum)}; }},
      {"cumprod", [](const Ins& in, const Params& p) -> Outs { return {cumulative(in[0], p, detail::Cumulative::product)}; }},
      {"reshape", [](const Ins& in, const Params& p) -> Outs { return {in[0].reshape(param_ints(p, "shape"))}; }},
      {"transpose",
       [](const Ins& in, const Params& p) -> Outs {
         const auto* perm = param_if<std::vector<std::int64_t>>(p, "perm");
         return {perm != nullptr ? weft::transpose(in[0], as_int(*perm)) : weft::transpose(in[0])};
       }},
      {"broadcast_to", broadcast_to},
      {"matmul",
       [](const Ins& in, const Params& p) -> Outs {
         return {weft::matmul(in[0], in[1], {.transpose_a = param_flag(p, "transpose_a"), .transpose_b = param_flag(p, "transpose_b")})};
       }},
      {"softmax",
       [](const Ins& in, const Params& p) -> Outs { return {weft::softmax(in[0], optional_axis(p).value_or(-1))}; }},
      {"log_softmax",
       [](const Ins& in, const Params& p) -> Outs { return {weft::log_softmax(in[0], optional_axis(p).value_or(-1))}; }},
      {"logsumexp",
       [](const Ins& in, const Params& p) -> Outs {
         return {weft::logsumexp(in[0], static_cast<int>(param_int(p, "axis")), param_flag(p, "keepdims"))};
       }},
      {"concatenate", concatenate},
      {"slice", slice},
      {"take",
       [](const Ins& in, const Params& p) -> Outs {
         if (has_param(p, "per_example")) return take_per_example(in, p);
         return {weft::take(in[0], in[1], optional_axis(p))};
       }},
      {"one_hot",
       [](const Ins& in, const Params& p) -> Outs {
         return {weft::one_hot(in[0], static_cast<int>(param_int(p, "num_classes")), param_dtype(p))};
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
