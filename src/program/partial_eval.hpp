// Partial evaluation (JAX's pe.partial_eval_jaxpr_nounits): a program split in two by data dependence, given
// which of its inputs are known now. The known program runs now; the unknown one later, from the residuals
// the known one leaves it and the inputs that were unknown. linearize is its first user: the JVP program
// split with the primals known runs the primal computation once, and the tangent (linear) part alone per call.
#pragma once
#include <cstddef>
#include <vector>

#include "program.hpp"

namespace weft::program {

// known: the known inputs in -> the outputs that are known (in order), then the residuals out.
// unknown: the residuals, then the unknown inputs in -> the unknown outputs (in order) out.
// out_unknowns[k]: whether output k comes from the unknown program. Both programs are verified.
struct PartialEval {
  Program known;
  Program unknown;
  std::vector<bool> out_unknowns;
  std::size_t num_residuals = 0;
};

// An equation is unknown when any of its inputs is; its results are then unknown too. A known value an
// unknown equation reads is a residual (once, in the order first read), except a constant, which the unknown
// program holds itself. Output k is unknown when it depends on an unknown input or `instantiate[k]` (empty:
// none): an instantiated known output is passed through as a residual. Only the unknown equations an unknown
// output or an effect needs are kept, so no residual is computed for nothing.
//
// Collectives are equations like any other: one whose operand is known stays in the known program (every
// replica splits the same program the same way, so the replicas still meet in the same order). Session effects
// keep their order: once one effect is unknown, every later effect goes to the unknown program as well (its
// known operands as residuals), so no known effect runs before an unknown one that preceded it.
//
// `recompute` (empty: none) flags equations to put on the unknown side even when their inputs are known (JAX's
// partial_eval_jaxpr_custom with a policy saying their results are not saveable): their known inputs become
// residuals instead of their results, so the unknown program computes them again. How scan's VJP rule keeps a
// checkpoint region of its body out of the stored residuals (vjp_program's `recomputed`).
PartialEval partial_eval(const Program& program, const std::vector<bool>& unknowns,
                         const std::vector<bool>& instantiate = {}, const std::vector<bool>& recompute = {});

}  // namespace weft::program
