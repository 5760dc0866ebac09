// Inference for the ops that move or reduce dimensions: reductions, reshape, transpose, broadcast_to, matmul
// and the softmax family. Shapes follow weft::ops (numpy semantics), dtypes JAX's.
#include <algorithm>
#include <numeric>

#include "array/reduction_dtypes.hpp"
#include "op_registry.hpp"

namespace weft::program {
namespace {

std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string text = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(dims[i]);
  return text + (dims.size() == 1 ? ",)" : ")");
}

// A possibly negative axis of a rank-`rank` value, made non-negative.
std::int64_t normalize_axis(std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) {
    throw RuleError("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + r : axis;
}

std::vector<bool> reduced_axes(const ValueType& in, const Params& params) {
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
  ValueType out = reduce_shape(ins[0], reduced_axes(ins[0], params), params);
  if (op == "sum") out.dtype = detail::sum_dtype(ins[0].dtype);
  if (op == "mean" && !is_floating(ins[0].dtype)) out.dtype = DType::f32;
  return {out};
}

std::vector<ValueType> arg_reduction(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  Params as_axes;
  if (has_param(params, "axis")) {
    as_axes["axes"] = ints_param({param_as<std::int64_t>(params, "axis", "an int")});
  }
  if (has_param(params, "keepdims")) as_axes["keepdims"] = params.at("keepdims");
  ValueType out = reduce_shape(ins[0], reduced_axes(ins[0], as_axes), as_axes);
  out.dtype = DType::i32;
  return {out};
}

std::vector<ValueType> reshape(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  std::vector<std::int64_t> shape = param_as<std::vector<std::int64_t>>(params, "shape", "a tuple of ints");
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
                    dims_text(param_as<std::vector<std::int64_t>>(params, "shape", "a tuple of ints")));
  }
  return {ValueType{ins[0].dtype, shape, ins[0].varying}};
}

std::vector<ValueType> transpose(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const std::size_t rank = ins[0].shape.size();
  std::vector<std::int64_t> perm(rank);
  std::iota(perm.rbegin(), perm.rend(), std::int64_t{0});  // numpy's default: reverse the axes
  if (has_param(params, "perm")) perm = param_as<std::vector<std::int64_t>>(params, "perm", "a tuple of ints");
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

std::vector<ValueType> broadcast_to(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const auto& shape = param_as<std::vector<std::int64_t>>(params, "shape", "a tuple of ints");
  const ValueType& in = ins[0];
  bool ok = shape.size() >= in.shape.size();
  for (std::size_t i = 0; ok && i < in.shape.size(); ++i) {
    const std::int64_t target = shape[shape.size() - in.shape.size() + i];
    ok = in.shape[i] == target || in.shape[i] == 1;
  }
  if (!ok) throw RuleError("cannot broadcast " + type_text(in) + " to " + dims_text(shape));
  return {ValueType{in.dtype, shape, in.varying}};
}

// numpy matmul: 1-D operands gain and lose a unit dimension; leading (batch) dimensions broadcast. The
// optional transpose_a / transpose_b (weft::MatmulOptions) swap an operand's last two axes first.
std::vector<ValueType> matmul(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  std::vector<std::int64_t> a = ins[0].shape;
  std::vector<std::int64_t> b = ins[1].shape;
  if (a.empty() || b.empty()) throw RuleError("matmul needs operands of rank 1 or more");
  for (auto [name, shape] : {std::pair{"transpose_a", &a}, std::pair{"transpose_b", &b}}) {
    if (!has_param(params, name) || !param_as<bool>(params, name, "a bool")) continue;
    if (shape->size() < 2) throw RuleError(std::string(name) + " needs an operand of rank 2 or more");
    std::swap((*shape)[shape->size() - 1], (*shape)[shape->size() - 2]);
  }
  const bool a_vector = a.size() == 1;
  const bool b_vector = b.size() == 1;
  if (a_vector) a.insert(a.begin(), 1);
  if (b_vector) b.push_back(1);
  if (a.back() != b[b.size() - 2]) {
    throw RuleError("contracting dimensions differ: " + type_text(ins[0]) + " @ " + type_text(ins[1]));
  }
  ValueType batch_a{DType::f32, {a.begin(), a.end() - 2}, {}};
  ValueType batch_b{DType::f32, {b.begin(), b.end() - 2}, {}};
  std::vector<std::int64_t> shape;
  if (batch_a.shape.empty()) {
    shape = batch_b.shape;
  } else if (batch_b.shape.empty()) {
    shape = batch_a.shape;
  } else {
    shape = broadcast_shapes({batch_a, batch_b});
  }
  if (!a_vector) shape.push_back(a[a.size() - 2]);
  if (!b_vector) shape.push_back(b.back());
  return {ValueType{promote_types(ins[0].dtype, ins[1].dtype), shape, union_varying(ins)}};
}

std::vector<ValueType> along_axis(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  if (has_param(params, "axis")) normalize_axis(param_as<std::int64_t>(params, "axis", "an int"), ins[0].shape.size());
  ValueType out = ins[0];
  if (!is_floating(out.dtype)) out.dtype = DType::f32;
  return {out};
}

// layer_norm(x, scale, bias, eps): x (..., d) of a float dtype, scale and bias (d), eps a scalar; the result
// has x's type, varying over every operand's axes. layer_norm_vjp(x, scale, dy, eps) gives the cotangents
// (dx like x; dscale and dbias like scale).
void check_layer_norm(const std::vector<ValueType>& ins, const char* second_vector) {
  const ValueType& x = ins[0];
  if (x.shape.empty()) throw RuleError("x must have at least one dimension");
  if (!is_floating(x.dtype)) throw RuleError("x must be of a float dtype");
  const std::int64_t d = x.shape.back();
  if (ins[1].shape != std::vector<std::int64_t>{d}) {
    throw RuleError("scale must have shape [" + std::to_string(d) + "], the last dimension of x");
  }
  if (std::string(second_vector) == "bias" && ins[2].shape != std::vector<std::int64_t>{d}) {
    throw RuleError("bias must have shape [" + std::to_string(d) + "], the last dimension of x");
  }
  if (!ins[3].shape.empty()) throw RuleError("eps must be a scalar");
}

std::vector<ValueType> layer_norm(const std::vector<ValueType>& ins, const Params&, const Mesh&) {
  check_layer_norm(ins, "bias");
  return {ValueType{ins[0].dtype, ins[0].shape, union_varying(ins)}};
}

std::vector<ValueType> layer_norm_vjp(const std::vector<ValueType>& ins, const Params&, const Mesh&) {
  check_layer_norm(ins, "dy");
  if (ins[2].shape != ins[0].shape) throw RuleError("dy must have x's shape");
  const std::vector<std::string> varying = union_varying(ins);
  const ValueType vec{ins[0].dtype, ins[1].shape, varying};
  return {ValueType{ins[0].dtype, ins[0].shape, varying}, vec, vec};
}

// numpy.concatenate: equal dtypes after promotion, equal shapes but along `axis`.
std::vector<ValueType> concatenate(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  if (ins.front().shape.empty()) throw RuleError("zero-dimensional arrays cannot be concatenated");
  const std::int64_t axis = normalize_axis(param_as<std::int64_t>(params, "axis", "an int"), ins.front().shape.size());
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

// Python's basic slicing per axis, indices already normalised (slice.indices): elements start, start+step,
// ... strictly before limit (after it for a negative step).
std::vector<ValueType> slice(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const auto& start = param_as<std::vector<std::int64_t>>(params, "start", "a tuple of ints");
  const auto& limit = param_as<std::vector<std::int64_t>>(params, "limit", "a tuple of ints");
  const auto& step = param_as<std::vector<std::int64_t>>(params, "step", "a tuple of ints");
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

// numpy.take along `axis` (of the flattened x when absent): x.shape[:axis] + indices.shape + x.shape[axis+1:].
std::vector<ValueType> take(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  if (!is_integer(ins[1].dtype)) throw RuleError("indices must be integers, not " + short_dtype_name(ins[1].dtype));
  ValueType out{ins[0].dtype, {}, union_varying(ins)};
  if (!has_param(params, "axis")) {
    out.shape = ins[1].shape;
    return {out};
  }
  const std::int64_t axis = normalize_axis(param_as<std::int64_t>(params, "axis", "an int"), ins[0].shape.size());
  out.shape.assign(ins[0].shape.begin(), ins[0].shape.begin() + axis);
  out.shape.insert(out.shape.end(), ins[1].shape.begin(), ins[1].shape.end());
  out.shape.insert(out.shape.end(), ins[0].shape.begin() + axis + 1, ins[0].shape.end());
  return {out};
}

std::vector<ValueType> one_hot(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  if (!is_integer(ins[0].dtype)) throw RuleError("labels must be integers, not " + short_dtype_name(ins[0].dtype));
  const std::int64_t n = param_as<std::int64_t>(params, "num_classes", "an int");
  if (n < 0) throw RuleError("num_classes must be >= 0, got " + std::to_string(n));
  ValueType out = ins[0];
  out.shape.push_back(n);
  out.dtype = param_as<DType>(params, "dtype", "a dtype");
  return {out};
}

std::vector<ValueType> logsumexp(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const std::int64_t axis = normalize_axis(param_as<std::int64_t>(params, "axis", "an int"), ins[0].shape.size());
  Params as_axes{{"axes", ints_param({axis})}};
  if (has_param(params, "keepdims")) as_axes["keepdims"] = params.at("keepdims");
  ValueType out = reduce_shape(ins[0], reduced_axes(ins[0], as_axes), as_axes);
  if (!is_floating(out.dtype)) out.dtype = DType::f32;
  return {out};
}

}  // namespace

void register_shape_ops(std::vector<OpInfo>& ops) {
  for (const char* name : {"sum", "mean", "max", "min"}) {
    const std::string op = name;
    ops.push_back({op, 1, 1, {}, {"axes", "keepdims"}, false,
                   [op](const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
                     return reduction(op, ins, params);
                   }});
  }
  for (const char* name : {"argmax", "argmin"}) {
    ops.push_back({name, 1, 1, {}, {"axis", "keepdims"}, false, arg_reduction});
  }
  ops.push_back({"reshape", 1, 1, {"shape"}, {}, false, reshape});
  ops.push_back({"transpose", 1, 1, {}, {"perm"}, false, transpose});
  ops.push_back({"broadcast_to", 1, 1, {"shape"}, {}, false, broadcast_to});
  ops.push_back({"matmul", 2, 2, {}, {"transpose_a", "transpose_b"}, false, matmul});
  for (const char* name : {"softmax", "log_softmax"}) ops.push_back({name, 1, 1, {}, {"axis"}, false, along_axis});
  ops.push_back({"logsumexp", 1, 1, {"axis"}, {"keepdims"}, false, logsumexp});
  ops.push_back({"concatenate", 1, -1, {"axis"}, {}, false, concatenate});
  ops.push_back({"slice", 1, 1, {"start", "limit", "step"}, {}, false, slice});
  ops.push_back({"take", 2, 2, {}, {"axis"}, false, take});
  ops.push_back({"one_hot", 1, 1, {"num_classes", "dtype"}, {}, false, one_hot});
  ops.push_back({"layer_norm", 4, 4, {}, {}, false, layer_norm});
  ops.push_back({"layer_norm_vjp", 4, 4, {}, {}, false, layer_norm_vjp});
}

}  // namespace weft::program
