// Buffer liveness: for each equation, the values whose last use it is, so the executor frees (or reuses) a
// buffer right after that equation; and the peak number and bytes of buffers live at once under that policy.
#pragma once
#include <cstddef>
#include <vector>

#include "program.hpp"

namespace weft::program {

struct Liveness {
  // dies_after[i]: values that are dead once equation i has run (its inputs used for the last time, and
  // its results nobody uses). Program outputs and constants (the program holds them) never die; program inputs nobody uses are in unused_inputs.
  std::vector<std::vector<ValueId>> dies_after;
  std::vector<ValueId> unused_inputs;
  // Peaks over the run, counting the program's inputs and, while an equation runs, its inputs and results.
  std::size_t peak_buffers = 0;
  std::size_t peak_bytes = 0;
};

// `program` must be verified (every use after its definition).
Liveness analyze_liveness(const Program& program);

}  // namespace weft::program
