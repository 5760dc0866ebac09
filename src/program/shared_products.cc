// Shared products (shared_products.hpp): the true-varying analysis and the eligibility rule.
#include "shared_products.hpp"

#include <algorithm>
#include <functional>
#include <iterator>
#include <set>
#include <unordered_map>
#include <utility>

#include "op_registry.hpp"

namespace weft::program {
namespace {

bool is_float(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16; }

// Classes along one axis of `size` coordinates: one for all (invariant), or one each (varying).
std::vector<int> one_class(std::int64_t size) { return std::vector<int>(static_cast<std::size_t>(size), 0); }
std::vector<int> class_each(std::int64_t size) {
  std::vector<int> out(static_cast<std::size_t>(size));
  for (std::size_t k = 0; k < out.size(); ++k) out[k] = static_cast<int>(k);
  return out;
}

// Classes renumbered in order of first appearance, so that equal partitions compare equal.
std::vector<int> canonical(const std::vector<int>& classes) {
  std::vector<int> renumbered(classes.size() + 1, -1);  // class ids are below the axis size
  std::vector<int> out(classes.size());
  int next = 0;
  for (std::size_t k = 0; k < classes.size(); ++k) {
    int& id = renumbered[static_cast<std::size_t>(classes[k])];
    if (id < 0) id = next++;
    out[k] = id;
  }
  return out;
}

// The coarsest classes finer than both: coordinates in one class of each (canonical). Linear in the axis size.
std::vector<int> meet(const std::vector<int>& a, const std::vector<int>& b) {
  const auto n = static_cast<std::int64_t>(a.size());
  std::unordered_map<std::int64_t, int> seen;  // (a's class, b's class) -> its class in the meet
  std::vector<int> out(a.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    out[k] = seen.emplace(a[k] * n + b[k], static_cast<int>(seen.size())).first->second;
  }
  return out;
}

// A class per coordinate along the axes `varies` names, one along the others.
ReplicaClasses classes_of(const Mesh& mesh, const std::function<bool(const std::string&)>& varies) {
  ReplicaClasses out;
  for (const MeshAxis& a : mesh.axes()) out.per_axis.push_back(varies(a.name) ? class_each(a.size) : one_class(a.size));
  return out;
}

// As the declared type says: a class per coordinate along its varying axes, one along the others.
ReplicaClasses declared(const Mesh& mesh, const ValueType& type) {
  return classes_of(mesh, [&](const std::string& axis) {
    return std::find(type.varying.begin(), type.varying.end(), axis) != type.varying.end();
  });
}

// A collective's result classes. Declared, but a reduction or gather in several axis index groups along one
// axis gives a class per group along it (the type rule keeps the axis varying: ops/collectives.cc) and its
// operand's classes along the other axes (each group's members there read the operand at their coordinates).
ReplicaClasses collective_classes(const Mesh& mesh, const Equation& eq, const ValueType& out,
                                  const ReplicaClasses& operand) {
  ReplicaClasses classes = declared(mesh, out);
  if (!eq.info().equal_within_groups) return classes;
  const auto* lists = param_if<Groups>(eq.params, "groups");
  const auto* named = param_if<std::vector<std::string>>(eq.params, "axes");
  if (lists == nullptr || named == nullptr || named->size() != 1) return classes;  // groups over several axes
  const std::size_t axis = static_cast<std::size_t>(mesh.axis_position(named->front()));
  if (!classes.varies_along(axis)) return classes;  // an invariant operand: one result everywhere
  for (std::size_t g = 0; g < lists->size(); ++g) {
    for (int member : (*lists)[g]) classes.per_axis[axis][static_cast<std::size_t>(member)] = static_cast<int>(g);
  }
  classes.per_axis[axis] = canonical(classes.per_axis[axis]);
  for (std::size_t a = 0; a < classes.per_axis.size(); ++a) {
    if (a != axis && classes.varies_along(a)) classes.per_axis[a] = operand.per_axis[a];
  }
  return classes;
}

}  // namespace

ReplicaClasses meet(const ReplicaClasses& a, const ReplicaClasses& b) {
  ReplicaClasses out;
  for (std::size_t k = 0; k < a.per_axis.size(); ++k) out.per_axis.push_back(meet(a.per_axis[k], b.per_axis[k]));
  return out;
}

bool ReplicaClasses::varies_along(std::size_t axis) const {
  const std::vector<int>& c = per_axis[axis];
  return std::any_of(c.begin(), c.end(), [&](int k) { return k != c.front(); });
}

std::vector<int> ReplicaClasses::keys(const Mesh& mesh) const {
  std::vector<int> out(static_cast<std::size_t>(mesh.size()), 0);
  for (std::size_t a = 0; a < per_axis.size(); ++a) {
    const int count = *std::max_element(per_axis[a].begin(), per_axis[a].end()) + 1;
    for (int r = 0; r < mesh.size(); ++r) {
      int& key = out[static_cast<std::size_t>(r)];
      key = key * count + per_axis[a][static_cast<std::size_t>(mesh.axis_index(r, mesh.axes()[a].name))];
    }
  }
  return out;
}

std::vector<ReplicaClasses> replica_classes(const Program& program, const std::vector<bool>& computes_locally) {
  const Mesh& mesh = program.mesh;
  std::vector<ReplicaClasses> classes(program.types.size());
  for (std::size_t id = 0; id < program.types.size(); ++id) classes[id] = declared(mesh, program.types[id]);
  for (std::size_t i = 0; i < program.equations.size(); ++i) {
    const Equation& eq = program.equations[i];
    // What the inputs together determine: the meet of their classes.
    ReplicaClasses in = classes_of(mesh, [](const std::string&) { return false; });
    for (ValueId id : eq.inputs) in = meet(in, classes[id]);
    const bool local = i < computes_locally.size() && computes_locally[i];
    const OpInfo* info = local ? nullptr : &eq.info();
    for (ValueId id : eq.outputs) {
      ReplicaClasses out;
      if (local) {
        // A pvary's result holds its operand's data; any other local op's, data computed from its inputs alone.
        // Never more than declared (a rule may know better, e.g. a constant result).
        out = in;
        for (std::size_t a = 0; a < out.per_axis.size(); ++a) {
          if (!classes[id].varies_along(a)) out.per_axis[a] = classes[id].per_axis[a];
        }
      } else if (info != nullptr && info->effectful) {
        out = classes_of(mesh, [](const std::string&) { return true; });  // a variable, a host load: any may differ
      } else if (eq.prim() == Prim::all_reduce_identical_inputs) {
        out = in;  // the identity forward
      } else {
        out = collective_classes(mesh, eq, program.types[id], in);
      }
      classes[id] = std::move(out);
    }
  }
  return classes;
}

std::vector<std::vector<std::string>> true_varying(const Program& program, const std::vector<bool>& computes_locally) {
  const std::vector<ReplicaClasses> classes = replica_classes(program, computes_locally);
  std::vector<std::vector<std::string>> axes(classes.size());
  for (std::size_t id = 0; id < classes.size(); ++id) {
    for (std::size_t a = 0; a < program.mesh.axes().size(); ++a) {
      if (classes[id].varies_along(a)) axes[id].push_back(program.mesh.axes()[a].name);
    }
    std::sort(axes[id].begin(), axes[id].end());
  }
  return axes;
}

std::vector<std::optional<SharedProduct>> find_shared_products(const Program& program,
                                                               const std::vector<bool>& computes_locally) {
  std::vector<std::optional<SharedProduct>> out(program.equations.size());
  const std::vector<std::vector<std::string>> axes = true_varying(program, computes_locally);
  for (std::size_t i = 0; i < program.equations.size(); ++i) {
    const Equation& eq = program.equations[i];
    if (eq.prim() != Prim::matmul || eq.inputs.size() != 2 || param_flag(eq.params, "transpose_a")) continue;
    const ValueType& rows = program.types[eq.inputs[0]];
    const ValueType& weight = program.types[eq.inputs[1]];
    if (rows.shape.size() < 2 || weight.shape.size() != 2 || rows.dtype != weight.dtype || !is_float(rows.dtype)) continue;
    const std::vector<std::string>& rows_axes = axes[eq.inputs[0]];
    const std::vector<std::string>& weight_axes = axes[eq.inputs[1]];
    const bool subset = std::includes(rows_axes.begin(), rows_axes.end(), weight_axes.begin(), weight_axes.end());
    if (!subset || weight_axes.size() == rows_axes.size()) continue;
    out[i] = SharedProduct{weight_axes};
  }
  return out;
}

}  // namespace weft::program
