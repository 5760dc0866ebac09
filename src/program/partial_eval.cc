// Partial evaluation (partial_eval.hpp): one forward sweep says which values are unknown, one backward sweep
// which unknown equations the unknown outputs (and effects) need, then each program is built from its side's
// equations, the residuals being the known values the kept unknown equations read.
#include "partial_eval.hpp"

#include <set>

#include "builder.hpp"
#include "op_registry.hpp"
#include "weft/error.hpp"

namespace weft::program {
namespace {

// Effects are never dropped nor reordered (dead_code.hpp).
bool is_effect(const Equation& eq) { return eq.info().effectful; }

}  // namespace

PartialEval partial_eval(const Program& p, const std::vector<bool>& unknowns, const std::vector<bool>& instantiate,
                         const std::vector<bool>& recompute) {
  if (unknowns.size() != p.inputs.size()) {
    throw InvalidArgument("partial_eval: " + std::to_string(unknowns.size()) + " unknown flags for a program of " +
                          std::to_string(p.inputs.size()) + " inputs (one per input)");
  }
  if (!instantiate.empty() && instantiate.size() != p.outputs.size()) {
    throw InvalidArgument("partial_eval: " + std::to_string(instantiate.size()) +
                          " instantiate flags for a program of " + std::to_string(p.outputs.size()) +
                          " outputs (one per output, or none)");
  }
  const std::size_t n_eq = p.equations.size();
  if (!recompute.empty() && recompute.size() != n_eq) {
    throw InvalidArgument("partial_eval: " + std::to_string(recompute.size()) + " recompute flags for a program of " +
                          std::to_string(n_eq) + " equations (one per equation, or none)");
  }
  std::vector<char> unknown(p.types.size(), 0);
  for (std::size_t k = 0; k < p.inputs.size(); ++k) unknown[p.inputs[k]] = unknowns[k] ? 1 : 0;

  // Forward: which equations (and so which values) are unknown.
  std::vector<char> eq_unknown(n_eq, 0);
  bool effects_unknown = false;  // an earlier effect went to the unknown program
  for (std::size_t i = 0; i < n_eq; ++i) {
    const Equation& eq = p.equations[i];
    bool u = !recompute.empty() && recompute[i];
    for (ValueId id : eq.inputs) u = u || unknown[id] != 0;
    if (is_effect(eq)) {
      u = u || effects_unknown;
      effects_unknown = u;
    }
    eq_unknown[i] = u ? 1 : 0;
    for (ValueId id : eq.outputs) unknown[id] = u ? 1 : 0;
  }
  PartialEval result;
  for (std::size_t k = 0; k < p.outputs.size(); ++k) {
    result.out_unknowns.push_back(unknown[p.outputs[k]] != 0 || (!instantiate.empty() && instantiate[k]));
  }

  // Backward: the unknown equations an unknown output or an effect needs.
  std::vector<char> needed(p.types.size(), 0);
  for (std::size_t k = 0; k < p.outputs.size(); ++k) {
    if (result.out_unknowns[k]) needed[p.outputs[k]] = 1;
  }
  std::vector<char> keep(n_eq, 0);
  for (std::size_t i = n_eq; i-- > 0;) {
    if (eq_unknown[i] == 0) continue;
    const Equation& eq = p.equations[i];
    bool live = is_effect(eq);
    for (ValueId id : eq.outputs) live = live || needed[id] != 0;
    if (!live) continue;
    keep[i] = 1;
    for (ValueId id : eq.inputs) needed[id] = 1;
  }

  // The residuals: known values the unknown side reads, constants aside, each once.
  const std::set<ValueId> constants(p.constants.begin(), p.constants.end());
  std::vector<ValueId> residuals;
  std::set<ValueId> is_residual;
  auto add_residual = [&](ValueId id) {
    if (unknown[id] == 0 && constants.count(id) == 0 && is_residual.insert(id).second) residuals.push_back(id);
  };
  for (std::size_t i = 0; i < n_eq; ++i) {
    if (keep[i] == 0) continue;
    for (ValueId id : p.equations[i].inputs) add_residual(id);
  }
  for (std::size_t k = 0; k < p.outputs.size(); ++k) {
    if (result.out_unknowns[k]) add_residual(p.outputs[k]);
  }
  result.num_residuals = residuals.size();

  // Each side's program: its inputs, the constants (dead code removal drops those unused), its equations.
  auto build = [&](bool unknown_side) {
    Builder b(p.mesh, p.rules);
    std::vector<ValueId> map(p.types.size(), -1);
    if (unknown_side) {
      for (ValueId id : residuals) map[id] = b.input(p.types[id]);
    }
    for (std::size_t k = 0; k < p.inputs.size(); ++k) {
      if (unknowns[k] == unknown_side) map[p.inputs[k]] = b.input(p.types[p.inputs[k]]);
    }
    for (std::size_t k = 0; k < p.constants.size(); ++k) map[p.constants[k]] = b.constant(p.constant_values[k]);
    for (std::size_t i = 0; i < n_eq; ++i) {
      if (unknown_side ? keep[i] == 0 : eq_unknown[i] != 0) continue;
      const Equation& eq = p.equations[i];
      std::vector<ValueId> ins;
      for (ValueId id : eq.inputs) ins.push_back(map[id]);
      const std::vector<ValueId> outs = b.emit(eq.info(), ins, eq.params, eq.source);
      for (std::size_t k = 0; k < outs.size(); ++k) map[eq.outputs[k]] = outs[k];
    }
    std::vector<ValueId> outputs;
    for (std::size_t k = 0; k < p.outputs.size(); ++k) {
      if (result.out_unknowns[k] == unknown_side) outputs.push_back(map[p.outputs[k]]);
    }
    if (!unknown_side) {
      for (ValueId id : residuals) outputs.push_back(map[id]);
    }
    b.set_outputs(outputs);
    return b.build();
  };
  result.known = build(false);
  result.unknown = build(true);
  return result;
}

}  // namespace weft::program
