// One backward sweep: an equation is live when it is effectful or defines a value something live uses.
#include "dead_code.hpp"

#include "op_registry.hpp"

namespace weft::program {

Program eliminate_dead_code(const Program& program) {
  std::vector<bool> needed(program.types.size(), false);
  for (ValueId id : program.outputs) needed[id] = true;
  std::vector<bool> keep(program.equations.size(), false);
  for (std::size_t i = program.equations.size(); i-- > 0;) {
    const Equation& eq = program.equations[i];
    bool live = eq.info().effectful;
    for (ValueId id : eq.outputs) live = live || needed[id];
    if (!live) continue;
    keep[i] = true;
    for (ValueId id : eq.inputs) needed[id] = true;
  }
  Program result = program;
  result.equations.clear();
  for (std::size_t i = 0; i < program.equations.size(); ++i) {
    if (keep[i]) result.equations.push_back(program.equations[i]);
  }
  // Constants nothing live uses go too (a trace captures every array it meets).
  result.constants.clear();
  result.constant_values.clear();
  for (std::size_t k = 0; k < program.constants.size(); ++k) {
    if (!needed[program.constants[k]]) continue;
    result.constants.push_back(program.constants[k]);
    result.constant_values.push_back(program.constant_values[k]);
  }
  return result;
}

}  // namespace weft::program
