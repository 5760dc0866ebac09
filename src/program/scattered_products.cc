// gather_scattered_products (scattered_products.hpp): the pattern, the profit test and the rewrite.
#include "scattered_products.hpp"

#include <vector>

#include "op_registry.hpp"

namespace weft::program {
namespace {

// How many replicas one instance of the collective spans (its groups' size, else its axes' product).
std::int64_t members(const Params& p, const Mesh& mesh) {
  if (const Groups* groups = param_if<Groups>(p, "groups")) return static_cast<std::int64_t>(groups->front().size());
  std::int64_t n = 1;
  for (const std::string& a : param_axes(p)) n *= mesh.axes()[mesh.axis_position(a)].size;
  return n;
}

}  // namespace

Program gather_scattered_products(const Program& program) {
  std::vector<int> uses(program.types.size(), 0);
  std::vector<int> defined_by(program.types.size(), -1);
  for (std::size_t i = 0; i < program.equations.size(); ++i) {
    for (ValueId id : program.equations[i].inputs) ++uses[id];
    for (ValueId id : program.equations[i].outputs) defined_by[id] = static_cast<int>(i);
  }
  for (ValueId id : program.outputs) ++uses[id];

  Program out = program;
  out.equations.clear();
  std::vector<bool> dropped(program.equations.size(), false);
  std::vector<std::vector<Equation>> replacement(program.equations.size());
  for (std::size_t i = 0; i < program.equations.size(); ++i) {
    const Equation& scatter = program.equations[i];
    if (scatter.prim() != Prim::psum_scatter || !param_flag(scatter.params, "tiled") || param_int(scatter.params, "axis", -1) != 0) continue;
    const ValueId product = scatter.inputs[0];
    const int m_index = defined_by[product];
    if (m_index < 0 || uses[product] != 1) continue;
    const Equation& matmul = program.equations[static_cast<std::size_t>(m_index)];
    if (matmul.prim() != Prim::matmul || !param_flag(matmul.params, "transpose_a") || param_flag(matmul.params, "transpose_b")) continue;
    const ValueType& x = program.types[matmul.inputs[0]];
    const ValueType& d = program.types[matmul.inputs[1]];
    if (x.shape.size() != 2 || d.shape.size() != 2 || !is_floating(x.dtype) || x.dtype != d.dtype) continue;
    const std::int64_t k = members(scatter.params, program.mesh);
    const std::int64_t b = x.shape[0], n = x.shape[1], m = d.shape[1];
    if (k < 2 || n % k != 0 || b * (n + k * m) >= n * m) continue;

    Params common{{"axes", scatter.params.at("axes")}, {"tiled", Param{true}}};
    if (const auto it = scatter.params.find("groups"); it != scatter.params.end()) common["groups"] = it->second;
    Params to_all = common;
    to_all["split_axis"] = Param{std::int64_t{1}};
    to_all["concat_axis"] = Param{std::int64_t{0}};
    Params gather = common;
    gather["axis"] = Param{std::int64_t{0}};
    const auto columns = static_cast<ValueId>(out.types.size());
    out.types.push_back(infer_result_types(op_info(Prim::all_to_all), {x}, to_all, program.mesh, program.rules)[0]);
    const auto rows = static_cast<ValueId>(out.types.size());
    out.types.push_back(infer_result_types(op_info(Prim::all_gather), {d}, gather, program.mesh, program.rules)[0]);
    replacement[i] = {Equation{Prim::all_to_all, to_all, {matmul.inputs[0]}, {columns}, scatter.source},
                      Equation{Prim::all_gather, gather, {matmul.inputs[1]}, {rows}, scatter.source},
                      Equation{Prim::matmul, {{"transpose_a", Param{true}}}, {columns, rows}, scatter.outputs, matmul.source}};
    dropped[static_cast<std::size_t>(m_index)] = true;
  }
  for (std::size_t i = 0; i < program.equations.size(); ++i) {
    if (dropped[i]) continue;
    if (replacement[i].empty()) {
      out.equations.push_back(program.equations[i]);
    } else {
      for (Equation& eq : replacement[i]) out.equations.push_back(std::move(eq));
    }
  }
  return out;
}

}  // namespace weft::program
