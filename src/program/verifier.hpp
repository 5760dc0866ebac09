// The verifier: a program is well formed when every value is defined once before its use, every equation
// names a registered op with its arity and parameters, and each declared result type is the inferred one.
#pragma once
#include <string>

#include "program.hpp"

namespace weft::program {

// Throws weft::InvalidArgument naming the first broken rule, and for an equation its index and text:
// "equation 3 `d:f32[4,8] = psum[axes=('j',)] c`: unbound axis name: j (the mesh's axes are ('i'))".
void verify(const Program& program);

// The prefix every equation error carries: "equation 3 `d:f32[4,8] = psum[axes=('j',)] c`: ".
std::string equation_error_prefix(const Program& program, std::size_t index);

}  // namespace weft::program
