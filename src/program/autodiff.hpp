// Reverse mode on programs (issue 23): the VJP of a program as another program, built equation by equation
// from one transpose rule per op, as JAX transposes a jaxpr. Collectives follow JAX's pmap rules (psum ->
// psum, all_gather <-> psum_scatter, ppermute -> the inverse permutation, all_to_all with its axes swapped;
// pmax / pmin have none). Integer and boolean values carry no cotangent.
#pragma once
#include <string>
#include <vector>

#include "program.hpp"

namespace weft::program {

// The VJP of `program` (verified) with respect to its inputs at positions `wrt`: a program whose inputs are
// the primal inputs, then one cotangent per output (each of its output's type), and whose outputs are the
// primal outputs, then one cotangent per `wrt` input (zeros where nothing flows). An op without a rule is an
// InvalidArgument naming the equation and the op.
Program vjp_program(const Program& program, const std::vector<int>& wrt);
// The same, also saying per equation of the result whether the backward emitted it (a rule's equation, or a
// checkpoint region's forward recomputed for it) rather than the forward pass: what a caller splitting the VJP
// into stored residuals (the forward's values the backward reads) and a backward keeps on the backward side
// (scan's rule, with partial_eval's `recompute`).
Program vjp_program(const Program& program, const std::vector<int>& wrt, std::vector<bool>& backward);

// The values the backward pass of vjp_program(program, wrt) reads from the forward pass (JAX's residuals, what
// jax.ad_checkpoint.print_saved_residuals lists), in the order first read: a checkpoint region's recomputed
// values are not among them, its inputs are. `input` is the primal input's index when the value is one (-1
// otherwise); `op` and `source` name the equation that computed it.
struct SavedResidual {
  ValueType type;
  int input = -1;
  std::string op, source;
};
std::vector<SavedResidual> saved_residuals(const Program& program, const std::vector<int>& wrt);

// Appends `inlined`'s equations to `into`, its inputs bound to `inputs` (ids of `into`); returns the ids of
// its outputs. The meshes must agree.
class Builder;
std::vector<ValueId> inline_program(Builder& into, const Program& inlined, const std::vector<ValueId>& inputs);

}  // namespace weft::program
