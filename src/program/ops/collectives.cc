// The collectives (JAX's names and parameters), each defined once: its type rule, its VJP (transpose), JVP
// and batching (vmap) rules side by side. The axes they run over must be mesh axes, their groups
// (axis_index_groups) a partition of the indices along those axes, and each one's result type and varying
// axes follow JAX's rules (a psum'd value is invariant along the summed axes; axis_index varies). The rules
// follow JAX's (jax/_src/lax/parallel.py): pmap's transposes, and shard_map's where they differ (psum, pmean);
// under vmap a collective over other axes runs on the batched value, one over vmap's axis acts along the
// batch axis.
#include <algorithm>
#include <map>
#include <set>

#include "core/collective.hpp"
#include "program/op_registry.hpp"
#include "program/rule_kit.hpp"
#include "weft/error.hpp"
#include "weft/reduce_op.hpp"

namespace weft::program {
namespace {

// "('i', 'j')": the mesh's axes as a list (no tuple comma for one axis: this is prose, not a parameter).
std::string mesh_axes_text(const Mesh& mesh) {
  std::string text = "(";
  for (const MeshAxis& axis : mesh.axes()) {
    if (text.size() > 1) text += ", ";
    text += "'";
    text += axis.name;
    text += "'";
  }
  return text + ")";
}

// The number of replicas one collective instance spans: the product of its axes' sizes, or the group size.
std::int64_t participants(const Params& params, const Mesh& mesh) {
  const auto& axes = param<std::vector<std::string>>(params, "axes");
  if (axes.empty()) throw RuleError("axes must name at least one mesh axis");
  std::set<std::string> seen;
  std::int64_t size = 1;
  for (const std::string& axis : axes) {
    if (!mesh.has_axis(axis)) {
      throw RuleError("unbound axis name: " + axis + " (the mesh's axes are " + mesh_axes_text(mesh) + ")");
    }
    if (!seen.insert(axis).second) throw RuleError("axis '" + axis + "' is named twice");
    size *= mesh.axes()[mesh.axis_position(axis)].size;
  }
  if (!has_param(params, "groups")) return size;
  const auto& groups = param<Groups>(params, "groups");
  std::vector<int> count(static_cast<std::size_t>(size), 0);
  for (const auto& group : groups) {
    if (group.size() != groups.front().size()) throw RuleError("groups must all have the same size");
    for (int member : group) {
      if (member < 0 || member >= size) {
        throw RuleError("group member " + std::to_string(member) + " is outside 0.." + std::to_string(size - 1) +
                        " (the size of axes " + axes_text(axes) + ")");
      }
      ++count[member];
    }
  }
  if (groups.empty() || std::any_of(count.begin(), count.end(), [](int c) { return c != 1; })) {
    throw RuleError("groups must hold every index 0.." + std::to_string(size - 1) + " of axes " + axes_text(axes) +
                    " exactly once");
  }
  return static_cast<std::int64_t>(groups.front().size());
}

// Whether the collective runs in more than one group along its axes (axis_index_groups that split them): its
// result is then equal within each group only.
bool split_into_groups(const Params& params) {
  return has_param(params, "groups") && param<Groups>(params, "groups").size() > 1;
}

// The varying axes of a reduction's or gather's result: the input's without the collective's axes, for the
// result is the same on every member. Not so with several groups: each group has its own result, so the result
// still varies along the axes where the input did (JAX's pmap does not type this; weft's types decide which
// local replicas may share a computation, so a grouped result typed invariant would hand one group another's
// values: issue 45).
std::vector<std::string> without_axes(std::vector<std::string> varying, const Params& params) {
  if (split_into_groups(params)) return varying;
  const auto& axes = param<std::vector<std::string>>(params, "axes");
  std::erase_if(varying, [&](const std::string& a) { return std::count(axes.begin(), axes.end(), a) > 0; });
  return varying;
}

std::vector<std::string> with_axes(std::vector<std::string> varying, const Params& params) {
  const auto& axes = param<std::vector<std::string>>(params, "axes");
  std::set<std::string> all(varying.begin(), varying.end());
  all.insert(axes.begin(), axes.end());
  return {all.begin(), all.end()};
}

// A dimension parameter of the operand (past_end: one past the last is allowed, where an axis is inserted);
// negative counts from the end, as in JAX. Returns it non-negative.
std::int64_t dimension(const ValueType& in, const Params& params, const std::string& name, bool past_end = false) {
  const std::int64_t axis = param<std::int64_t>(params, name);
  const auto rank = static_cast<std::int64_t>(in.shape.size()) + (past_end ? 1 : 0);
  if (axis < -rank || axis >= rank) {
    throw RuleError(name + " " + std::to_string(axis) + " is out of range for " + type_text(in) + " (rank " +
                    std::to_string(in.shape.size()) + "): it must be in [" + std::to_string(-rank) + ", " +
                    std::to_string(rank - 1) + "]" + (past_end ? " (an untiled all_gather inserts a new axis)" : ""));
  }
  return axis < 0 ? axis + rank : axis;
}

bool tiled(const Params& params) { return param_flag(params, "tiled"); }

std::vector<ValueType> all_reduce(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  participants(params, mesh);
  ValueType out = ins[0];
  out.varying = without_axes(out.varying, params);
  return {out};
}

// A reduction's result has the dtype the runtime's reduction gives (reduction_dtype, JAX's: pmean of integers is
// floating, psum and pprod of bool int32).
template <ReduceOp op>
std::vector<ValueType> all_reduce_of(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  std::vector<ValueType> out = all_reduce(ins, params, mesh);
  out[0].dtype = reduction_dtype(op, out[0].dtype);
  return out;
}

std::vector<ValueType> all_gather(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const std::int64_t n = participants(params, mesh);
  ValueType out = ins[0];
  const std::int64_t axis = dimension(ins[0], params, "axis", !tiled(params));
  if (tiled(params)) {
    out.shape[axis] *= n;
  } else {
    out.shape.insert(out.shape.begin() + axis, n);
  }
  out.varying = without_axes(out.varying, params);
  return {out};
}

std::vector<ValueType> psum_scatter(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const std::int64_t n = participants(params, mesh);
  ValueType out = ins[0];
  const std::int64_t axis = dimension(ins[0], params, "axis");
  const std::int64_t d = out.shape[axis];
  if (tiled(params) ? d % n != 0 : d != n) {
    throw RuleError("dimension " + std::to_string(axis) + " of " + type_text(ins[0]) + " must be " +
                    (tiled(params) ? "a multiple of " : "equal to ") + std::to_string(n) + " (the participants)");
  }
  out.dtype = reduction_dtype(ReduceOp::sum, out.dtype);
  if (tiled(params)) {
    out.shape[axis] = d / n;
  } else {
    out.shape.erase(out.shape.begin() + axis);
  }
  out.varying = with_axes(out.varying, params);
  return {out};
}

std::vector<ValueType> all_to_all(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const std::int64_t n = participants(params, mesh);
  ValueType out = ins[0];
  const std::int64_t split = dimension(ins[0], params, "split_axis");
  const std::int64_t concat = dimension(ins[0], params, "concat_axis");
  if (tiled(params)) {
    if (out.shape[split] % n != 0) {
      throw RuleError("split_axis " + std::to_string(split) + " of " + type_text(ins[0]) + " is not a multiple of " +
                      std::to_string(n) + " (the participants)");
    }
    out.shape[split] /= n;
    out.shape[concat] *= n;
  } else {
    // JAX's untiled all_to_all: the split axis (of the participants' size) goes, a new one of that size
    // comes at concat_axis.
    if (out.shape[split] != n) {
      throw RuleError("split_axis " + std::to_string(split) + " of " + type_text(ins[0]) + " must equal " +
                      std::to_string(n) + " (the participants; tiled=True splits a multiple)");
    }
    out.shape.erase(out.shape.begin() + split);
    out.shape.insert(out.shape.begin() + concat, n);
  }
  out.varying = with_axes(out.varying, params);
  return {out};
}

std::vector<ValueType> ppermute(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const std::int64_t n = participants(params, mesh);
  std::set<int> sources;
  std::set<int> destinations;
  for (const auto& [from, to] : param<Permutation>(params, "perm")) {
    if (from < 0 || from >= n || to < 0 || to >= n) {
      throw RuleError("perm pair (" + std::to_string(from) + ", " + std::to_string(to) + ") is outside 0.." +
                      std::to_string(n - 1));
    }
    if (!sources.insert(from).second) throw RuleError("perm sends from " + std::to_string(from) + " twice");
    if (!destinations.insert(to).second) throw RuleError("perm sends to " + std::to_string(to) + " twice");
  }
  ValueType out = ins[0];
  out.varying = with_axes(out.varying, params);
  return {out};
}

std::vector<ValueType> axis_index(const std::vector<ValueType>&, const Params& params, const Mesh& mesh) {
  participants(params, mesh);
  return {ValueType{DType::i32, {}, with_axes({}, params)}};
}

// pvary (JAX's, shard_map's): the same data, now typed as varying over `axes` too (no communication).
std::vector<ValueType> pvary(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  participants(params, mesh);
  ValueType out = ins[0];
  out.varying = with_axes(out.varying, params);
  return {out};
}

// PopXL's collectives on flattened tensors (Replica::replicated_reduce_scatter, replica_sharded_slice): member
// k of a group of G gets chunk k, ceil(size / G) elements, 1-d.
std::vector<ValueType> flat_shard(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const std::int64_t g = participants(params, mesh);
  ValueType out = ins[0];
  out.shape = {(ins[0].num_elements() + g - 1) / g};
  out.varying = with_axes(out.varying, params);
  return {out};
}

// Replica::gather_shards: the group's shards, unpadded and reshaped to `shape` (the whole tensor).
std::vector<ValueType> gather_shards(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const std::int64_t g = participants(params, mesh);
  if (ins[0].shape.size() != 1) throw RuleError("the shard must be 1-d, not " + type_text(ins[0]));
  ValueType out = ins[0];
  out.shape = param<std::vector<std::int64_t>>(params, "shape");
  if (out.num_elements() > ins[0].shape[0] * g) {
    throw RuleError("shape " + type_text(out) + " needs more than the " + std::to_string(g) + " shards of " +
                    type_text(ins[0]) + " hold");
  }
  out.varying = without_axes(out.varying, params);
  return {out};
}


// pbroadcast (JAX's lax.pbroadcast): every member gets the value of member `source` along `axes` (one group:
// JAX's takes no axis_index_groups). Typed varying over the axes, as JAX's collective_vma_rule does.
std::vector<ValueType> pbroadcast(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const std::int64_t n = participants(params, mesh);
  const std::int64_t source = param<std::int64_t>(params, "source");
  if (source < 0 || source >= n) {
    throw RuleError("source " + std::to_string(source) + " is outside 0.." + std::to_string(n - 1) +
                    " (the members along axes " + axes_text(param<std::vector<std::string>>(params, "axes")) +
                    ")");
  }
  ValueType out = ins[0];
  out.varying = with_axes(out.varying, params);
  return {out};
}

// ---- shared by the rules -----------------------------------------------------------------------------------

const std::vector<std::string>& axes_of(const Params& p) {
  return param<std::vector<std::string>>(p, "axes");
}

// The parameters of a collective over the same axes and groups (a transpose's, a JVP's psum).
Params axes_and_groups(const Params& p) {
  Params q{{"axes", p.at("axes")}};
  if (p.contains("groups")) q["groups"] = p.at("groups");
  return q;
}

Params over_axes(Params p, std::vector<std::string> axes) {
  p["axes"] = axes_param(std::move(axes));
  return p;
}

// The member's rank in its group along the collective's axes (int32): its axis index, through a constant
// table where groups are given (groups list their members in rank order).
ValueId rank_in_group(Emitter& e, const Params& p, std::int64_t group_size) {
  ValueId rank = e.emit(Prim::axis_index, {}, {{"axes", p.at("axes")}});
  if (!p.contains("groups")) return rank;
  const Groups& groups = param<Groups>(p, "groups");
  std::vector<std::int32_t> rank_of(static_cast<std::size_t>(group_size) * groups.size());
  for (const auto& group : groups) {
    for (std::size_t k = 0; k < group.size(); ++k) rank_of[static_cast<std::size_t>(group[k])] = static_cast<std::int32_t>(k);
  }
  return e.emit(Prim::take, {e.constant(Array::from_vector(rank_of)), rank});
}

// d pprod(x) / d x_r: the product of the group's other members, without dividing by a zero. With no zero in
// the group it is P / x_r (P the product); with one zero, P of the nonzeros at that zero and 0 elsewhere; with
// more, 0 everywhere.
ValueId product_of_others(Emitter& e, ValueId x, const Params& q) {
  const DType dt = e.type(x).dtype;
  const ValueId zero = e.scalar(0, dt);
  const ValueId is_zero = e.emit(Prim::equal, {x, zero});
  const ValueId safe = e.emit(Prim::where, {is_zero, e.scalar(1, dt), x});
  const ValueId nonzero_product = e.emit(Prim::pprod, {safe}, q);
  const ValueId zeros_in_group = e.emit(Prim::psum, {e.astype(is_zero, dt)}, q);
  const ValueId one_zero = e.emit(Prim::where, {is_zero, nonzero_product, zero});
  return e.emit(Prim::where,
                {e.emit(Prim::equal, {zeros_in_group, zero}), e.emit(Prim::divide, {nonzero_product, safe}),
                 e.emit(Prim::where, {e.emit(Prim::equal, {zeros_in_group, e.scalar(1, dt)}), one_zero, zero})});
}

// The first `length` elements of v along axis d.
ValueId prefix(Emitter& e, ValueId v, std::size_t d, std::int64_t length) {
  const std::vector<std::int64_t> shape = e.type(v).shape;
  if (shape[d] == length) return v;
  std::vector<std::int64_t> start(shape.size(), 0), limit = shape, step(shape.size(), 1);
  limit[d] = length;
  return e.emit(Prim::slice, {v},
                {{"start", ints_param(start)}, {"limit", ints_param(limit)}, {"step", ints_param(step)}});
}

// v with axes d and d + 1 merged into one (row-major).
ValueId merge_axes(Emitter& e, ValueId v, std::size_t d) {
  std::vector<std::int64_t> shape = e.type(v).shape;
  shape[d] *= shape[d + 1];
  shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(d) + 1);
  return e.reshape(v, shape);
}

// v with axis d split into [outer, shape[d] / outer].
ValueId split_axis(Emitter& e, ValueId v, std::size_t d, std::int64_t outer) {
  std::vector<std::int64_t> shape = e.type(v).shape;
  const std::int64_t inner = shape[d] / outer;
  shape[d] = inner;
  shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(d), outer);
  return e.reshape(v, shape);
}

// PopXL's flat layout: a tensor of n elements flattened and padded with zeros to g chunks of `chunk`.
// `lead` leading axes (a batch axis) are kept: [lead..., n] -> [lead..., g, chunk].
ValueId flat_chunks(Emitter& e, ValueId v, std::size_t lead, std::int64_t n, std::int64_t g, std::int64_t chunk) {
  std::vector<std::int64_t> shape = e.type(v).shape;
  shape.resize(lead);
  shape.push_back(n);
  ValueId flat = e.pad_axis(e.reshape(v, shape), lead, 0, g * chunk - n);
  shape.back() = g;
  shape.push_back(chunk);
  return e.reshape(flat, shape);
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

ReduceOp flat_reduce_op(const Params& p) {
  try {
    return reduce_op_from_name(p.contains("op") ? param_string(p, "op") : std::string("add"));
  } catch (const InvalidArgument& e) {
    throw RuleError(std::string("replicated_reduce_scatter: ") + e.what());
  }
}

// replicated_reduce_scatter: flat_shard's shape, with the dtype of its reduction (`op`). A name that is no
// reduction keeps the operand's dtype here: the executor refuses it when it reads it, naming the equation on
// every replica (collective_descriptors_test), as it always has.
std::vector<ValueType> flat_reduce_scatter(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  std::vector<ValueType> out = flat_shard(ins, params, mesh);
  try {
    out[0].dtype = reduction_dtype(flat_reduce_op(params), out[0].dtype);
  } catch (const RuleError&) {
  }
  return out;
}

// ---- VJP rules (JAX's transposes; pmap's unless shard_map's differ) --------------------------------------

void psum_vjp(VjpContext& c) {
  if (c.e.rules() == CollectiveRules::shard_map) {
    // shard_map's rule: the cotangent of an invariant sum goes back to every member unchanged (pvary).
    c.give(0, pvary_to(c.e, c.ct(), axes_of(c.params)));
  } else {
    c.give(0, c.e.emit(Prim::psum, {c.ct()}, c.params));  // pmap's: psum transposes to psum
  }
}

void pmean_vjp(VjpContext& c) {
  if (c.e.rules() == CollectiveRules::shard_map) {
    const ValueId spread = pvary_to(c.e, c.ct(), axes_of(c.params));
    const double n = static_cast<double>(participants(c.params, c.e.mesh()));
    c.give(0, c.e.emit(Prim::divide, {spread, c.e.scalar(n, c.e.type(spread).dtype)}));
  } else {
    c.give(0, c.e.emit(Prim::pmean, {c.ct()}, c.params));  // psum / n likewise
  }
}

// shard_map's pvary: the varying cotangents summed back to the invariant value.
// Under shard_map's rules an invariant value is one value on every device, so its cotangent is the devices'
// sum (JAX's pvary transposes to psum); under pmap's (where control flow inserts pvary to type a carry) every
// replica's value is its own and pvary only retypes it: the cotangent passes as it is.
void pvary_vjp(VjpContext& c) {
  if (c.e.rules() == CollectiveRules::pmap) {
    c.give(0, c.ct());
    return;
  }
  c.give(0, c.e.emit(Prim::psum, {c.ct()}, c.params));
}

void all_gather_vjp(VjpContext& c) { c.give(0, c.e.emit(Prim::psum_scatter, {c.ct()}, c.params)); }
void psum_scatter_vjp(VjpContext& c) { c.give(0, c.e.emit(Prim::all_gather, {c.ct()}, c.params)); }

void ppermute_vjp(VjpContext& c) {
  Permutation inverse;
  for (const auto& [from, to] : std::get<Permutation>(c.params.at("perm"))) inverse.emplace_back(to, from);
  Params q = c.params;
  q["perm"] = Param{inverse};
  c.give(0, c.e.emit(Prim::ppermute, {c.ct()}, q));
}

void all_to_all_vjp(VjpContext& c) {
  Params q = c.params;
  q["split_axis"] = c.params.at("concat_axis");
  q["concat_axis"] = c.params.at("split_axis");
  c.give(0, c.e.emit(Prim::all_to_all, {c.ct()}, q));
}

// Megatron's f/g pair: f is the identity (its transpose a sum), g a sum (its transpose the identity).
void identical_inputs_vjp(VjpContext& c) {
  c.give(0, c.e.emit(Prim::all_reduce_identical_grad_inputs, {c.ct()}, c.params));
}
void identical_grad_inputs_vjp(VjpContext& c) {
  c.give(0, c.e.emit(Prim::all_reduce_identical_inputs, {c.ct()}, c.params));
}

// Every member's cotangent reads x_r: psum(g) times the product of the others.
void pprod_vjp(VjpContext& c) {
  const Params q = axes_and_groups(c.params);
  c.give(0, c.e.emit(Prim::multiply, {c.e.emit(Prim::psum, {c.ct()}, q), product_of_others(c.e, c.in(0), q)}));
}

// JAX's: the source gets the sum of every member's cotangent, the others nothing.
void pbroadcast_vjp(VjpContext& c) {
  const DType dt = c.e.type(c.ct()).dtype;
  const ValueId index = c.e.emit(Prim::axis_index, {}, {{"axes", c.params.at("axes")}});
  const ValueId source = c.e.scalar(static_cast<double>(std::get<std::int64_t>(c.params.at("source"))), DType::i32);
  const ValueId total = c.e.emit(Prim::psum, {c.ct()}, {{"axes", c.params.at("axes")}});
  c.give(0, c.e.emit(Prim::where, {c.e.emit(Prim::equal, {index, source}), total, c.e.scalar(0, dt)}));
}

// PopXL's collectives on flattened tensors, padded to a multiple of the group size G (chunk k: member k's):
// replicated_reduce_scatter (add or mean) <-> gather_shards, as psum_scatter <-> all_gather.
void replicated_reduce_scatter_vjp(VjpContext& c) {
  const std::string reduce = c.params.contains("op") ? std::get<std::string>(c.params.at("op")) : "add";
  if (reduce != "add" && reduce != "mean") {
    throw RuleError("replicated_reduce_scatter with op '" + reduce + "' has no VJP rule (add and mean have)");
  }
  Params q = axes_and_groups(c.params);
  q["shape"] = ints_param(c.in_types[0].shape);
  ValueId back = c.e.emit(Prim::gather_shards, {c.ct()}, q);
  if (reduce == "mean") {
    back = c.e.emit(Prim::divide,
                    {back, c.e.scalar(static_cast<double>(participants(c.params, c.e.mesh())), c.e.type(back).dtype)});
  }
  c.give(0, back);
}

// g is the whole tensor: flattened, padded to the G shards, each member's shard summed over the group.
void gather_shards_vjp(VjpContext& c) {
  const std::int64_t size = participants(c.params, c.e.mesh());
  const std::int64_t n = c.e.type(c.ct()).num_elements();
  Params q = axes_and_groups(c.params);
  q["axis"] = int_param(0);
  q["tiled"] = bool_param(true);
  const ValueId flat = c.e.pad_axis(c.e.reshape(c.ct(), {n}), 0, 0, c.in_types[0].shape[0] * size - n);
  c.give(0, c.e.emit(Prim::psum_scatter, {flat}, q));
}

// No communication: one_hot(rank in group) [G, 1] times g [1, chunk] is the padded flat tensor.
void replica_sharded_slice_vjp(VjpContext& c) {
  const std::int64_t size = participants(c.params, c.e.mesh());
  const std::int64_t chunk = c.e.type(c.ct()).shape[0];
  const std::int64_t n = c.in_types[0].num_elements();
  const DType dt = c.e.type(c.ct()).dtype;
  const ValueId hot = c.e.reshape(c.e.emit(Prim::one_hot, {rank_in_group(c.e, c.params, size)},
                                           {{"num_classes", int_param(size)}, {"dtype", Param{dt}}}),
                                  {size, 1});
  const ValueId placed = c.e.reshape(c.e.emit(Prim::multiply, {hot, c.e.reshape(c.ct(), {1, chunk})}), {size * chunk});
  c.give(0, c.e.reshape(prefix(c.e, placed, 0, n), c.in_types[0].shape));
}

// ---- JVP rules -------------------------------------------------------------------------------------------

// The tangent of a product over the group: the sum over members of each one's tangent times the others.
std::vector<ValueId> pprod_jvp(JvpContext& c) {
  const Params q = axes_and_groups(c.params);
  return {c.e.emit(Prim::psum, {c.e.emit(Prim::multiply, {c.tangent(0), product_of_others(c.e, c.in(0), q)})}, q)};
}

// Linear for add and mean only (the reductions PopXL's VJP has too).
std::vector<ValueId> replicated_reduce_scatter_jvp(JvpContext& c) {
  const ReduceOp op = flat_reduce_op(c.params);
  if (op != ReduceOp::sum && op != ReduceOp::mean) {
    throw RuleError("replicated_reduce_scatter with op '" + std::get<std::string>(c.params.at("op")) +
                    "' has no JVP rule (add and mean have)");
  }
  return linear_jvp(c);
}

// ---- batching rules ----------------------------------------------------------------------------------------
// A collective over mesh axes other than vmap's runs on the batched value as it is (a batch of collectives
// is the collective of the batch), its array-axis parameters moved past the batch axis. One over vmap's axis
// acts along the batch axis (JAX's collective batchers): the examples are its members.

struct AxesSplit {
  bool batch_axis = false;          // the collective names vmap's axis
  std::vector<std::string> rest;    // its other axes, in order
};

AxesSplit split_axes(const BatchContext& c) {
  AxesSplit s;
  for (const std::string& a : axes_of(c.params)) {
    if (a == c.axis_name) {
      s.batch_axis = true;
    } else {
      s.rest.push_back(a);
    }
  }
  return s;
}

[[noreturn]] void refuse(const BatchContext& c, const std::string& why) {
  throw RuleError(c.op.name() + " over vmap's axis '" + c.axis_name + "': " + why);
}

// JAX's batchers of these collectives take vmap's axis alone and no axis_index_groups.
void batch_axis_alone(const BatchContext& c, const AxesSplit& s) {
  if (has_param(c.params, "groups")) refuse(c, "axis_index_groups are not supported under vmap (JAX's rule)");
  if (!s.rest.empty()) {
    refuse(c, "together with " + axes_text(s.rest) + " it has no batching rule (nor in JAX); use one collective "
              "over vmap's axis and another over the others");
  }
}

Batched same_collective(BatchContext& c, const Params& params) {
  return {c.e.emit_many(c.prim(), {c.in(0)}, params), {c.batched[0]}};
}

Params shifted(const Params& params, std::initializer_list<std::pair<const char*, std::int64_t>> axes) {
  Params q = params;
  for (const auto& [name, axis] : axes) q[name] = int_param(axis + 1);
  return q;
}

// x reduced along the batch axis by `op`; an unbatched x (every example's) in closed form, as JAX's
// if_unmapped (psum: size * x, pmax: x).
ValueId reduce_examples(BatchContext& c, ReduceOp op, ValueId x, bool batched) {
  Emitter& e = c.e;
  const DType dt = e.type(x).dtype;
  if (!batched) {
    if (op == ReduceOp::sum) return e.emit(Prim::multiply, {x, e.scalar(static_cast<double>(c.size), dt)});
    if (op == ReduceOp::prod) return e.emit(Prim::integer_pow, {x}, {{"y", int_param(c.size)}});
    return x;
  }
  const Params first = {{"axes", ints_param({0})}};
  switch (op) {
    case ReduceOp::sum:
      return e.emit(Prim::sum, {x}, first);
    case ReduceOp::mean:
      return e.emit(Prim::mean, {x}, first);
    case ReduceOp::max:
      return e.emit(Prim::max, {x}, first);
    case ReduceOp::min:
      return e.emit(Prim::min, {x}, first);
    case ReduceOp::prod: break;
  }
  // No product reduction in the registry: the examples multiplied in order.
  ValueId product = e.emit(Prim::take, {x, e.scalar(0, DType::i32)}, {{"axis", int_param(0)}});
  for (std::int64_t k = 1; k < c.size; ++k) {
    product = e.emit(Prim::multiply, {product, e.emit(Prim::take, {x, e.scalar(static_cast<double>(k), DType::i32)},
                                                      {{"axis", int_param(0)}})});
  }
  return product;
}

// How reduction_batch reduces the examples of each all-reduce (a mean as a sum, divided after the rest).
ReduceOp examples_reduction(Prim op) {
  switch (op) {
    case Prim::pmax: return ReduceOp::max;
    case Prim::pmin: return ReduceOp::min;
    case Prim::pprod: return ReduceOp::prod;
    default: return ReduceOp::sum;  // psum, pmean, all_reduce_identical_grad_inputs
  }
}

// psum, pmean, pmax, pmin, pprod and Megatron's g (a sum). Over vmap's axis and others: the examples reduced,
// then the collective over the others; pmean is JAX's, psum / n.
Batched reduction_batch(BatchContext& c) {
  const AxesSplit s = split_axes(c);
  if (!s.batch_axis) return same_collective(c, c.params);
  if (has_param(c.params, "groups")) refuse(c, "axis_index_groups are not supported under vmap (JAX's rule)");
  const bool mean = c.prim() == Prim::pmean;
  ValueId y = reduce_examples(c, examples_reduction(c.prim()), c.in(0), c.batched[0]);
  if (!s.rest.empty()) y = c.e.emit(mean ? Prim::psum : c.prim(), {y}, over_axes(c.params, s.rest));
  if (mean) {
    const std::int64_t n = c.size * (s.rest.empty() ? 1 : participants(over_axes(c.params, s.rest), c.e.mesh()));
    y = c.e.emit(Prim::divide, {y, c.e.scalar(static_cast<double>(n), c.e.type(y).dtype)});
  }
  // The collective's own result type (a sum of bools counts in int32, the collective keeps bool).
  return {{c.e.astype(y, c.out_types[0].dtype)}, {false}};
}

// pvary and Megatron's f: the identity on the data; over other axes too, the same op over those.
Batched identity_batch(BatchContext& c) {
  const AxesSplit s = split_axes(c);
  if (!s.batch_axis) return same_collective(c, c.params);
  if (s.rest.empty()) return {{c.in(0)}, {c.batched[0]}};
  return {{c.e.emit(c.prim(), {c.in(0)}, over_axes(c.params, s.rest))}, {c.batched[0]}};
}

// Over vmap's axis: the examples stacked at `axis` (tiled: concatenated along it); the result is every
// example's, unbatched.
Batched all_gather_batch(BatchContext& c) {
  const bool tile = tiled(c.params);
  const std::int64_t axis = dimension(c.in_types[0], c.params, "axis", !tile);
  const AxesSplit s = split_axes(c);
  if (!s.batch_axis) return same_collective(c, shifted(c.params, {{"axis", axis}}));
  batch_axis_alone(c, s);
  ValueId y = c.e.moveaxis(c.materialized(0), 0, axis);
  if (tile) y = merge_axes(c.e, y, static_cast<std::size_t>(axis));
  return {{y}, {false}};
}

// Over vmap's axis: the examples summed, then example k takes chunk k along `axis`.
Batched psum_scatter_batch(BatchContext& c) {
  const std::int64_t axis = dimension(c.in_types[0], c.params, "axis");
  const AxesSplit s = split_axes(c);
  if (!s.batch_axis) return same_collective(c, shifted(c.params, {{"axis", axis}}));
  batch_axis_alone(c, s);
  ValueId y = reduce_examples(c, ReduceOp::sum, c.in(0), c.batched[0]);
  if (tiled(c.params)) y = split_axis(c.e, y, static_cast<std::size_t>(axis), c.size);
  return {{c.e.moveaxis(y, axis, 0)}, {true}};
}

// Over vmap's axis: example b receives chunk b of every example's split axis, stacked (tiled: concatenated)
// at concat_axis in the examples' order.
Batched all_to_all_batch(BatchContext& c) {
  const std::int64_t split = dimension(c.in_types[0], c.params, "split_axis");
  const std::int64_t concat = dimension(c.in_types[0], c.params, "concat_axis");
  const AxesSplit s = split_axes(c);
  if (!s.batch_axis) return same_collective(c, shifted(c.params, {{"split_axis", split}, {"concat_axis", concat}}));
  batch_axis_alone(c, s);
  ValueId x = c.materialized(0);  // [source, ...]
  if (!tiled(c.params)) {
    // [source, ..., b at split, ...] -> [b, source, ...] -> the source axis to concat_axis.
    return {{c.e.moveaxis(c.e.moveaxis(x, 1 + split, 0), 1, 1 + concat)}, {true}};
  }
  x = split_axis(c.e, x, static_cast<std::size_t>(1 + split), c.size);  // [source, ..., b, chunk, ...]
  x = c.e.moveaxis(c.e.moveaxis(x, 1 + split, 0), 1, 1 + concat);       // [b, ..., source, concat, ...]
  return {{merge_axes(c.e, x, static_cast<std::size_t>(1 + concat))}, {true}};
}

// Over vmap's axis: example `to` gets example `from`'s value. A partial permutation (some example receiving
// nothing, which pmap fills with zeros) is refused, batched operand or not, as JAX's batcher refuses it
// (jax/_src/lax/parallel.py, _ppermute_batcher: "Permutation doesn't match the axis size!").
Batched ppermute_batch(BatchContext& c) {
  const AxesSplit s = split_axes(c);
  if (!s.batch_axis) return same_collective(c, c.params);
  batch_axis_alone(c, s);
  const Permutation& perm = param<Permutation>(c.params, "perm");
  if (static_cast<std::int64_t>(perm.size()) != c.size) {
    refuse(c, "perm has " + std::to_string(perm.size()) + " (source, destination) pairs for " +
                  std::to_string(c.size) + " examples; JAX's batcher takes a full permutation only (\"Permutation "
                  "doesn't match the axis size!\"): name every example as a source once, or run it under pmap, "
                  "which fills the examples nothing is sent to with zeros");
  }
  if (!c.batched[0]) return {{c.in(0)}, {false}};
  // (The type rule made the sources and the destinations distinct, so `perm` covers every example.)
  std::vector<std::int32_t> source(static_cast<std::size_t>(c.size));
  for (const auto& [from, to] : perm) source[static_cast<std::size_t>(to)] = from;
  return {{c.e.emit(Prim::take, {c.in(0), c.e.constant(Array::from_vector(source))}, {{"axis", int_param(0)}})},
          {true}};
}

// Called only when it names vmap's axis: the examples' indices (an int32 iota), combined with the other axes'
// as the mesh combines several axes (in the order named, the last fastest).
Batched axis_index_batch(BatchContext& c) {
  const std::vector<std::string>& axes = axes_of(c.params);
  const auto size_of = [&](const std::string& a) -> std::int64_t {
    return a == c.axis_name ? c.size : c.e.mesh().axes()[c.e.mesh().axis_position(a)].size;
  };
  std::int64_t stride = 1;
  std::vector<std::int64_t> strides(axes.size());
  for (std::size_t k = axes.size(); k-- > 0;) {
    strides[k] = stride;
    stride *= size_of(axes[k]);
  }
  ValueId index = kNoValue;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    if (axes[k] != c.axis_name) continue;
    std::vector<std::int32_t> iota(static_cast<std::size_t>(c.size));
    for (std::size_t b = 0; b < iota.size(); ++b) iota[b] = static_cast<std::int32_t>(static_cast<std::int64_t>(b) * strides[k]);
    index = c.e.constant(Array::from_vector(iota));
  }
  for (std::size_t k = 0; k < axes.size(); ++k) {
    if (axes[k] == c.axis_name) continue;
    ValueId term = c.e.emit(Prim::axis_index, {}, {{"axes", axes_param({axes[k]})}});
    if (strides[k] != 1)
      term = c.e.emit(Prim::multiply, {term, c.e.scalar(static_cast<double>(strides[k]), DType::i32)});
    index = c.e.emit(Prim::add, {index, term});
  }
  return {{index}, {true}};
}

// Over vmap's axis: every example gets example `source`'s value (unbatched: they are all the same).
Batched pbroadcast_batch(BatchContext& c) {
  const AxesSplit s = split_axes(c);
  if (!s.batch_axis) return same_collective(c, c.params);
  batch_axis_alone(c, s);
  if (!c.batched[0]) return {{c.in(0)}, {false}};
  const double source = static_cast<double>(std::get<std::int64_t>(c.params.at("source")));
  return {{c.e.emit(Prim::take, {c.in(0), c.e.scalar(source, DType::i32)}, {{"axis", int_param(0)}})}, {false}};
}

// PopXL's flat collectives act on the flattened tensor, so a batch of them is not the collective of the
// batch: each is rewritten into the layout kept per example, [B, G, chunk], and JAX's collectives on it.

Batched replicated_reduce_scatter_batch(BatchContext& c) {
  const ReduceOp op = flat_reduce_op(c.params);
  const std::int64_t n = c.in_types[0].num_elements();
  const AxesSplit s = split_axes(c);
  if (s.batch_axis) {
    batch_axis_alone(c, s);
    const std::int64_t chunk = ceil_div(n, c.size);
    const ValueId y = reduce_examples(c, op, c.in(0), c.batched[0]);
    return {{c.e.reshape(flat_chunks(c.e, y, 0, n, c.size, chunk), {c.size, chunk})}, {true}};
  }
  const std::int64_t g = participants(c.params, c.e.mesh());
  const std::int64_t chunk = ceil_div(n, g);
  const ValueId chunks = flat_chunks(c.e, c.in(0), 1, n, g, chunk);  // [B, G, chunk]
  const Params q = axes_and_groups(c.params);
  if (op == ReduceOp::sum || op == ReduceOp::mean) {
    Params scatter = q;
    scatter["axis"] = int_param(0);
    ValueId y = c.e.emit(Prim::psum_scatter, {c.e.moveaxis(chunks, 1, 0)}, scatter);  // [B, chunk]
    if (op == ReduceOp::mean) y = c.e.emit(Prim::divide, {y, c.e.scalar(static_cast<double>(g), c.e.type(y).dtype)});
    return {{y}, {true}};
  }
  // max, min, mul: the whole reduction, then the member's chunk.
  static const std::map<ReduceOp, Prim> reductions = {
      {ReduceOp::max, Prim::pmax}, {ReduceOp::min, Prim::pmin}, {ReduceOp::prod, Prim::pprod}};
  const ValueId all = c.e.emit(reductions.at(op), {chunks}, q);
  return {{c.e.emit(Prim::take, {all, rank_in_group(c.e, c.params, g)}, {{"axis", int_param(1)}})}, {true}};
}

Batched replica_sharded_slice_batch(BatchContext& c) {
  const std::int64_t n = c.in_types[0].num_elements();
  const AxesSplit s = split_axes(c);
  if (s.batch_axis) {
    batch_axis_alone(c, s);
    const std::int64_t chunk = ceil_div(n, c.size);
    if (!c.batched[0]) return {{flat_chunks(c.e, c.in(0), 0, n, c.size, chunk)}, {true}};
    // Example b takes chunk b of its own tensor: the diagonal of [B, B, chunk].
    std::vector<std::int32_t> diagonal(static_cast<std::size_t>(c.size));
    for (std::size_t b = 0; b < diagonal.size(); ++b) diagonal[b] = static_cast<std::int32_t>(b * (diagonal.size() + 1));
    const ValueId rows = c.e.reshape(flat_chunks(c.e, c.in(0), 1, n, c.size, chunk), {c.size * c.size, chunk});
    return {{c.e.emit(Prim::take, {rows, c.e.constant(Array::from_vector(diagonal))}, {{"axis", int_param(0)}})},
            {true}};
  }
  const std::int64_t g = participants(c.params, c.e.mesh());
  const ValueId chunks = flat_chunks(c.e, c.in(0), 1, n, g, ceil_div(n, g));
  return {{c.e.emit(Prim::take, {chunks, rank_in_group(c.e, c.params, g)}, {{"axis", int_param(1)}})}, {true}};
}

Batched gather_shards_batch(BatchContext& c) {
  const auto& shape = std::get<std::vector<std::int64_t>>(c.params.at("shape"));
  const std::int64_t chunk = c.in_types[0].shape[0];
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  const AxesSplit s = split_axes(c);
  if (s.batch_axis) {
    batch_axis_alone(c, s);
    const ValueId flat = c.e.reshape(c.materialized(0), {c.size * chunk});
    return {{c.e.reshape(prefix(c.e, flat, 0, n), shape)}, {false}};
  }
  const std::int64_t g = participants(c.params, c.e.mesh());
  Params q = axes_and_groups(c.params);
  q["axis"] = int_param(1);
  const ValueId gathered = c.e.emit(Prim::all_gather, {c.in(0)}, q);  // [B, G, chunk]
  std::vector<std::int64_t> batched_shape = shape;
  batched_shape.insert(batched_shape.begin(), c.size);
  const ValueId flat = c.e.reshape(gathered, {c.size, g * chunk});
  return {{c.e.reshape(prefix(c.e, flat, 1, n), batched_shape)}, {true}};
}

// JAX defines no derivative of either (no JVP, no transpose): differentiating them is an error.
const char* const kNoExtremumRule =
    "JAX defines none: differentiating pmax or pmin is an error, in forward and reverse mode, under pmap and "
    "shard_map";

}  // namespace

void register_collective_ops(std::vector<OpInfo>& ops) {
  namespace rows = collective_rows;
  using K = ParamKind;
  ops.push_back({.id = Prim::psum, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"groups", K::groups, kOptional}}, .communicates_operand = true,
                 .equal_within_groups = true, .infer = all_reduce_of<ReduceOp::sum>, .vjp = psum_vjp,
                 .jvp = linear_jvp, .batch = reduction_batch, .collective = &rows::psum});
  ops.push_back({.id = Prim::pmean, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"groups", K::groups, kOptional}}, .communicates_operand = true,
                 .equal_within_groups = true, .infer = all_reduce_of<ReduceOp::mean>, .vjp = pmean_vjp,
                 .jvp = linear_jvp, .batch = reduction_batch, .collective = &rows::pmean});
  for (const auto& [id, row] : {std::pair{Prim::pmax, &rows::pmax}, std::pair{Prim::pmin, &rows::pmin}}) {
    ops.push_back({.id = id, .min_inputs = 1, .max_inputs = 1,
                   .params = {{"axes", K::axes}, {"groups", K::groups, kOptional}}, .communicates_operand = true,
                   .equal_within_groups = true, .infer = all_reduce, .batch = reduction_batch,
                   .no_rule = kNoExtremumRule, .collective = row});
  }
  ops.push_back({.id = Prim::pprod, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"groups", K::groups, kOptional}}, .communicates_operand = true,
                 .equal_within_groups = true, .infer = all_reduce_of<ReduceOp::prod>, .vjp = pprod_vjp,
                 .jvp = pprod_jvp, .batch = reduction_batch, .collective = &rows::pprod});
  // Its form is the identity (the inputs are equal already): no reduction runs, the dtype stays.
  ops.push_back({.id = Prim::all_reduce_identical_inputs, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"groups", K::groups, kOptional}}, .infer = all_reduce,
                 .vjp = identical_inputs_vjp, .jvp = linear_jvp, .batch = identity_batch, .collective = &rows::all_reduce_identical_inputs});
  ops.push_back({.id = Prim::all_reduce_identical_grad_inputs, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"groups", K::groups, kOptional}}, .equal_within_groups = true,
                 .infer = all_reduce_of<ReduceOp::sum>, .vjp = identical_grad_inputs_vjp, .jvp = linear_jvp,
                 .batch = reduction_batch, .collective = &rows::all_reduce_identical_grad_inputs});
  ops.push_back({.id = Prim::replicated_reduce_scatter, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"groups", K::groups, kOptional}, {"op", K::string, kOptional}},
                 .infer = flat_reduce_scatter, .vjp = replicated_reduce_scatter_vjp,
                 .jvp = replicated_reduce_scatter_jvp, .batch = replicated_reduce_scatter_batch,
                 .collective = &rows::replicated_reduce_scatter});
  ops.push_back({.id = Prim::replica_sharded_slice, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"groups", K::groups, kOptional}}, .infer = flat_shard,
                 .vjp = replica_sharded_slice_vjp, .jvp = linear_jvp, .batch = replica_sharded_slice_batch, .collective = &rows::replica_sharded_slice});
  ops.push_back({.id = Prim::gather_shards, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"shape", K::ints}, {"groups", K::groups, kOptional}},
                 .equal_within_groups = true, .infer = gather_shards, .vjp = gather_shards_vjp, .jvp = linear_jvp,
                 .batch = gather_shards_batch, .collective = &rows::gather_shards});
  ops.push_back({.id = Prim::all_gather, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"axis", K::integer}, {"groups", K::groups, kOptional},
                            {"tiled", K::boolean, kOptional}},
                 .communicates_operand = true, .equal_within_groups = true, .infer = all_gather,
                 .vjp = all_gather_vjp, .jvp = linear_jvp, .batch = all_gather_batch, .collective = &rows::all_gather});
  ops.push_back({.id = Prim::psum_scatter, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"axis", K::integer}, {"groups", K::groups, kOptional},
                            {"tiled", K::boolean, kOptional}},
                 .communicates_operand = true, .infer = psum_scatter, .vjp = psum_scatter_vjp, .jvp = linear_jvp,
                 .batch = psum_scatter_batch, .collective = &rows::psum_scatter});
  ops.push_back({.id = Prim::all_to_all, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"split_axis", K::integer}, {"concat_axis", K::integer},
                            {"groups", K::groups, kOptional}, {"tiled", K::boolean, kOptional}},
                 .communicates_operand = true, .infer = all_to_all, .vjp = all_to_all_vjp, .jvp = linear_jvp,
                 .batch = all_to_all_batch, .collective = &rows::all_to_all});
  ops.push_back({.id = Prim::ppermute, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"perm", K::permutation}}, .communicates_operand = true,
                 .infer = ppermute, .vjp = ppermute_vjp, .jvp = linear_jvp, .batch = ppermute_batch, .collective = &rows::ppermute});
  ops.push_back({.id = Prim::pbroadcast, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axes", K::axes}, {"source", K::integer}}, .communicates_operand = true,
                 .infer = pbroadcast, .vjp = pbroadcast_vjp, .jvp = linear_jvp, .batch = pbroadcast_batch, .collective = &rows::pbroadcast});
  // An int32 result: no derivative to take.
  ops.push_back({.id = Prim::axis_index, .min_inputs = 0, .max_inputs = 0, .params = {{"axes", K::axes}},
                 .infer = axis_index, .batch = axis_index_batch, .collective = &rows::axis_index});
  // shard_map's pvary changes a value's type only (its varying axes): the data stays, a kernel of its own (the
  // executor runs it locally, no replica meets).
  ops.push_back({.id = Prim::pvary, .min_inputs = 1, .max_inputs = 1, .params = {{"axes", K::axes}}, .infer = pvary,
                 .kernel = [](const std::vector<Array>& in, const Params&) -> std::vector<Array> { return {in[0]}; },
                 .vjp = pvary_vjp, .jvp = linear_jvp, .batch = identity_batch});
}

}  // namespace weft::program
