// The jaxpr-like text of a program (docs/programs.md): what make_program prints and what errors quote.
#pragma once
#include <string>
#include <vector>

#include "program.hpp"

namespace weft::program {

// Names of the values, jaxpr style (a..z, ba, bb, ...) in order of definition: inputs, then each equation's
// outputs; values used but never defined are named after those. Indexed by ValueId.
std::vector<std::string> value_names(const Program& program);
// A parameter's Python-like spelling: ('i',), 0, True, 'stream', float32, ((0, 1), (1, 0)).
std::string param_text(const Param& param);
// One equation: "d:f32[4,8] = psum[axes=('i',)] c" (no lhs for an equation with no results).
std::string equation_text(const Program& program, std::size_t index, const std::vector<std::string>& names);
std::string equation_text(const Program& program, std::size_t index);
// The whole program, "{ lambda ; a:f32[4,8] b:f32[8] . let\n    ...\n  in (d,) }".
std::string program_text(const Program& program);

}  // namespace weft::program
