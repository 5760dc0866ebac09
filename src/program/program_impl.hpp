// What a built weft::Program holds (weft/program.hpp): the verified program, its liveness and, per
// equation, the array kernel that computes it (null where the executor acts itself: collectives, effects).
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "kernels.hpp"
#include "liveness.hpp"
#include "program.hpp"

namespace weft {

struct Program::Impl {
  program::Program program;
  program::Liveness liveness;
  std::vector<program::Kernel> kernels;
  // What the executor (the runtime layer, above this one) prepares from the program once, on its first run
  // (call sites, collective arguments), so that a run parses nothing: opaque here.
  mutable std::once_flag executor_once;
  mutable std::shared_ptr<const void> executor_data;
};

}  // namespace weft
