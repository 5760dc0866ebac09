// The batching transform (transforms.hpp), JAX's vmap on a jaxpr: every value is either shared by all the
// examples or carries the batch axis in front; an equation none of whose inputs is batched (and which does
// not name vmap's axis) is emitted as it was, the others by their primitive's batching rule. So a vmapped
// program is one program over the whole batch, never a loop over examples.
#include <algorithm>
#include <map>

#include "autodiff.hpp"
#include "op_registry.hpp"
#include "rule_kit.hpp"
#include "transforms.hpp"
#include "verifier.hpp"
#include "weft/error.hpp"

namespace weft::program {
namespace {

// Whether the equation's collective parameters name `axis` (psum over vmap's axis, its axis_index).
bool names_axis(const Params& params, const std::string& axis) {
  if (axis.empty()) return false;
  const auto it = params.find("axes");
  if (it == params.end()) return false;
  const auto* names = std::get_if<std::vector<std::string>>(&it->second);
  return names != nullptr && std::find(names->begin(), names->end(), axis) != names->end();
}

// A control-flow equation (ops/control.cc) holds sub-programs traced on the program's mesh: where vmap's axis
// is one of its axes, they must be batched (to lose it, and for their collectives over it) even when no
// operand is batched.
bool holds_programs(const Equation& eq) {
  return std::any_of(eq.params.begin(), eq.params.end(),
                     [](const auto& param) { return std::holds_alternative<SubPrograms>(param.second); });
}

Mesh without_axis(const Mesh& mesh, const std::string& axis) {
  std::vector<MeshAxis> axes;
  for (const MeshAxis& a : mesh.axes()) {
    if (a.name != axis) axes.push_back(a);
  }
  return Mesh(axes);
}

ValueType per_example_input(ValueType type, bool batched, std::int64_t size, const std::string& axis) {
  if (batched) type.shape.insert(type.shape.begin(), size);
  type.varying.erase(std::remove(type.varying.begin(), type.varying.end(), axis), type.varying.end());
  return type;
}

}  // namespace

BatchedProgram batch_program(const Program& p, const std::vector<bool>& batched, std::int64_t size,
                             const std::string& axis_name) {
  if (batched.size() != p.inputs.size()) {
    throw InvalidArgument("vmap: " + std::to_string(batched.size()) + " batch flags for a program of " +
                          std::to_string(p.inputs.size()) + " inputs");
  }
  if (size < 0) throw InvalidArgument("vmap: the batch size must not be negative, got " + std::to_string(size));
  if (!axis_name.empty() && p.mesh.has_axis(axis_name) &&
      p.mesh.axes()[p.mesh.axis_position(axis_name)].size != size) {
    throw InvalidArgument("vmap: axis '" + axis_name + "' has size " +
                          std::to_string(p.mesh.axes()[p.mesh.axis_position(axis_name)].size) + " in the program, " +
                          "the batch " + std::to_string(size));
  }
  Builder b(axis_name.empty() || !p.mesh.has_axis(axis_name) ? p.mesh : without_axis(p.mesh, axis_name), p.rules);
  Emitter e(b);
  std::map<ValueId, ValueId> map;
  std::map<ValueId, bool> is_batched;
  for (std::size_t k = 0; k < p.inputs.size(); ++k) {
    const ValueId old = p.inputs[k];
    map[old] = b.input(per_example_input(p.types[old], batched[k], size, axis_name));
    is_batched[old] = batched[k];
  }
  for (std::size_t k = 0; k < p.constants.size(); ++k) {
    map[p.constants[k]] = b.constant(p.constant_values[k]);
    is_batched[p.constants[k]] = false;
  }
  for (std::size_t i = 0; i < p.equations.size(); ++i) {
    const Equation& eq = p.equations[i];
    e.set_source(eq.source);
    Params params = eq.params;
    params.erase(kCheckpointParam);
    BatchContext c{e, eq.info(), params, {}, {}, {}, {}, size, axis_name};
    for (ValueId id : eq.inputs) {
      c.in_types.push_back(p.types[id]);
      c.ins.push_back(map.at(id));
      c.batched.push_back(is_batched.at(id));
    }
    for (ValueId id : eq.outputs) c.out_types.push_back(p.types[id]);
    Batched result;
    try {
      if (!c.any_batched() && !names_axis(params, axis_name) &&
          !(holds_programs(eq) && !axis_name.empty() && p.mesh.has_axis(axis_name))) {
        result.outs = b.emit(eq.info(), c.ins, params, eq.source);
        result.batched.assign(result.outs.size(), false);
      } else {
        const OpInfo* info = &eq.info();
        if (info->batch == nullptr) {
          throw RuleError("no batching rule (vmap) for " + eq.name() + (info->no_rule.empty() ? " yet" : ": " + info->no_rule));
        }
        result = info->batch(c);
        if (result.outs.size() != eq.outputs.size() || result.batched.size() != eq.outputs.size()) {
          throw RuleError("the batching rule of " + eq.name() + " gave " + std::to_string(result.outs.size()) +
                          " results for " + std::to_string(eq.outputs.size()) + " outputs");
        }
      }
    } catch (const RuleError& err) {
      throw InvalidArgument(equation_error_prefix(p, i) + "under vmap: " + err.what());
    }
    for (std::size_t k = 0; k < eq.outputs.size(); ++k) {
      map[eq.outputs[k]] = result.outs[k];
      is_batched[eq.outputs[k]] = result.batched[k];
    }
  }
  BatchedProgram out;
  std::vector<ValueId> outputs;
  for (ValueId id : p.outputs) {
    outputs.push_back(map.at(id));
    out.out_batched.push_back(is_batched.at(id));
  }
  b.set_outputs(outputs);
  out.program = b.build();
  return out;
}

Program conform_batched(BatchedProgram batched, const std::vector<bool>& want, std::int64_t size) {
  if (batched.out_batched == want) return std::move(batched.program);
  const Program& p = batched.program;
  Builder b(p.mesh, p.rules);
  Emitter e(b);
  std::vector<ValueId> ins;
  for (ValueId id : p.inputs) ins.push_back(b.input(p.types[id]));
  std::vector<ValueId> outs = inline_program(b, p, ins);
  for (std::size_t k = 0; k < outs.size(); ++k) {
    if (want[k] && !batched.out_batched[k]) {
      std::vector<std::int64_t> shape = e.type(outs[k]).shape;
      shape.insert(shape.begin(), size);
      outs[k] = e.broadcast_to(outs[k], shape);
    } else if (!want[k] && batched.out_batched[k]) {
      outs[k] = e.emit(Prim::sum, {outs[k]}, {{"axes", ints_param({0})}});
    }
  }
  b.set_outputs(outs);
  return b.build();
}

}  // namespace weft::program
