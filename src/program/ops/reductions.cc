// The reductions: sum, mean, max, min, argmax, argmin and logsumexp. Each primitive's type rule (numpy's
// shapes, JAX's dtypes), VJP, JVP and batching rule side by side, by JAX's rules (jax/_src/lax/lax.py).
#include "array/reduction_dtypes.hpp"
#include "program/op_registry.hpp"
#include "program/rule_kit.hpp"

namespace weft::program {
namespace {

// Which axes an `axes` parameter reduces (every axis when absent), each checked once.
std::vector<bool> checked_reduced_axes(const ValueType& in, const Params& params) {
  std::vector<bool> reduced(in.shape.size(), !has_param(params, "axes"));
  if (!has_param(params, "axes")) return reduced;
  for (std::int64_t axis : param_as<std::vector<std::int64_t>>(params, "axes", "a tuple of ints")) {
    const std::int64_t a = normalize_axis(axis, in.shape.size());
    if (reduced[a]) throw RuleError("axis " + std::to_string(axis) + " is reduced twice");
    reduced[a] = true;
  }
  return reduced;
}

ValueType reduce_shape(const ValueType& in, const std::vector<bool>& reduced, const Params& params) {
  const bool keepdims = has_param(params, "keepdims") && param_as<bool>(params, "keepdims", "a bool");
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
std::vector<ValueType> reduction(const std::string& op, const std::vector<ValueType>& ins, const Params& params) {
  ValueType out = reduce_shape(ins[0], checked_reduced_axes(ins[0], params), params);
  if (op == "sum") out.dtype = detail::sum_dtype(ins[0].dtype);
  if (op == "mean" && !is_floating(ins[0].dtype)) out.dtype = DType::f32;
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
  if (c.op == "mean") {
    std::int64_t n = 1;
    for (std::size_t d = 0; d < x.shape.size(); ++d) n *= reduced[d] ? x.shape[d] : 1;
    back = c.e.emit("divide", {back, c.e.scalar(static_cast<double>(n), c.e.type(back).dtype)});
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
  const ValueId hit = e.astype(e.emit("equal", {in, e.unreduce(out, x.shape, reduced)}), dt);
  return {hit, e.emit("sum", {hit}, params)};
}

void max_min_vjp(VjpContext& c) {
  const ValueType& x = c.in_types[0];
  const std::vector<bool> reduced = reduced_axes(x, c.params);
  const ArgWeights w = arg_weights(c.e, x, c.in(0), c.out(), c.params, c.dtype());
  const ValueId share = c.e.emit("divide", {c.ct(), w.count});
  c.give(0, c.e.emit("multiply", {c.e.unreduce(share, x.shape, reduced), w.hit}));
}

std::vector<ValueId> max_min_jvp(JvpContext& c) {
  const ArgWeights w = arg_weights(c.e, c.in_types[0], c.in(0), c.out(), c.params, c.dtype());
  const ValueId picked = c.e.emit("sum", {c.e.emit("multiply", {c.tangent(0), w.hit})}, c.params);
  return {c.e.emit("divide", {picked, w.count})};
}

// ---- argmax, argmin: int32 indices (no derivative). Per example along `axis` + 1; without an axis JAX takes
// the index into the flattened operand, here into each example flattened.
std::vector<ValueType> arg_reduction(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  Params as_axes;
  if (has_param(params, "axis")) {
    as_axes["axes"] = ints_param({param_as<std::int64_t>(params, "axis", "an int")});
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
  return {{c.e.reshape(c.e.emit(c.op, {flat}, params), shape)}, {true}};
}

// ---- logsumexp along `axis`: its derivative is the softmax along the axis.
std::vector<ValueType> logsumexp(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const std::int64_t axis = normalize_axis(param_as<std::int64_t>(params, "axis", "an int"), ins[0].shape.size());
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
  return e.emit("exp", {e.emit("subtract", {in, e.unreduce(out, x.shape, axis_reduced(x, params))})});
}

void logsumexp_vjp(VjpContext& c) {
  const ValueType& x = c.in_types[0];
  const ValueId soft = lse_softmax(c.e, x, c.in(0), c.out(), c.params);
  c.give(0, c.e.emit("multiply", {c.e.unreduce(c.ct(), x.shape, axis_reduced(x, c.params)), soft}));
}

std::vector<ValueId> logsumexp_jvp(JvpContext& c) {
  const ValueType& x = c.in_types[0];
  const ValueId soft = lse_softmax(c.e, x, c.in(0), c.out(), c.params);
  Params sum{{"axes", ints_param({axis_param(c.params, x.shape.size())})}};
  if (c.params.contains("keepdims")) sum["keepdims"] = c.params.at("keepdims");
  return {c.e.emit("sum", {c.e.emit("multiply", {soft, c.tangent(0)})}, sum)};
}

}  // namespace

void register_reduction_ops(std::vector<OpInfo>& ops) {
  const auto rule = [](const char* name) -> InferRule {
    const std::string op = name;
    return [op](const std::vector<ValueType>& ins, const Params& params, const Mesh&) { return reduction(op, ins, params); };
  };
  for (const char* name : {"sum", "mean"}) {
    ops.push_back({name, 1, 1, {}, {"axes", "keepdims"}, false, rule(name), sum_mean_vjp, linear_jvp, reduction_batch});
  }
  for (const char* name : {"max", "min"}) {
    ops.push_back({name, 1, 1, {}, {"axes", "keepdims"}, false, rule(name), max_min_vjp, max_min_jvp, reduction_batch});
  }
  for (const char* name : {"argmax", "argmin"}) {
    ops.push_back({name, 1, 1, {}, {"axis", "keepdims"}, false, arg_reduction, nullptr, nullptr, arg_reduction_batch});
  }
  ops.push_back({"logsumexp", 1, 1, {"axis"}, {"keepdims"}, false, logsumexp, logsumexp_vjp, logsumexp_jvp,
                 shifted_axes_batch});
}

}  // namespace weft::program
