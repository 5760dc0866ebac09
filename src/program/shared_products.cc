// Shared products (shared_products.hpp): the true-varying analysis and the eligibility rule.
#include "shared_products.hpp"

#include <algorithm>
#include <iterator>

#include "op_registry.hpp"

namespace weft::program {
namespace {

std::vector<std::string> sorted_union(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> out;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::vector<std::string> sorted_intersection(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::vector<std::string> sorted_copy(std::vector<std::string> axes) {
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

bool is_float(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16; }

bool flag_of(const Params& params, const char* name) {
  auto it = params.find(name);
  return it != params.end() && std::holds_alternative<bool>(it->second) && std::get<bool>(it->second);
}

}  // namespace

std::vector<std::vector<std::string>> true_varying(const Program& program, const std::vector<bool>& computes_locally) {
  std::vector<std::vector<std::string>> axes(program.types.size());
  for (std::size_t id = 0; id < program.types.size(); ++id) axes[id] = sorted_copy(program.types[id].varying);
  for (std::size_t i = 0; i < program.equations.size(); ++i) {
    const Equation& eq = program.equations[i];
    if (i >= computes_locally.size() || !computes_locally[i]) {
      const OpInfo* info = find_op(eq.op);
      std::vector<std::string> extra;
      if (info != nullptr && info->effectful) {
        for (const MeshAxis& a : program.mesh.axes()) extra.push_back(a.name);  // a variable, a host load
      } else if (eq.op == "all_reduce_identical_inputs") {
        for (ValueId id : eq.inputs) extra = sorted_union(extra, axes[id]);  // the identity forward
      }
      for (ValueId id : eq.outputs) axes[id] = sorted_union(axes[id], sorted_copy(extra));
      continue;
    }
    std::vector<std::string> in;
    for (ValueId id : eq.inputs) in = sorted_union(in, axes[id]);
    // A pvary's result holds its operand's data; any other local op's, data computed from its inputs alone.
    // Never more than declared (a rule may know better, e.g. a constant result).
    for (ValueId id : eq.outputs) axes[id] = sorted_intersection(in, axes[id]);
  }
  return axes;
}

std::vector<std::optional<SharedProduct>> find_shared_products(const Program& program,
                                                               const std::vector<bool>& computes_locally) {
  std::vector<std::optional<SharedProduct>> out(program.equations.size());
  const std::vector<std::vector<std::string>> axes = true_varying(program, computes_locally);
  for (std::size_t i = 0; i < program.equations.size(); ++i) {
    const Equation& eq = program.equations[i];
    if (eq.op != "matmul" || eq.inputs.size() != 2 || flag_of(eq.params, "transpose_a")) continue;
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
