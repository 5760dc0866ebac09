// The reductions: sum, mean, max, min, argmax, argmin, logsumexp, and the cumulative sums and products
// (cumsum, cumprod). Each primitive's type rule (numpy's shapes, JAX's dtypes), VJP, JVP and batching rule
// side by side, by JAX's rules (jax/_src/lax/lax.py, jax/_src/lax/control_flow/loops.py).
#include "array/cumulative.hpp"
#include "array/reduction_dtypes.hpp"
#include "program/op_registry.hpp"
#include "program/rule_kit.hpp"
#include "weft/ops.hpp"

namespace weft::program {
namespace {

// Which axes an `axes` parameter reduces (every axis when absent), each checked once.
std::vector<bool> checked_reduced_axes(const ValueType& in, const Params& params) {
  std::vector<bool> reduced(in.shape.size(), !has_param(params, "axes"));
  if (!has_param(params, "axes")) return reduced;
  for (std::int64_t axis : param<std::vector<std::int64_t>>(params, "axes")) {
    const std::int64_t a = normalize_axis(axis, in.shape.size());
    if (reduced[a]) throw RuleError("axis " + std::to_string(axis) + " is reduced twice");
    reduced[a] = true;
  }
  return reduced;
}

ValueType reduce_shape(const ValueType& in, const std::vector<bool>& reduced, const Params& params) {
  const bool keepdims = has_param(params, "keepdims") && param<bool>(params, "keepdims");
  ValueType out{in.dtype, {}, in.varying};
  for (std::size_t i = 0; i < in.shape.size(); ++i) {
    if (!reduced[i]) {
      out.shape.push_back(in.shape[i]);
    } else if (keepdims) {
      out.shape.push_back(1);
    }
  }
  return out;
}

// A sum accumulates in sum_dtype (bool, int8 and uint8 in int32, as JAX's); max / min keep the dtype; mean of
// integers is float32.
std::vector<ValueType> reduction(Prim op, const std::vector<ValueType>& ins, const Params& params) {
  ValueType out = reduce_shape(ins[0], checked_reduced_axes(ins[0], params), params);
  if (op == Prim::sum) out.dtype = detail::sum_dtype(ins[0].dtype);
  if (op == Prim::mean && !is_floating(ins[0].dtype)) out.dtype = DType::f32;
  return {out};
}

// The same reduction with every axis named (an absent `axes` means all of them): what a batching rule shifts.
Params spelled_axes(const Params& params, std::size_t rank) {
  Params spelled = params;
  if (!spelled.contains("axes")) spelled["axes"] = ints_param(iota_axes(rank));
  return spelled;
}

// ---- sum, mean: linear. The cotangent is broadcast back over the reduced axes (divided by their size for
// the mean); the JVP is the reduction of the tangent.
void sum_mean_vjp(VjpContext& c) {
  const ValueType& x = c.in_types[0];
  const std::vector<bool> reduced = reduced_axes(x, c.params);
  ValueId back = c.e.unreduce(c.ct(), x.shape, reduced);
  if (c.prim() == Prim::mean) {
    std::int64_t n = 1;
    for (std::size_t d = 0; d < x.shape.size(); ++d) n *= reduced[d] ? x.shape[d] : 1;
    back = c.e.emit(Prim::divide, {back, c.e.scalar(static_cast<double>(n), c.e.type(back).dtype)});
  }
  c.give(0, back);
}

Batched reduction_batch(BatchContext& c) {
  const Params spelled = spelled_axes(c.params, c.in_types[0].shape.size());
  BatchContext shifted{c.e, c.op, spelled, c.in_types, c.out_types, c.ins, c.batched, c.size, c.axis_name};
  return shifted_axes_batch(shifted);
}

// ---- max, min: JAX's rule gives the derivative to the elements equal to the result, shared equally between
// ties; VJP and JVP both read this one weight, so they are each other's transposes.
struct ArgWeights {
  ValueId hit;    // 1 where x equals the result, 0 elsewhere (x's shape, the result's float dtype)
  ValueId count;  // how many hits each result has (the result's shape)
};

ArgWeights arg_weights(Emitter& e, const ValueType& x, ValueId in, ValueId out, const Params& params, DType dt) {
  const std::vector<bool> reduced = reduced_axes(x, params);
  const ValueId hit = e.astype(e.emit(Prim::equal, {in, e.unreduce(out, x.shape, reduced)}), dt);
  return {hit, e.emit(Prim::sum, {hit}, params)};
}

void max_min_vjp(VjpContext& c) {
  const ValueType& x = c.in_types[0];
  const std::vector<bool> reduced = reduced_axes(x, c.params);
  const ArgWeights w = arg_weights(c.e, x, c.in(0), c.out(), c.params, c.dtype());
  const ValueId share = c.e.emit(Prim::divide, {c.ct(), w.count});
  c.give(0, c.e.emit(Prim::multiply, {c.e.unreduce(share, x.shape, reduced), w.hit}));
}

std::vector<ValueId> max_min_jvp(JvpContext& c) {
  const ArgWeights w = arg_weights(c.e, c.in_types[0], c.in(0), c.out(), c.params, c.dtype());
  const ValueId picked = c.e.emit(Prim::sum, {c.e.emit(Prim::multiply, {c.tangent(0), w.hit})}, c.params);
  return {c.e.emit(Prim::divide, {picked, w.count})};
}

// ---- argmax, argmin: int32 indices (no derivative). Per example along `axis` + 1; without an axis JAX takes
// the index into the flattened operand, here into each example flattened.
std::vector<ValueType> arg_reduction(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  Params as_axes;
  if (has_param(params, "axis")) {
    as_axes["axes"] = ints_param({param<std::int64_t>(params, "axis")});
  }
  if (has_param(params, "keepdims")) as_axes["keepdims"] = params.at("keepdims");
  ValueType out = reduce_shape(ins[0], checked_reduced_axes(ins[0], as_axes), as_axes);
  out.dtype = DType::i32;
  return {out};
}

Batched arg_reduction_batch(BatchContext& c) {
  if (c.params.contains("axis")) return shifted_axes_batch(c);
  const ValueType& x = c.in_types[0];
  Params params = c.params;
  params["axis"] = int_param(1);
  const ValueId flat = c.e.reshape(c.in(0), {c.size, x.num_elements()});
  std::vector<std::int64_t> shape = c.out_types[0].shape;  // keepdims: every axis 1
  shape.insert(shape.begin(), c.size);
  return {{c.e.reshape(c.e.emit(c.prim(), {flat}, params), shape)}, {true}};
}

// ---- logsumexp along `axis`: its derivative is the softmax along the axis.
std::vector<ValueType> logsumexp(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const std::int64_t axis = normalize_axis(param<std::int64_t>(params, "axis"), ins[0].shape.size());
  Params as_axes{{"axes", ints_param({axis})}};
  if (has_param(params, "keepdims")) as_axes["keepdims"] = params.at("keepdims");
  ValueType out = reduce_shape(ins[0], checked_reduced_axes(ins[0], as_axes), as_axes);
  if (!is_floating(out.dtype)) out.dtype = DType::f32;
  return {out};
}

std::vector<bool> axis_reduced(const ValueType& x, const Params& params) {
  std::vector<bool> reduced(x.shape.size(), false);
  reduced[static_cast<std::size_t>(axis_param(params, x.shape.size()))] = true;
  return reduced;
}

// exp(x - logsumexp(x)) broadcast to x's shape: the softmax (0 where x is -inf, nan where every x is).
ValueId lse_softmax(Emitter& e, const ValueType& x, ValueId in, ValueId out, const Params& params) {
  return e.emit(Prim::exp, {e.emit(Prim::subtract, {in, e.unreduce(out, x.shape, axis_reduced(x, params))})});
}

void logsumexp_vjp(VjpContext& c) {
  const ValueType& x = c.in_types[0];
  const ValueId soft = lse_softmax(c.e, x, c.in(0), c.out(), c.params);
  c.give(0, c.e.emit(Prim::multiply, {c.e.unreduce(c.ct(), x.shape, axis_reduced(x, c.params)), soft}));
}

std::vector<ValueId> logsumexp_jvp(JvpContext& c) {
  const ValueType& x = c.in_types[0];
  const ValueId soft = lse_softmax(c.e, x, c.in(0), c.out(), c.params);
  Params sum{{"axes", ints_param({axis_param(c.params, x.shape.size())})}};
  if (c.params.contains("keepdims")) sum["keepdims"] = c.params.at("keepdims");
  return {c.e.emit(Prim::sum, {c.e.emit(Prim::multiply, {soft, c.tangent(0)})}, sum)};
}

// ---- cumsum, cumprod along `axis` (jnp.cumsum / jnp.cumprod; lax's `reverse` runs from the end): the
// operand's shape, sum's dtype (bool, int8 and uint8 accumulate in int32).
std::vector<ValueType> cumulative(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  if (ins[0].shape.empty()) throw RuleError("the operand must have at least one dimension (a scalar has no axis)");
  normalize_axis(param<std::int64_t>(params, "axis"), ins[0].shape.size());
  if (has_param(params, "reverse")) param<bool>(params, "reverse");
  ValueType out = ins[0];
  out.dtype = detail::sum_dtype(ins[0].dtype);
  return {out};
}

// The cumulative `op` (cumsum, cumprod) along the equation's axis, in its direction or (`flip`) the other way.
ValueId cumulative_op(Emitter& e, Prim op, ValueId v, const Params& params, bool flip) {
  Params q = params;
  const bool reverse = param_flag(params, "reverse");
  q["reverse"] = bool_param(reverse != flip);
  return e.emit(op, {v}, q);
}

// cumsum is linear; its transpose sums the cotangent from the other end.
void cumsum_vjp(VjpContext& c) { c.give(0, cumulative_op(c.e, Prim::cumsum, c.ct(), c.params, true)); }

// cumprod: d out_i / d x_j = prod_{k <= i, k != j} x_k (for j <= i, in scan order). Without dividing by a zero
// (JAX differentiates its scan, which never divides): with z the first zero of the row in scan order,
//   for j before z:  out_i / x_j (out_i is 0 from z on, so the sum stops there by itself);
//   for j = z:       L_z * P_i, L_z the product before z and P_i = prod_{z < k <= i} x_k;
//   for j after z:   0 (x_z stays in the product).
// So the JVP is out * cumsum(before * t / x) + P * cumsum(at * L * t) and the VJP its transpose, with the
// sums running from the other end.
struct CumprodParts {
  ValueId before, at;  // masks in the dtype: positions before the first zero, the first zero itself
  ValueId safe;        // x with its zeros read as 1 (so the divisions are by nonzeros only)
  ValueId lead;        // cumprod(safe): at the first zero, the product L of what precedes it
  ValueId after;       // P: cumprod of x with everything up to the first zero read as 1
};

CumprodParts cumprod_parts(Emitter& e, ValueId x, const Params& params, DType dt) {
  const ValueId one = e.scalar(1, dt), zero = e.scalar(0, dt);
  const ValueId is_zero = e.emit(Prim::equal, {x, zero});
  const ValueId zeros_so_far = cumulative_op(e, Prim::cumsum, e.astype(is_zero, dt), params, false);
  const ValueId zeros_before = e.emit(Prim::subtract, {zeros_so_far, e.astype(is_zero, dt)});
  const ValueId none_before = e.emit(Prim::equal, {zeros_before, zero});
  CumprodParts p;
  p.before = e.astype(e.emit(Prim::equal, {zeros_so_far, zero}), dt);
  p.at = e.astype(e.emit(Prim::bitwise_and, {none_before, is_zero}), dt);
  p.safe = e.emit(Prim::where, {is_zero, one, x});
  p.lead = cumulative_op(e, Prim::cumprod, p.safe, params, false);
  p.after = cumulative_op(e, Prim::cumprod, e.emit(Prim::where, {none_before, one, x}), params, false);
  return p;
}

void cumprod_vjp(VjpContext& c) {
  Emitter& e = c.e;
  const CumprodParts p = cumprod_parts(e, c.in(0), c.params, c.dtype());
  const ValueId from_out = cumulative_op(e, Prim::cumsum, e.emit(Prim::multiply, {c.ct(), c.out()}), c.params, true);
  const ValueId from_after = cumulative_op(e, Prim::cumsum, e.emit(Prim::multiply, {c.ct(), p.after}), c.params, true);
  const ValueId before = e.emit(Prim::multiply, {p.before, e.emit(Prim::divide, {from_out, p.safe})});
  const ValueId at = e.emit(Prim::multiply, {p.at, e.emit(Prim::multiply, {p.lead, from_after})});
  c.give(0, e.emit(Prim::add, {before, at}));
}

std::vector<ValueId> cumprod_jvp(JvpContext& c) {
  Emitter& e = c.e;
  const CumprodParts p = cumprod_parts(e, c.in(0), c.params, c.dtype());
  const ValueId t = c.tangent(0);
  const ValueId before = cumulative_op(
      e, Prim::cumsum, e.emit(Prim::multiply, {p.before, e.emit(Prim::divide, {t, p.safe})}), c.params, false);
  const ValueId at = cumulative_op(e, Prim::cumsum, e.emit(Prim::multiply, {p.at, e.emit(Prim::multiply, {p.lead, t})}),
                                   c.params, false);
  return {e.emit(Prim::add, {e.emit(Prim::multiply, {c.out(), before}), e.emit(Prim::multiply, {p.after, at})})};
}

// ---- kernels ----------------------------------------------------------------------------------------------

using Ins = std::vector<Array>;
using Outs = std::vector<Array>;
using Reduction = Array (*)(const Array&, const ReduceAxes&, bool);

// sum, mean, max, min: an absent `axes` reduces every axis.
template <Reduction reduce>
Outs reduction_kernel(const Ins& in, const Params& p) {
  const auto* axes = param_if<std::vector<std::int64_t>>(p, "axes");
  const ReduceAxes over = axes == nullptr ? ReduceAxes() : ReduceAxes(std::vector<int>(axes->begin(), axes->end()));
  return {reduce(in[0], over, param_flag(p, "keepdims"))};
}
template <Array (*arg)(const Array&, std::optional<int>, bool)>
Outs arg_reduction_kernel(const Ins& in, const Params& p) {
  return {arg(in[0], param_axis_if(p), param_flag(p, "keepdims"))};
}
Outs logsumexp_kernel(const Ins& in, const Params& p) {
  return {weft::logsumexp(in[0], static_cast<int>(param_int(p, "axis")), param_flag(p, "keepdims"))};
}
template <detail::Cumulative op>
Outs cumulative_kernel(const Ins& in, const Params& p) {
  const std::int64_t axis = param_int(p, "axis");
  const Array& x = in[0];
  return {detail::cumulative(x, static_cast<int>(axis < 0 ? axis + x.ndim() : axis), op, param_flag(p, "reverse"))};
}

}  // namespace

void register_reduction_ops(std::vector<OpInfo>& ops) {
  using K = ParamKind;
  const auto rule = [](Prim op) -> InferRule {
    return [op](const std::vector<ValueType>& ins, const Params& params, const Mesh&) { return reduction(op, ins, params); };
  };
  for (const auto& [id, kernel] : {std::pair{Prim::sum, &reduction_kernel<weft::sum>},
                                    std::pair{Prim::mean, &reduction_kernel<weft::mean>}}) {
    ops.push_back({.id = id, .min_inputs = 1, .max_inputs = 1,
                   .params = {{"axes", K::ints, kOptional}, {"keepdims", K::boolean, kOptional}}, .infer = rule(id),
                   .kernel = kernel, .vjp = sum_mean_vjp, .jvp = linear_jvp, .batch = reduction_batch});
  }
  for (const auto& [id, kernel] : {std::pair{Prim::max, &reduction_kernel<weft::max>},
                                    std::pair{Prim::min, &reduction_kernel<weft::min>}}) {
    ops.push_back({.id = id, .min_inputs = 1, .max_inputs = 1,
                   .params = {{"axes", K::ints, kOptional}, {"keepdims", K::boolean, kOptional}}, .infer = rule(id),
                   .kernel = kernel, .vjp = max_min_vjp, .jvp = max_min_jvp, .batch = reduction_batch});
  }
  for (const auto& [id, kernel] : {std::pair{Prim::argmax, &arg_reduction_kernel<weft::argmax>},
                                    std::pair{Prim::argmin, &arg_reduction_kernel<weft::argmin>}}) {
    ops.push_back({.id = id, .min_inputs = 1, .max_inputs = 1,
                   .params = {{"axis", K::integer, kOptional}, {"keepdims", K::boolean, kOptional}},
                   .infer = arg_reduction, .kernel = kernel, .batch = arg_reduction_batch});
  }
  ops.push_back({.id = Prim::logsumexp, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axis", K::integer}, {"keepdims", K::boolean, kOptional}}, .infer = logsumexp,
                 .kernel = logsumexp_kernel, .vjp = logsumexp_vjp, .jvp = logsumexp_jvp,
                 .batch = shifted_axes_batch});
  ops.push_back({.id = Prim::cumsum, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axis", K::integer}, {"reverse", K::boolean, kOptional}}, .infer = cumulative,
                 .kernel = cumulative_kernel<detail::Cumulative::sum>, .vjp = cumsum_vjp, .jvp = linear_jvp,
                 .batch = shifted_axes_batch});
  ops.push_back({.id = Prim::cumprod, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axis", K::integer}, {"reverse", K::boolean, kOptional}}, .infer = cumulative,
                 .kernel = cumulative_kernel<detail::Cumulative::product>, .vjp = cumprod_vjp, .jvp = cumprod_jvp,
                 .batch = shifted_axes_batch});
}

}  // namespace weft::program
