// Liveness from one forward pass (last use of each value) and a simulation of the free-after-last-use policy.
#include "liveness.hpp"

#include <algorithm>

namespace weft::program {
namespace {

constexpr int kNever = -1;
constexpr int kForever = -2;  // a program output: held past the end

std::vector<int> last_uses(const Program& program) {
  std::vector<int> last(program.types.size(), kNever);
  for (std::size_t i = 0; i < program.equations.size(); ++i) {
    for (ValueId id : program.equations[i].inputs) last[id] = static_cast<int>(i);
  }
  for (ValueId id : program.outputs) last[id] = kForever;
  for (ValueId id : program.constants) last[id] = kForever;  // held by the program, not by a run
  return last;
}

}  // namespace

Liveness analyze_liveness(const Program& program) {
  const std::vector<int> last = last_uses(program);
  Liveness result;
  result.dies_after.resize(program.equations.size());
  std::size_t live_buffers = 0;
  std::size_t live_bytes = 0;
  for (ValueId id : program.inputs) {
    live_buffers += 1;
    live_bytes += program.types[id].num_bytes();
  }
  result.peak_buffers = live_buffers;
  result.peak_bytes = live_bytes;
  for (ValueId id : program.inputs) {
    if (last[id] != kNever) continue;
    result.unused_inputs.push_back(id);
    live_buffers -= 1;
    live_bytes -= program.types[id].num_bytes();
  }
  for (std::size_t i = 0; i < program.equations.size(); ++i) {
    const Equation& eq = program.equations[i];
    for (ValueId id : eq.outputs) {
      live_buffers += 1;
      live_bytes += program.types[id].num_bytes();
    }
    result.peak_buffers = std::max(result.peak_buffers, live_buffers);
    result.peak_bytes = std::max(result.peak_bytes, live_bytes);
    std::vector<ValueId>& dying = result.dies_after[i];
    for (ValueId id : eq.inputs) {
      const bool last_use = last[id] == static_cast<int>(i);
      if (last_use && std::find(dying.begin(), dying.end(), id) == dying.end()) dying.push_back(id);
    }
    for (ValueId id : eq.outputs) {
      if (last[id] == kNever) dying.push_back(id);
    }
    for (ValueId id : dying) {
      live_buffers -= 1;
      live_bytes -= program.types[id].num_bytes();
    }
  }
  return result;
}

}  // namespace weft::program
