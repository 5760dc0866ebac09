// What a built weft::Program holds (weft/program.hpp): the verified program, its liveness and, per
// equation, the array kernel that computes it (null where the executor acts itself: collectives, effects).
#pragma once
#include <vector>

#include "kernels.hpp"
#include "liveness.hpp"
#include "program.hpp"

namespace weft {

struct Program::Impl {
  program::Program program;
  program::Liveness liveness;
  std::vector<program::Kernel> kernels;
};

}  // namespace weft
