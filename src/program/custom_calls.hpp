// custom_vjp and custom_jvp (JAX's jax.custom_vjp / jax.custom_jvp; docs/autodiff.md): functions whose
// derivative rule is the user's, not their equations' rules. Both ops live in ops/custom.cc with their rules.
//
// How a call is recorded. The function's own code (custom_vjp's fwd, custom_jvp's f) is traced into the
// enclosing program like any code, and one more equation closes the call:
//
//   outs... = custom_vjp_call[name='f' outputs=n primals=k rule=R] primals... fwd_outs... residuals...
//   outs... = custom_jvp_call[name='f' outputs=n primals=k rule=R] primals... f_outs...
//
// It computes the identity on fwd's / f's outputs (so the rest of the program reads them through it), and its
// operands record, by value, everything the rule needs: the primal inputs that receive the cotangents or
// whose tangents the rule reads, the function's outputs and (custom_vjp) the residuals bwd reads. Holding them
// as operands (rather than as value numbers in a side table) is what lets the call survive dead-code
// elimination, inlining into another trace and re-emission by the transforms, which all renumber values: an
// operand is renamed with the program. Only the user's rule lives outside the program, traced once per
// signature into its own Program and kept in the process-wide table below under the number R:
//   - custom_vjp: bwd, from (residuals..., output cotangents...) to one cotangent per primal input;
//   - custom_jvp: the jvp rule, from (primals..., tangents...) to (primal outputs..., tangent outputs...).
//
// The rules of the calls (ops/custom.cc):
//   - custom_vjp_call's VJP inlines bwd on the residuals and the outputs' cotangents and gives its results to
//     the primal operands; its JVP is refused, as JAX refuses it; batching batches bwd (a new rule).
//   - custom_jvp_call's JVP inlines the jvp rule on the primals and their tangents and takes its tangent
//     outputs; its VJP is the VJP of the jvp rule's tangent outputs with respect to its tangent inputs at
//     zero tangents, seeded with the outputs' cotangents (JAX transposes the JVP: the rule is linear in the
//     tangents); batching batches the jvp rule.
// Neither gives anything to the function's outputs (nor custom_vjp's residuals), so no cotangent reaches the
// function's own equations and their VJP rules never run; forward mode does not differentiate custom_jvp's f
// either (jvp.cc asks only for the tangents of the call's primal operands).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "op_registry.hpp"
#include "program.hpp"

namespace weft::program {

// Which user rule a registered program is: it is looked up by the call op of its kind only.
enum class CustomKind { vjp, jvp };

// A registered rule: custom_vjp's bwd or custom_jvp's jvp program (see above), and the user's function's name
// (for messages).
struct CustomRule {
  CustomKind kind;
  Program program;
  std::string name;
};

// Registers `program` (verified) as a rule of `kind`; returns its number, unique in the process, for the call's
// `rule`. Rules are never removed: a program holding the number may be run or transformed at any later time.
std::int64_t register_custom_rule(CustomKind kind, Program program, std::string name);
inline std::int64_t register_custom_vjp(Program bwd, std::string name) {
  return register_custom_rule(CustomKind::vjp, std::move(bwd), std::move(name));
}
inline std::int64_t register_custom_jvp(Program jvp, std::string name) {
  return register_custom_rule(CustomKind::jvp, std::move(jvp), std::move(name));
}
// The rule of `kind` numbered `rule`; a RuleError if there is none.
const CustomRule& find_custom_rule(CustomKind kind, std::int64_t rule);

// How a call's operands split: [0, primals) the primal inputs, then `outputs` of the function's outputs, then
// (custom_vjp only) the residuals.
struct CustomCallLayout {
  std::int64_t rule = 0;
  std::size_t primals = 0;
  std::size_t outputs = 0;
  std::size_t residuals = 0;
  std::string name;
};
CustomCallLayout custom_call_layout(Prim op, const Params& params, std::size_t operands);

void register_custom_ops(std::vector<OpInfo>& ops);

}  // namespace weft::program
