// The rules' shared algebra (rule_kit.hpp): each helper a few registry ops, so what a rule emits is verified,
// fused and run like any program.
#include "rule_kit.hpp"

#include <algorithm>
#include <numeric>

#include "op_registry.hpp"

namespace weft::program {

ValueId Emitter::emit(Prim op, const std::vector<ValueId>& ins, Params params) {
  return b_.emit1(op_info(op), ins, std::move(params), source_);
}
std::vector<ValueId> Emitter::emit_many(Prim op, const std::vector<ValueId>& ins, Params params) {
  return b_.emit(op_info(op), ins, std::move(params), source_);
}

ValueId Emitter::scalar(double v, DType dtype) { return b_.constant(Array::scalar(v, dtype)); }

ValueId Emitter::zeros(const ValueType& type) { return broadcast_to(scalar(0, type.dtype), type.shape); }

ValueId Emitter::reshape(ValueId v, std::vector<std::int64_t> shape) {
  if (type(v).shape == shape) return v;
  return emit(Prim::reshape, {v}, {{"shape", ints_param(std::move(shape))}});
}

ValueId Emitter::astype(ValueId v, DType dtype) {
  if (type(v).dtype == dtype) return v;
  return emit(Prim::astype, {v}, {{"dtype", Param{dtype}}});
}

ValueId Emitter::broadcast_to(ValueId v, std::vector<std::int64_t> shape) {
  return emit(Prim::broadcast_to, {v}, {{"shape", ints_param(std::move(shape))}});
}

ValueId Emitter::transpose(ValueId v, std::vector<std::int64_t> perm) {
  bool identity = true;
  for (std::size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<std::int64_t>(i);
  if (identity) return v;
  return emit(Prim::transpose, {v}, {{"perm", ints_param(std::move(perm))}});
}

ValueId Emitter::unbroadcast(ValueId g, const std::vector<std::int64_t>& shape) {
  const std::vector<std::int64_t> from = type(g).shape;
  if (from == shape) return g;
  std::vector<std::int64_t> axes;
  const std::size_t lead = from.size() - shape.size();
  for (std::size_t d = 0; d < from.size(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && from[d] != 1)) axes.push_back(static_cast<std::int64_t>(d));
  }
  const ValueId summed = axes.empty() ? g : emit(Prim::sum, {g}, {{"axes", ints_param(axes)}});
  return reshape(summed, shape);
}

ValueId Emitter::unreduce(ValueId g, const std::vector<std::int64_t>& in_shape, const std::vector<bool>& reduced) {
  std::vector<std::int64_t> kept;
  for (std::size_t d = 0; d < in_shape.size(); ++d) kept.push_back(reduced[d] ? 1 : in_shape[d]);
  return broadcast_to(reshape(g, kept), in_shape);
}

ValueId Emitter::swap_last_two(ValueId v) {
  const std::size_t rank = type(v).shape.size();
  std::vector<std::int64_t> perm = iota_axes(rank);
  std::swap(perm[rank - 1], perm[rank - 2]);
  return transpose(v, perm);
}

ValueId Emitter::reverse_axis(ValueId v, std::size_t d) {
  const std::vector<std::int64_t> shape = type(v).shape;
  std::vector<std::int64_t> start(shape.size(), 0), limit = shape, step(shape.size(), 1);
  start[d] = shape[d] - 1;
  limit[d] = -1;
  step[d] = -1;
  return emit(Prim::slice, {v},
              {{"start", ints_param(start)}, {"limit", ints_param(limit)}, {"step", ints_param(step)}});
}

ValueId Emitter::spread_axis(ValueId v, std::size_t d, std::int64_t s, std::int64_t room) {
  if (s == 1) return v;
  std::vector<std::int64_t> shape = type(v).shape;
  const std::int64_t m = shape[d];
  std::vector<std::int64_t> split = shape;
  split.insert(split.begin() + static_cast<std::ptrdiff_t>(d) + 1, 1);
  ValueType gap{type(v).dtype, split, {}};
  gap.shape[d + 1] = s - 1;
  const ValueId unit = reshape(v, split);
  const ValueId spread =
      emit(Prim::concatenate, {unit, zeros(gap)}, {{"axis", int_param(static_cast<std::int64_t>(d) + 1)}});
  shape[d] = m * s;
  const ValueId flat = reshape(spread, shape);
  if (m * s <= room) return flat;
  std::vector<std::int64_t> start(shape.size(), 0), limit = shape, step(shape.size(), 1);
  limit[d] = room;
  return emit(Prim::slice, {flat},
              {{"start", ints_param(start)}, {"limit", ints_param(limit)}, {"step", ints_param(step)}});
}

ValueId Emitter::pad_axis(ValueId v, std::size_t d, std::int64_t before, std::int64_t after) {
  std::vector<ValueId> parts;
  for (const std::int64_t n : {before, std::int64_t{-1}, after}) {
    if (n == -1) {
      parts.push_back(v);
    } else if (n > 0) {
      ValueType zero = type(v);
      zero.shape[d] = n;
      parts.push_back(zeros(zero));
    }
  }
  return parts.size() == 1 ? v : emit(Prim::concatenate, parts, {{"axis", int_param(static_cast<std::int64_t>(d))}});
}

ValueId Emitter::moveaxis(ValueId v, std::int64_t from, std::int64_t to) {
  const auto rank = static_cast<std::int64_t>(type(v).shape.size());
  if (from < 0) from += rank;
  if (to < 0) to += rank;
  if (from == to) return v;
  std::vector<std::int64_t> perm;
  for (std::int64_t d = 0; d < rank; ++d) {
    if (d != from) perm.push_back(d);
  }
  perm.insert(perm.begin() + to, from);
  return transpose(v, perm);
}

std::vector<bool> reduced_axes(const ValueType& in, const Params& params) {
  std::vector<bool> reduced(in.shape.size(), !params.contains("axes"));
  if (!params.contains("axes")) return reduced;
  for (std::int64_t a : param_ints(params, "axes")) {
    reduced[static_cast<std::size_t>(normalize_axis(a, in.shape.size()))] = true;
  }
  return reduced;
}

std::int64_t normalize_axis(std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) {
    throw RuleError("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + r : axis;
}

std::int64_t axis_param(const Params& params, std::size_t rank, std::int64_t fallback) {
  std::int64_t axis = param_int(params, "axis", fallback);
  return axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis;
}

std::vector<std::int64_t> iota_axes(std::size_t n) {
  std::vector<std::int64_t> axes(n);
  std::iota(axes.begin(), axes.end(), std::int64_t{0});
  return axes;
}

// ---- contexts ----------------------------------------------------------------------------------------------

void VjpContext::give(std::size_t k, ValueId cotangent) {
  if (given[k] == kNoValue) {
    given[k] = cotangent;
  } else {
    given[k] = e.emit(Prim::add, {given[k], cotangent});
  }
}

ValueId JvpContext::tangent(std::size_t k) {
  if (tangents[k] != kNoValue) return tangents[k];
  ValueType t = in_types[k];
  // An integer input's tangent is zero in the result's floating dtype (JAX's float0 has no arithmetic).
  if (!is_floating(t.dtype)) t.dtype = out_types.empty() || !is_floating(dtype()) ? DType::f32 : dtype();
  return e.zeros(t);
}

ValueId pvary_to(Emitter& e, ValueId g, const std::vector<std::string>& axes) {
  std::vector<std::string> missing;
  const std::vector<std::string> has = e.type(g).varying;
  for (const std::string& a : axes) {
    if (std::find(has.begin(), has.end(), a) == has.end()) missing.push_back(a);
  }
  return missing.empty() ? g : e.emit(Prim::pvary, {g}, {{"axes", axes_param(missing)}});
}

bool BatchContext::any_batched() const { return std::find(batched.begin(), batched.end(), true) != batched.end(); }

ValueId BatchContext::materialized(std::size_t k) {
  if (batched[k]) return ins[k];
  std::vector<std::int64_t> shape = e.type(ins[k]).shape;
  shape.insert(shape.begin(), size);
  return e.broadcast_to(ins[k], shape);
}

ValueId BatchContext::aligned(std::size_t k, std::size_t rank) {
  if (!batched[k]) return ins[k];
  std::vector<std::int64_t> shape = e.type(ins[k]).shape;
  const std::size_t own = shape.size() - 1;
  if (own >= rank) return ins[k];
  shape.insert(shape.begin() + 1, rank - own, 1);
  return e.reshape(ins[k], shape);
}

// ---- shared rules ------------------------------------------------------------------------------------------

std::vector<ValueId> linear_jvp(JvpContext& c) {
  std::vector<ValueId> tangents;
  for (std::size_t k = 0; k < c.ins.size(); ++k) tangents.push_back(c.tangent(k));
  return c.e.emit_many(c.prim(), tangents, c.params);
}

std::vector<ValueId> zero_jvp(JvpContext& c) { return std::vector<ValueId>(c.outs.size(), kNoValue); }

Batched elementwise_batch(BatchContext& c) {
  std::size_t rank = 0;
  for (const ValueType& t : c.in_types) rank = std::max(rank, t.shape.size());
  std::vector<ValueId> ins;
  for (std::size_t k = 0; k < c.ins.size(); ++k) ins.push_back(c.aligned(k, rank));
  std::vector<ValueId> outs = c.e.emit_many(c.prim(), ins, c.params);
  return {outs, std::vector<bool>(outs.size(), true)};
}

Batched shifted_axes_batch(BatchContext& c) {
  Params params = c.params;
  const std::size_t rank = c.in_types[0].shape.size();
  const auto shift = [&](std::int64_t a) { return normalize_axis(a, rank) + 1; };
  if (auto it = params.find("axes"); it != params.end()) {
    if (auto* axes = std::get_if<std::vector<std::int64_t>>(&it->second)) {
      for (std::int64_t& a : *axes) a = shift(a);
    }
  }
  if (auto it = params.find("axis"); it != params.end()) {
    it->second = int_param(shift(param_int(params, "axis")));
  }
  std::vector<ValueId> outs = c.e.emit_many(c.prim(), {c.materialized(0)}, params);
  return {outs, std::vector<bool>(outs.size(), true)};
}

}  // namespace weft::program
