// The ops that move elements without arithmetic: reshape, transpose, broadcast_to, concatenate and slice.
// Each primitive's type rule (numpy's shapes), VJP, JVP and batching rule side by side, by JAX's rules
// (jax/_src/lax/lax.py, slicing.py). All are linear, so each JVP is the op itself on the tangents.
#include <algorithm>
#include <numeric>

#include "array/strided_copy.hpp"
#include "program/op_registry.hpp"
#include "program/rule_kit.hpp"
#include "weft/ops.hpp"

namespace weft::program {
namespace {

std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string text = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(dims[i]);
  return text + (dims.size() == 1 ? ",)" : ")");
}

// ---- reshape (one -1 dimension inferred) -------------------------------------------------------------------
std::vector<ValueType> reshape(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  std::vector<std::int64_t> shape = param<std::vector<std::int64_t>>(params, "shape");
  const auto unknown = std::count(shape.begin(), shape.end(), -1);
  if (unknown > 1) throw RuleError("shape " + dims_text(shape) + " has more than one -1");
  std::int64_t known = 1;
  for (std::int64_t d : shape) {
    if (d < -1) throw RuleError("shape " + dims_text(shape) + " has a negative dimension");
    if (d != -1) known *= d;
  }
  const std::int64_t total = ins[0].num_elements();
  if (unknown == 1 && known != 0 && total % known == 0) {
    std::replace(shape.begin(), shape.end(), std::int64_t{-1}, total / known);
  }
  if (std::count(shape.begin(), shape.end(), -1) > 0 ||
      std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>()) != total) {
    throw RuleError("cannot reshape " + type_text(ins[0]) + " (" + std::to_string(total) + " elements) to " +
                    dims_text(param<std::vector<std::int64_t>>(params, "shape")));
  }
  return {ValueType{ins[0].dtype, shape, ins[0].varying}};
}

void reshape_vjp(VjpContext& c) { c.give(0, c.e.reshape(c.ct(), c.in_types[0].shape)); }

// Each example reshaped to its own result's shape (the -1 resolved), behind the batch axis.
Batched reshape_batch(BatchContext& c) {
  std::vector<std::int64_t> shape = c.out_types[0].shape;
  shape.insert(shape.begin(), c.size);
  return {{c.e.reshape(c.in(0), shape)}, {true}};
}

// ---- transpose (numpy's default reverses the axes) ----------------------------------------------------------
std::vector<std::int64_t> perm_of(const Params& params, std::size_t rank) {
  std::vector<std::int64_t> perm(rank);
  std::iota(perm.rbegin(), perm.rend(), std::int64_t{0});
  if (has_param(params, "perm")) perm = param<std::vector<std::int64_t>>(params, "perm");
  return perm;
}

std::vector<ValueType> transpose(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const std::size_t rank = ins[0].shape.size();
  const std::vector<std::int64_t> perm = perm_of(params, rank);
  std::vector<std::int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted.size() != rank || sorted[i] != static_cast<std::int64_t>(i)) {
      throw RuleError("perm " + dims_text(perm) + " is not a permutation of the " + std::to_string(rank) +
                      " axes of " + type_text(ins[0]));
    }
  }
  if (perm.size() != rank) throw RuleError("perm " + dims_text(perm) + " does not match rank " + std::to_string(rank));
  ValueType out = ins[0];
  for (std::size_t i = 0; i < rank; ++i) out.shape[i] = ins[0].shape[perm[i]];
  return {out};
}

void transpose_vjp(VjpContext& c) {
  const std::vector<std::int64_t> perm = perm_of(c.params, c.in_types[0].shape.size());
  std::vector<std::int64_t> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
  c.give(0, c.e.transpose(c.ct(), inverse));
}

Batched transpose_batch(BatchContext& c) {
  std::vector<std::int64_t> perm{0};
  for (const std::int64_t p : perm_of(c.params, c.in_types[0].shape.size())) perm.push_back(p + 1);
  return {{c.e.transpose(c.in(0), perm)}, {true}};
}

// ---- broadcast_to (numpy's rules) -----------------------------------------------------------------------------
std::vector<ValueType> broadcast_to(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const auto& shape = param<std::vector<std::int64_t>>(params, "shape");
  const ValueType& in = ins[0];
  bool ok = shape.size() >= in.shape.size();
  for (std::size_t i = 0; ok && i < in.shape.size(); ++i) {
    const std::int64_t target = shape[shape.size() - in.shape.size() + i];
    ok = in.shape[i] == target || in.shape[i] == 1;
  }
  if (!ok) throw RuleError("cannot broadcast " + type_text(in) + " to " + dims_text(shape));
  return {ValueType{in.dtype, shape, in.varying}};
}

void broadcast_to_vjp(VjpContext& c) { c.give(0, c.ct()); }  // the machinery sums the broadcast axes back

// Each example given the target's rank behind the batch axis (unit axes), then broadcast.
Batched broadcast_to_batch(BatchContext& c) {
  std::vector<std::int64_t> shape = c.out_types[0].shape;
  shape.insert(shape.begin(), c.size);
  return {{c.e.broadcast_to(c.aligned(0, c.out_types[0].shape.size()), shape)}, {true}};
}

// ---- concatenate (numpy's: equal dtypes after promotion, equal shapes but along `axis`) ---------------------------
std::vector<ValueType> concatenate(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  if (ins.front().shape.empty()) throw RuleError("zero-dimensional arrays cannot be concatenated");
  const std::int64_t axis = normalize_axis(param<std::int64_t>(params, "axis"), ins.front().shape.size());
  ValueType out = ins.front();
  out.shape[axis] = 0;
  for (const ValueType& in : ins) {
    std::vector<std::int64_t> a = in.shape;
    std::vector<std::int64_t> b = ins.front().shape;
    if (a.size() == b.size()) a[axis] = b[axis] = 0;
    if (a != b) {
      throw RuleError("all inputs must have the same shape but along axis " + std::to_string(axis) + ": " +
                      type_text(ins.front()) + " and " + type_text(in));
    }
    out.shape[axis] += in.shape[axis];
    out.dtype = promote_types(out.dtype, in.dtype);
  }
  out.varying = union_varying(ins);
  return {out};
}

// Each input's cotangent is its part of the result's: a slice along the axis.
void concatenate_vjp(VjpContext& c) {
  const auto axis = static_cast<std::size_t>(axis_param(c.params, c.in_types[0].shape.size()));
  const std::vector<std::int64_t> shape = c.e.type(c.ct()).shape;
  std::int64_t at = 0;
  for (std::size_t k = 0; k < c.ins.size(); ++k) {
    const std::int64_t n = c.in_types[k].shape[axis];
    std::vector<std::int64_t> start(shape.size(), 0), limit = shape, step(shape.size(), 1);
    start[axis] = at;
    limit[axis] = at + n;
    c.give(k, c.e.emit(Prim::slice, {c.ct()},
                       {{"start", ints_param(start)}, {"limit", ints_param(limit)}, {"step", ints_param(step)}}));
    at += n;
  }
}

// The unbatched inputs broadcast along the batch axis; the axis shifted past it.
Batched concatenate_batch(BatchContext& c) {
  std::vector<ValueId> ins;
  for (std::size_t k = 0; k < c.ins.size(); ++k) ins.push_back(c.materialized(k));
  const std::int64_t axis = axis_param(c.params, c.in_types[0].shape.size()) + 1;
  return {{c.e.emit(Prim::concatenate, ins, {{"axis", int_param(axis)}})}, {true}};
}

// ---- slice: Python's basic slicing per axis, indices already normalised (slice.indices): elements start,
// start+step, ... strictly before limit (after it for a negative step).
std::vector<ValueType> slice(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const auto& start = param<std::vector<std::int64_t>>(params, "start");
  const auto& limit = param<std::vector<std::int64_t>>(params, "limit");
  const auto& step = param<std::vector<std::int64_t>>(params, "step");
  const std::size_t rank = ins[0].shape.size();
  if (start.size() != rank || limit.size() != rank || step.size() != rank) {
    throw RuleError("start, limit and step need one entry per axis of " + type_text(ins[0]));
  }
  ValueType out = ins[0];
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t n = ins[0].shape[d];
    if (step[d] == 0) throw RuleError("slice step cannot be zero");
    const bool ok = step[d] > 0 ? (start[d] >= 0 && start[d] <= n && limit[d] >= 0 && limit[d] <= n)
                                : (start[d] >= -1 && start[d] < n && limit[d] >= -1 && limit[d] < n);
    if (!ok) throw RuleError("slice of axis " + std::to_string(d) + " is out of bounds for " + type_text(ins[0]));
    const std::int64_t span = step[d] > 0 ? limit[d] - start[d] : start[d] - limit[d];
    const std::int64_t s = step[d] > 0 ? step[d] : -step[d];
    out.shape[d] = span <= 0 ? 0 : (span + s - 1) / s;
  }
  return {out};
}

// A slice's cotangent is g scattered back to the positions it read, zeros elsewhere: axis by axis, g's
// elements spread `step` apart (each followed by step - 1 zeros), then padded with zeros before the first
// position read and after the last. A negative step reads the same positions in reverse order, so g is
// reversed first and placed as for the positive step from the lowest position read.
void slice_vjp(VjpContext& c) {
  const auto& start = std::get<std::vector<std::int64_t>>(c.params.at("start"));
  const auto& step = std::get<std::vector<std::int64_t>>(c.params.at("step"));
  const ValueType& x = c.in_types[0];
  const std::vector<std::int64_t> out_shape = c.e.type(c.ct()).shape;
  if (std::count(out_shape.begin(), out_shape.end(), std::int64_t{0}) > 0) {
    c.give(0, c.e.zeros(ValueType{c.e.type(c.ct()).dtype, x.shape, {}}));  // an empty slice read nothing
    return;
  }
  ValueId placed = c.ct();
  for (std::size_t d = 0; d < x.shape.size(); ++d) {
    const std::int64_t m = out_shape[d];
    const std::int64_t s = step[d] > 0 ? step[d] : -step[d];
    const std::int64_t first = step[d] > 0 ? start[d] : start[d] - (m - 1) * s;  // the lowest position read
    if (step[d] < 0) placed = c.e.reverse_axis(placed, d);
    placed = c.e.spread_axis(placed, d, s, x.shape[d] - first);
    placed = c.e.pad_axis(placed, d, first, x.shape[d] - first - c.e.type(placed).shape[d]);
  }
  c.give(0, placed);
}

// The batch axis taken whole.
Batched slice_batch(BatchContext& c) {
  Params params = c.params;
  for (const auto& [name, value] : {std::pair<const char*, std::int64_t>{"start", 0}, {"limit", c.size}, {"step", 1}}) {
    std::vector<std::int64_t> v = std::get<std::vector<std::int64_t>>(params.at(name));
    v.insert(v.begin(), value);
    params[name] = ints_param(v);
  }
  return {{c.e.emit(Prim::slice, {c.in(0)}, params)}, {true}};
}

// ---- kernels ----------------------------------------------------------------------------------------------

using Ins = std::vector<Array>;
using Outs = std::vector<Array>;

Outs reshape_kernel(const Ins& in, const Params& p) { return {in[0].reshape(param_ints(p, "shape"))}; }

Outs transpose_kernel(const Ins& in, const Params& p) {
  const auto* perm = param_if<std::vector<std::int64_t>>(p, "perm");
  if (perm == nullptr) return {weft::transpose(in[0])};
  return {weft::transpose(in[0], std::vector<int>(perm->begin(), perm->end()))};
}

Outs broadcast_to_kernel(const Ins& in, const Params& p) {
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

// The parts promote to a common dtype first (Array::concatenate does not promote on its own), as the type rule.
Outs concatenate_kernel(const Ins& in, const Params& p) {
  DType dtype = in.front().dtype();
  for (const Array& a : in) dtype = promote_types(dtype, a.dtype());
  std::vector<Array> parts;
  for (const Array& a : in) parts.push_back(a.astype(dtype));
  return {Array::concatenate(parts, static_cast<int>(param_int(p, "axis")))};
}

Outs slice_kernel(const Ins& in, const Params& p) {
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

}  // namespace

void register_shape_ops(std::vector<OpInfo>& ops) {
  using K = ParamKind;
  ops.push_back({.id = Prim::reshape, .min_inputs = 1, .max_inputs = 1, .params = {{"shape", K::ints}},
                 .infer = reshape, .kernel = reshape_kernel, .vjp = reshape_vjp, .jvp = linear_jvp,
                 .batch = reshape_batch});
  ops.push_back({.id = Prim::transpose, .min_inputs = 1, .max_inputs = 1, .params = {{"perm", K::ints, kOptional}},
                 .infer = transpose, .kernel = transpose_kernel, .vjp = transpose_vjp, .jvp = linear_jvp,
                 .batch = transpose_batch});
  ops.push_back({.id = Prim::broadcast_to, .min_inputs = 1, .max_inputs = 1, .params = {{"shape", K::ints}},
                 .infer = broadcast_to, .kernel = broadcast_to_kernel, .vjp = broadcast_to_vjp, .jvp = linear_jvp,
                 .batch = broadcast_to_batch});
  ops.push_back({.id = Prim::concatenate, .min_inputs = 1, .max_inputs = -1, .params = {{"axis", K::integer}},
                 .infer = concatenate, .kernel = concatenate_kernel, .vjp = concatenate_vjp, .jvp = linear_jvp,
                 .batch = concatenate_batch});
  ops.push_back({.id = Prim::slice, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"start", K::ints}, {"limit", K::ints}, {"step", K::ints}}, .infer = slice,
                 .kernel = slice_kernel, .vjp = slice_vjp, .jvp = linear_jvp, .batch = slice_batch});
}

}  // namespace weft::program
