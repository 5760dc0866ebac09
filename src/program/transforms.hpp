// Forward mode and batching on programs (issue 46), as JAX's jvp and vmap act on a jaxpr: each a walk over
// the equations that asks the primitive's own rule (ops/*.cc) what to emit. The VJP's walk is autodiff.hpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "program.hpp"

namespace weft::program {

// The JVP of `program` (verified): a program whose inputs are the primal inputs, then one tangent per input
// (the input's type; integer and bool inputs' tangents are read as zero), and whose outputs are the primal
// outputs, then one tangent per output (zeros for integer and bool outputs). An op without a JVP rule where a
// tangent reaches it is an InvalidArgument naming the equation and the op.
Program jvp_program(const Program& program);

// The batched program of `program` (vmap): input k carries a leading batch axis of `size` where
// `batched[k]`, and is shared by every example otherwise. `axis_name` (may be empty) is vmap's: a mesh axis
// of `program` of that size, which the batched program no longer has; collectives over it act along the
// batch axis. Returns the program and, per output, whether it carries the batch axis (in front).
struct BatchedProgram {
  Program program;
  std::vector<bool> out_batched;
};
BatchedProgram batch_program(const Program& program, const std::vector<bool>& batched, std::int64_t size,
                             const std::string& axis_name = {});

// `batched`'s program with its outputs carrying the batch axis (of `size`) exactly where `want` says:
// broadcast along it where the program left an output shared, summed over it where the program batched one
// `want` needs shared (a custom_vjp cotangent of an input every example shares: the examples' cotangents add
// up). What a rule emitting a batched sub-program needs when the caller fixes its outputs' batching (a custom
// rule's, a loop body's carry, every branch of a cond alike).
Program conform_batched(BatchedProgram batched, const std::vector<bool>& want, std::int64_t size);

}  // namespace weft::program
