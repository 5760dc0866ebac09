// The indexing ops: take (numpy's, along an axis or of the flattened operand) and one_hot. Each primitive's
// type rule, VJP, JVP and batching rule side by side, by JAX's rules (jax/_src/lax/slicing.py: a gather is
// linear in its operand, its transpose a scatter-add; the indices are integers and get no derivative).
#include <numeric>

#include "program/op_registry.hpp"
#include "program/rule_kit.hpp"
#include "weft/error.hpp"
#include "weft/ops.hpp"

namespace weft::program {
namespace {

// ---- take: x.shape[:axis] + indices.shape + x.shape[axis+1:] (indices.shape without an axis).
std::vector<ValueType> take(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  if (!is_integer(ins[1].dtype)) throw RuleError("indices must be integers, not " + short_dtype_name(ins[1].dtype));
  ValueType out{ins[0].dtype, {}, union_varying(ins)};
  if (!has_param(params, "axis")) {
    if (has_param(params, "per_example")) throw RuleError("per_example needs an axis");
    out.shape = ins[1].shape;
    return {out};
  }
  const std::int64_t axis = normalize_axis(param<std::int64_t>(params, "axis"), ins[0].shape.size());
  if (has_param(params, "per_example")) {
    // (take's batching rule: B examples' gathers as one, each from its own block of x's axis)
    const std::int64_t b = param<std::int64_t>(params, "per_example");
    if (b <= 0) throw RuleError("per_example must be positive, got " + std::to_string(b));
    if (ins[1].shape.empty() || ins[1].shape[0] != b) {
      throw RuleError("per_example=" + std::to_string(b) + " needs indices with one row per example, got " +
                      type_text(ins[1]));
    }
    if (ins[0].shape[axis] % b != 0) {
      throw RuleError("per_example=" + std::to_string(b) + ": axis " + std::to_string(axis) + " of size " +
                      std::to_string(ins[0].shape[axis]) + " is not " + std::to_string(b) + " equal blocks");
    }
  }
  out.shape.assign(ins[0].shape.begin(), ins[0].shape.begin() + axis);
  out.shape.insert(out.shape.end(), ins[1].shape.begin(), ins[1].shape.end());
  out.shape.insert(out.shape.end(), ins[0].shape.begin() + axis + 1, ins[0].shape.end());
  return {out};
}

std::int64_t product(const std::vector<std::int64_t>& dims, std::size_t from, std::size_t to) {
  return std::accumulate(dims.begin() + static_cast<std::ptrdiff_t>(from), dims.begin() + static_cast<std::ptrdiff_t>(to),
                         std::int64_t{1}, std::multiplies<>());
}

// Indices into an axis of n made non-negative (take counts negative ones from the end), in int32 at least
// (n, or an offset added to them, may not fit an int8).
ValueId wrapped_indices(Emitter& e, ValueId indices, std::int64_t n) {
  const DType it = e.type(indices).dtype == DType::i64 ? DType::i64 : DType::i32;
  const ValueId i = e.astype(indices, it);
  return e.emit(Prim::where, {e.emit(Prim::less, {i, e.scalar(0, it)}),
                              e.emit(Prim::add, {i, e.scalar(static_cast<double>(n), it)}), i});
}

// A per_example take's indices [B, ...] (each into its example's block of n) as positions in the whole axis:
// made non-negative in the block, then offset by the example's block.
ValueId stacked_indices(Emitter& e, ValueId indices, std::int64_t n, std::int64_t examples) {
  const ValueId idx = wrapped_indices(e, indices, n);
  std::vector<std::int64_t> column(e.type(idx).shape.size(), 1);
  column[0] = examples;
  std::vector<std::int64_t> starts(static_cast<std::size_t>(examples));
  for (std::int64_t i = 0; i < examples; ++i) starts[static_cast<std::size_t>(i)] = i * n;
  const ValueId offsets = e.reshape(e.astype(e.constant(Array::from_vector(starts)), e.type(idx).dtype), column);
  return e.emit(Prim::add, {idx, offsets});
}

// take's cotangent for x is the scatter-add of g into zeros at the indices (repeated ones summed):
// one_hot(indices) [K, n] contracted with g [A, K, B] over K, A and B being x's axes before and after the
// taken one (x flattened without an axis). A per_example take's indices are made positions in the whole axis.
void take_vjp(VjpContext& c) {
  Emitter& e = c.e;
  const ValueType& x = c.in_types[0];
  const bool has_axis = c.params.contains("axis");
  const std::int64_t axis = has_axis ? axis_param(c.params, x.shape.size()) : 0;
  const std::vector<std::int64_t> src = has_axis ? x.shape : std::vector<std::int64_t>{x.num_elements()};
  const auto a = static_cast<std::size_t>(axis);
  const std::int64_t n = src[a], before = product(src, 0, a), after = product(src, a + 1, src.size());
  const std::int64_t k = c.in_types[1].num_elements();
  const DType dt = e.type(c.ct()).dtype;
  const std::int64_t examples = param_int(c.params, "per_example", 0);
  const ValueId idx = examples > 0 ? stacked_indices(e, c.in(1), n / examples, examples) : wrapped_indices(e, c.in(1), n);
  const ValueId hot =
      e.reshape(e.emit(Prim::one_hot, {idx}, {{"num_classes", int_param(n)}, {"dtype", Param{dt}}}), {k, n});
  const std::vector<std::int64_t> rows = before == 1 ? std::vector<std::int64_t>{k, after} : std::vector<std::int64_t>{before, k, after};
  const ValueId ct = e.emit(Prim::matmul, {hot, e.reshape(c.ct(), rows)}, {{"transpose_a", bool_param(true)}});
  c.give(0, e.reshape(ct, x.shape));
}

// Linear in x: the same gather of x's tangent.
std::vector<ValueId> take_jvp(JvpContext& c) { return {c.e.emit(Prim::take, {c.tangent(0), c.in(1)}, c.params)}; }

// A per_example take (made by an earlier vmap) batched again: with shared indices, the same take along
// axis + 1; with batched indices, both batch axes merged into one of B2 * B examples (x's outer batch axis
// moved next to its blocks and merged into them, the indices' two leading axes merged), then split again.
Batched per_example_again(BatchContext& c) {
  Emitter& e = c.e;
  const std::int64_t axis = axis_param(c.params, c.in_types[0].shape.size());
  const std::int64_t inner = param_int(c.params, "per_example");
  Params params = c.params;
  if (!c.batched[1]) {
    params["axis"] = int_param(axis + 1);
    return {{e.emit(Prim::take, {c.in(0), c.in(1)}, params)}, {true}};
  }
  const std::int64_t b = c.size;
  std::vector<std::int64_t> xs = c.in_types[0].shape;  // [pre..., B * n, post...]
  xs[static_cast<std::size_t>(axis)] *= b;
  const ValueId x = e.reshape(e.moveaxis(c.materialized(0), 0, axis), xs);
  std::vector<std::int64_t> is = c.in_types[1].shape;  // [B, ids...]
  is[0] *= b;
  params["per_example"] = int_param(b * inner);
  const ValueId out = e.emit(Prim::take, {x, e.reshape(c.in(1), is)}, params);  // [pre, B2 * B, ids, post]
  std::vector<std::int64_t> split = e.type(out).shape;
  split[static_cast<std::size_t>(axis)] = inner;
  split.insert(split.begin() + axis, b);
  return {{e.moveaxis(e.reshape(out, split), axis, 0)}, {true}};
}

// x batched, indices shared: the gather along axis + 1 (of each example flattened without an axis).
// Indices batched: each example's gather of its own x (or the shared one), as one gather from the examples'
// x stacked along the taken axis, each example's indices into its own block of the stack (per_example): the
// kernel checks each against its block, so an index out of range is refused naming its example and its own
// value, as that example's run would refuse it (never read from a neighbour's block).
Batched take_batch(BatchContext& c) {
  if (has_param(c.params, "per_example")) return per_example_again(c);
  Emitter& e = c.e;
  const ValueType& x = c.in_types[0];
  const bool has_axis = c.params.contains("axis");
  const std::int64_t axis = has_axis ? axis_param(c.params, x.shape.size()) : 0;
  const std::int64_t b = c.size;
  if (!c.batched[1]) {
    const ValueId flat = has_axis ? c.in(0) : e.reshape(c.in(0), {b, x.num_elements()});
    return {{e.emit(Prim::take, {flat, c.in(1)}, {{"axis", int_param(axis + 1)}})}, {true}};
  }
  if (!c.batched[0]) {
    const ValueId out = e.emit(Prim::take, {c.in(0), c.in(1)}, c.params);  // x.shape[:axis] + [B, ...] + ...
    return {{e.moveaxis(out, axis, 0)}, {true}};
  }
  // x [B, pre..., n, post...] -> [B * n, pre..., post...]; the gather gives [B, ids..., pre..., post...], its
  // pre axes moved back in front of the ids'.
  const std::vector<std::int64_t> src = has_axis ? x.shape : std::vector<std::int64_t>{x.num_elements()};
  const auto a = static_cast<std::size_t>(axis);
  const std::int64_t n = src[a];
  std::vector<std::int64_t> rest{b * n};
  rest.insert(rest.end(), src.begin(), src.begin() + axis);
  rest.insert(rest.end(), src.begin() + axis + 1, src.end());
  ValueId stacked = has_axis ? e.moveaxis(c.in(0), axis + 1, 1) : c.in(0);
  stacked = e.reshape(stacked, rest);
  Params params{{"axis", int_param(0)}};
  if (b > 0) params["per_example"] = int_param(b);
  const ValueId out = e.emit(Prim::take, {stacked, c.in(1)}, params);
  // [B, ids (m axes), pre (a axes), post...] -> [B, pre, ids, post]
  const std::size_t m = c.in_types[1].shape.size();
  std::vector<std::int64_t> perm{0};
  for (std::size_t d = 0; d < a; ++d) perm.push_back(static_cast<std::int64_t>(1 + m + d));
  for (std::size_t d = 0; d < m; ++d) perm.push_back(static_cast<std::int64_t>(1 + d));
  for (std::size_t d = 1 + m + a; d < e.type(out).shape.size(); ++d) perm.push_back(static_cast<std::int64_t>(d));
  return {{e.transpose(out, perm)}, {true}};
}

// ---- one_hot(labels): labels.shape + (num_classes,) of `dtype`; integer labels, so no derivative.
std::vector<ValueType> one_hot(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  if (!is_integer(ins[0].dtype)) throw RuleError("labels must be integers, not " + short_dtype_name(ins[0].dtype));
  const std::int64_t n = param<std::int64_t>(params, "num_classes");
  if (n < 0) throw RuleError("num_classes must be >= 0, got " + std::to_string(n));
  ValueType out = ins[0];
  out.shape.push_back(n);
  out.dtype = param<DType>(params, "dtype");
  return {out};
}

// The classes axis is last, so batched labels give the batched result as they are.
Batched one_hot_batch(BatchContext& c) { return {c.e.emit_many(Prim::one_hot, c.ins, c.params), {true}}; }

// take with per_example=B (take's batching rule, take_batch above): `axis` holds B equal blocks and indices
// [B, ...] index their example's block (negative from its end). Made positions in the whole axis here, each
// checked against its own block, so an index out of range is named by its example and its own value.
std::vector<Array> take_per_example(const std::vector<Array>& in, const Params& p) {
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

std::vector<Array> take_kernel(const std::vector<Array>& in, const Params& p) {
  if (has_param(p, "per_example")) return take_per_example(in, p);
  return {weft::take(in[0], in[1], param_axis_if(p))};
}
std::vector<Array> one_hot_kernel(const std::vector<Array>& in, const Params& p) {
  return {weft::one_hot(in[0], static_cast<int>(param_int(p, "num_classes")), param_dtype(p))};
}

}  // namespace

void register_indexing_ops(std::vector<OpInfo>& ops) {
  using K = ParamKind;
  ops.push_back({.id = Prim::take, .min_inputs = 2, .max_inputs = 2, .params = {{"axis", K::integer, kOptional}, {"per_example", K::integer, kOptional}},
                 .infer = take, .kernel = take_kernel, .vjp = take_vjp, .jvp = take_jvp, .batch = take_batch});
  ops.push_back({.id = Prim::one_hot, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"num_classes", K::integer}, {"dtype", K::dtype}}, .infer = one_hot,
                 .kernel = one_hot_kernel, .jvp = zero_jvp, .batch = one_hot_batch});
}

}  // namespace weft::program
