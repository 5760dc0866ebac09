// The array kernels of the program layer's ops: for each pure array op of the registry, the weft::ops call
// that computes it. The executor (runtime layer) runs these between the collectives and effects it handles
// itself; a kernel's result has exactly the type the op's inference rule gives (the executor checks).
#pragma once
#include <string>
#include <vector>

#include "program.hpp"

namespace weft::program {

using Kernel = std::vector<Array> (*)(const std::vector<Array>& ins, const Params& params);

// The kernel of `op`; nullptr for the collectives and the session effects (and unknown ops).
Kernel find_kernel(const std::string& op);

}  // namespace weft::program
