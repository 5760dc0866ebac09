// custom_vjp (JAX's jax.custom_vjp; docs/autodiff.md, "custom_vjp"): a function whose reverse-mode rule is
// the user's, not the transposes of its equations.
//
// How a call is recorded. The user's fwd is traced into the enclosing program like any code, and one more
// equation closes the call:
//
//   outs... = custom_vjp_call[name='f' outputs=n primals=k rule=R] primals... fwd_outs... residuals...
//
// It computes the identity on fwd_outs (so the rest of the program reads fwd's results through it), and its
// operands record, in order and by value, everything the VJP needs: the primal inputs that receive the
// cotangents, fwd's outputs and the residuals bwd reads. Holding them as operands (rather than as value
// numbers in a side table) is what lets the call survive dead-code elimination, inlining into another trace
// and re-emission by the VJP, which all renumber values: an operand is renamed with the program. Only the
// user's bwd lives outside the program: traced once per call into its own Program over (residual types,
// output cotangent types) and kept in the process-wide table below under the number R.
//
// The VJP (autodiff.cc) transposes the call by inlining bwd's program on the residuals and the outputs'
// cotangents and giving its results to the primal operands; it gives nothing to the fwd_outs and residual
// operands, so no cotangent ever reaches fwd's own equations and their rules never run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "op_registry.hpp"
#include "program.hpp"

namespace weft::program {

inline const std::string kCustomVjpOp = "custom_vjp_call";

// A registered bwd: the program from (residuals..., output cotangents...) to one cotangent per primal input,
// and the user's function's name (for messages).
struct CustomVjpRule {
  Program bwd;
  std::string name;
};

// Registers `bwd` (verified); returns its number, unique in the process, for custom_vjp_call's `rule`. Rules
// are never removed: a program holding the number may be run or differentiated at any later time.
std::int64_t register_custom_vjp(Program bwd, std::string name);
// The rule numbered `rule`; a RuleError if there is none.
const CustomVjpRule& find_custom_vjp(std::int64_t rule);

// How a custom_vjp_call equation's operands split: [0, primals) the primal inputs, then `outputs` of fwd's
// outputs, then the residuals.
struct CustomVjpLayout {
  std::int64_t rule = 0;
  std::size_t primals = 0;
  std::size_t outputs = 0;
  std::size_t residuals = 0;
  std::string name;
};
CustomVjpLayout custom_vjp_layout(const Params& params, std::size_t operands);

void register_custom_vjp_ops(std::vector<OpInfo>& ops);

}  // namespace weft::program
