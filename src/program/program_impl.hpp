// What a built weft::Program holds (weft/program.hpp): the verified program, its liveness and, per
// equation, the array kernel that computes it (its primitive's row's; null where the executor acts itself:
// collectives, effects),
// and the steps it runs in (fusion).
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "fusion.hpp"
#include "liveness.hpp"
#include "program.hpp"

namespace weft {

struct Program::Impl {
  program::Program program;
  program::Liveness liveness;
  std::vector<program::Kernel> kernels;
  // The equations as the executor runs them: one by one, or fused runs (fusion.hpp).
  std::vector<program::Step> steps;
  // What the executor (the runtime layer, above this one) prepares from the program once, on its first run
  // (call sites, collective arguments), so that a run parses nothing: opaque here.
  mutable std::once_flag executor_once;
  mutable std::shared_ptr<const void> executor_data;
};

namespace program {
// A verified program made runnable (weft::Program): dead code removed, liveness, kernels, steps. What the
// builder's build() gives; the control-flow rules make their transformed sub-programs with it.
weft::Program runnable(Program verified);
}  // namespace program

}  // namespace weft
