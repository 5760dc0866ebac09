// Inference for the collectives (JAX's names and parameters): the axes they run over must be mesh axes, their
// groups (axis_index_groups) a partition of the indices along those axes, and each one's result type and
// varying axes follow JAX's rules (a psum'd value is invariant along the summed axes; axis_index varies).
#include <algorithm>
#include <set>

#include "op_registry.hpp"

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
  const auto& axes = param_as<std::vector<std::string>>(params, "axes", "a tuple of axis names");
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
  const auto& groups = param_as<Groups>(params, "groups", "a tuple of index tuples");
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
  return has_param(params, "groups") && param_as<Groups>(params, "groups", "a tuple of index tuples").size() > 1;
}

// The varying axes of a reduction's or gather's result: the input's without the collective's axes, for the
// result is the same on every member. Not so with several groups: each group has its own result, so the result
// still varies along the axes where the input did (JAX's pmap does not type this; weft's types decide which
// local replicas may share a computation, so a grouped result typed invariant would hand one group another's
// values: issue 45).
std::vector<std::string> without_axes(std::vector<std::string> varying, const Params& params) {
  if (split_into_groups(params)) return varying;
  const auto& axes = param_as<std::vector<std::string>>(params, "axes", "a tuple of axis names");
  std::erase_if(varying, [&](const std::string& a) { return std::count(axes.begin(), axes.end(), a) > 0; });
  return varying;
}

std::vector<std::string> with_axes(std::vector<std::string> varying, const Params& params) {
  const auto& axes = param_as<std::vector<std::string>>(params, "axes", "a tuple of axis names");
  std::set<std::string> all(varying.begin(), varying.end());
  all.insert(axes.begin(), axes.end());
  return {all.begin(), all.end()};
}

// A dimension parameter of the operand (past_end: one past the last is allowed, where an axis is inserted);
// negative counts from the end, as in JAX. Returns it non-negative.
std::int64_t dimension(const ValueType& in, const Params& params, const std::string& name, bool past_end = false) {
  const std::int64_t axis = param_as<std::int64_t>(params, name, "an int");
  const auto rank = static_cast<std::int64_t>(in.shape.size()) + (past_end ? 1 : 0);
  if (axis < -rank || axis >= rank) {
    throw RuleError(name + " " + std::to_string(axis) + " is out of range for " + type_text(in) + " (rank " +
                    std::to_string(in.shape.size()) + "): it must be in [" + std::to_string(-rank) + ", " +
                    std::to_string(rank - 1) + "]" + (past_end ? " (an untiled all_gather inserts a new axis)" : ""));
  }
  return axis < 0 ? axis + rank : axis;
}

bool tiled(const Params& params) { return has_param(params, "tiled") && param_as<bool>(params, "tiled", "a bool"); }

std::vector<ValueType> all_reduce(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  participants(params, mesh);
  ValueType out = ins[0];
  out.varying = without_axes(out.varying, params);
  return {out};
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
  for (const auto& [from, to] : param_as<Permutation>(params, "perm", "a tuple of (source, destination) pairs")) {
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
  out.shape = param_as<std::vector<std::int64_t>>(params, "shape", "a tuple of ints");
  if (out.num_elements() > ins[0].shape[0] * g) {
    throw RuleError("shape " + type_text(out) + " needs more than the " + std::to_string(g) + " shards of " +
                    type_text(ins[0]) + " hold");
  }
  out.varying = without_axes(out.varying, params);
  return {out};
}

}  // namespace

void register_collective_ops(std::vector<OpInfo>& ops) {
  for (const char* name : {"psum", "pmean", "pmax", "pmin", "pprod", "all_reduce_identical_inputs",
                           "all_reduce_identical_grad_inputs"}) {
    ops.push_back({name, 1, 1, {"axes"}, {"groups"}, false, all_reduce});
  }
  ops.push_back({"replicated_reduce_scatter", 1, 1, {"axes"}, {"groups", "op"}, false, flat_shard});
  ops.push_back({"replica_sharded_slice", 1, 1, {"axes"}, {"groups"}, false, flat_shard});
  ops.push_back({"gather_shards", 1, 1, {"axes", "shape"}, {"groups"}, false, gather_shards});
  ops.push_back({"all_gather", 1, 1, {"axes", "axis"}, {"groups", "tiled"}, false, all_gather});
  ops.push_back({"psum_scatter", 1, 1, {"axes", "axis"}, {"groups", "tiled"}, false, psum_scatter});
  ops.push_back({"all_to_all", 1, 1, {"axes", "split_axis", "concat_axis"}, {"groups", "tiled"}, false, all_to_all});
  ops.push_back({"ppermute", 1, 1, {"axes", "perm"}, {}, false, ppermute});
  ops.push_back({"axis_index", 0, 0, {"axes"}, {}, false, axis_index});
  ops.push_back({"pvary", 1, 1, {"axes"}, {}, false, pvary});
}

}  // namespace weft::program
