// The custom-rule calls, custom_vjp_call and custom_jvp_call: the table of the users' rule programs, the calls'
// type rules and their transformation rules (program/custom_calls.hpp explains the design).
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "program/autodiff.hpp"
#include "program/custom_calls.hpp"
#include "program/rule_kit.hpp"
#include "program/transforms.hpp"
#include "program/verifier.hpp"
#include "weft/error.hpp"

namespace weft::program {
namespace {

const char* kind_text(CustomKind kind) { return kind == CustomKind::vjp ? "custom_vjp" : "custom_jvp"; }
Prim op_of(CustomKind kind) { return kind == CustomKind::vjp ? Prim::custom_vjp_call : Prim::custom_jvp_call; }
CustomKind kind_of(Prim op) { return op == Prim::custom_vjp_call ? CustomKind::vjp : CustomKind::jvp; }

// What a rule was batched for: the same rule batched the same way is registered once (a vmapped function is
// batched on every trace outside jit, and a registration per trace would grow the process).
using BatchKey = std::tuple<std::int64_t, std::vector<bool>, std::int64_t, std::string>;

struct Table {
  std::mutex mutex;
  // unique_ptr: find_custom_rule hands out references that must stay valid while others register.
  std::map<std::int64_t, std::unique_ptr<const CustomRule>> rules;
  std::int64_t next = 0;
  std::map<BatchKey, std::int64_t> batched;
  // custom_jvp rules' VJPs with respect to their tangent inputs (custom_jvp_vjp), made at the first use.
  std::map<std::int64_t, std::unique_ptr<const Program>> transposed;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: programs may be differentiated during static destruction
  return *t;
}

std::size_t count_param(Prim op, const Params& params, const char* name) {
  const std::int64_t n = param<std::int64_t>(params, name);
  if (n < 0) throw RuleError(prim_name(op) + ": parameter '" + name + "' must not be negative");
  return static_cast<std::size_t>(n);
}

// outs = the function's outputs, unchanged: their types are those operands' types.
std::vector<ValueType> infer_call(Prim op, const std::vector<ValueType>& ins, const Params& params) {
  const CustomCallLayout layout = custom_call_layout(op, params, ins.size());
  find_custom_rule(kind_of(op), layout.rule);  // a call whose rule is unknown could never be differentiated
  return {ins.begin() + static_cast<std::ptrdiff_t>(layout.primals),
          ins.begin() + static_cast<std::ptrdiff_t>(layout.primals + layout.outputs)};
}

std::string who(const CustomCallLayout& layout, CustomKind kind) {
  return std::string(kind_text(kind)) + "(" + layout.name + "): ";
}

// A rule's result against the primal input it belongs to (a cotangent has its primal's shape and dtype).
void check_like_primal(const ValueType& got, const ValueType& primal, const std::string& what, std::size_t k) {
  if (got.shape != primal.shape || got.dtype != primal.dtype) {
    throw RuleError(what + "returned a " + type_text(got) + " cotangent for primal input " + std::to_string(k) +
                    ", a " + type_text(primal) + " (a cotangent has its primal's shape and dtype)");
  }
}

// The rule numbered `layout.rule` batched with inputs flagged `in_batched`, its outputs conformed to `want`,
// registered (once per rule, flags, size and axis); its number.
std::int64_t batched_rule(CustomKind kind, const CustomCallLayout& layout, const std::vector<bool>& in_batched,
                          const std::vector<bool>& want, const BatchContext& c) {
  const CustomRule& rule = find_custom_rule(kind, layout.rule);
  std::vector<bool> flags = in_batched;
  flags.insert(flags.end(), want.begin(), want.end());
  const BatchKey key{layout.rule, flags, c.size, c.axis_name};
  {
    Table& t = table();
    std::lock_guard lock(t.mutex);
    if (const auto it = t.batched.find(key); it != t.batched.end()) return it->second;
  }
  Program program;
  try {
    program = conform_batched(batch_program(rule.program, in_batched, c.size, c.axis_name), want, c.size);
  } catch (const InvalidArgument& err) {
    const char* part = kind == CustomKind::vjp ? "bwd" : "jvp rule";
    throw RuleError(who(layout, kind) + "batching its " + part + ": " + err.what());
  }
  const std::int64_t number = register_custom_rule(kind, std::move(program), rule.name);
  Table& t = table();
  std::lock_guard lock(t.mutex);
  return t.batched.emplace(key, number).first->second;
}

// The call emitted again with the rule numbered `rule`, on `ins`.
std::vector<ValueId> call_with_rule(BatchContext& c, std::int64_t rule, const std::vector<ValueId>& ins) {
  Params params = c.params;
  params["rule"] = int_param(rule);
  return c.e.emit_many(c.prim(), ins, std::move(params));
}

// ---- custom_vjp_call ---------------------------------------------------------------------------------------

std::vector<ValueType> infer_vjp_call(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  return infer_call(Prim::custom_vjp_call, ins, params);
}

// bwd, inlined on the current values of the residual operands and the outputs' cotangents, gives the primal
// operands their cotangents; fwd's outputs and the residuals get none, so fwd's equations are never
// transposed. bwd's results were checked against the primals' types when the call was traced (Python's
// custom_vjp); a hand-built call is checked here, before give() could broadcast a wrong shape away.
void custom_vjp_vjp(VjpContext& c) {
  const CustomCallLayout layout = custom_call_layout(c.prim(), c.params, c.ins.size());
  const CustomRule& rule = find_custom_rule(CustomKind::vjp, layout.rule);
  const std::string what = who(layout, CustomKind::vjp) + "bwd ";
  std::vector<ValueId> ins(c.ins.begin() + static_cast<std::ptrdiff_t>(layout.primals + layout.outputs), c.ins.end());
  ins.insert(ins.end(), c.cts.begin(), c.cts.end());
  if (ins.size() != rule.program.inputs.size()) {
    throw RuleError(what + "takes " + std::to_string(rule.program.inputs.size()) + " inputs, the call has " +
                    std::to_string(layout.residuals) + " residuals and " + std::to_string(c.outs.size()) + " outputs");
  }
  const std::vector<ValueId> cts = inline_program(c.e.builder(), rule.program, ins);
  if (cts.size() != layout.primals) {
    throw RuleError(what + "returned " + std::to_string(cts.size()) + " cotangents for " +
                    std::to_string(layout.primals) + " primal inputs (one per input)");
  }
  for (std::size_t k = 0; k < layout.primals; ++k) {
    if (!is_floating(c.in_types[k].dtype)) continue;
    check_like_primal(c.e.type(cts[k]), c.in_types[k], what, k);
    c.give(k, cts[k]);
  }
}

// JAX refuses forward mode through a custom_vjp function: its rule says nothing about tangents.
std::vector<ValueId> custom_vjp_jvp(JvpContext& c) {
  const CustomCallLayout layout = custom_call_layout(c.prim(), c.params, c.ins.size());
  throw RuleError("can't apply forward-mode autodiff (jvp) to a custom_vjp function (" + layout.name +
                  "; JAX's rule too): give it a custom_jvp rule instead, or differentiate it in reverse mode");
}

// bwd batched: its residuals and output cotangents carry the batch axis where the call's operands do (a
// cotangent has its output's type, and the outputs are fwd's), its cotangents where their primals do.
Batched custom_vjp_batch(BatchContext& c) {
  const CustomCallLayout layout = custom_call_layout(c.prim(), c.params, c.ins.size());
  const auto at = [&](std::size_t from, std::size_t n) {
    return std::vector<bool>(c.batched.begin() + static_cast<std::ptrdiff_t>(from),
                             c.batched.begin() + static_cast<std::ptrdiff_t>(from + n));
  };
  const std::vector<bool> outs = at(layout.primals, layout.outputs);
  std::vector<bool> bwd_ins = at(layout.primals + layout.outputs, layout.residuals);
  bwd_ins.insert(bwd_ins.end(), outs.begin(), outs.end());
  const std::int64_t rule = batched_rule(CustomKind::vjp, layout, bwd_ins, at(0, layout.primals), c);
  return {call_with_rule(c, rule, c.ins), outs};
}

// ---- custom_jvp_call ---------------------------------------------------------------------------------------

std::vector<ValueType> infer_jvp_call(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  return infer_call(Prim::custom_jvp_call, ins, params);
}

// The jvp rule, inlined on the primal operands and their tangents (zeros where one has none), gives the
// outputs' tangents. Python's custom_jvp checked its outputs' types when the call was traced; a hand-built
// call is checked here.
std::vector<ValueId> custom_jvp_jvp(JvpContext& c) {
  const CustomCallLayout layout = custom_call_layout(c.prim(), c.params, c.ins.size());
  const CustomRule& rule = find_custom_rule(CustomKind::jvp, layout.rule);
  const std::string what = who(layout, CustomKind::jvp) + "the jvp rule ";
  std::vector<ValueId> ins(c.ins.begin(), c.ins.begin() + static_cast<std::ptrdiff_t>(layout.primals));
  for (std::size_t k = 0; k < layout.primals; ++k) {
    // The rule's tangent input has its primal's type (an integer primal's tangent is zeros of its dtype).
    ins.push_back(c.has_tangent(k) ? c.tangents[k] : c.e.zeros(c.in_types[k]));
  }
  if (rule.program.inputs.size() != ins.size() || rule.program.outputs.size() != 2 * layout.outputs) {
    throw RuleError(what + "maps " + std::to_string(rule.program.inputs.size()) + " inputs to " +
                    std::to_string(rule.program.outputs.size()) + " outputs; the call needs " +
                    std::to_string(ins.size()) + " (primals, tangents) to " + std::to_string(2 * layout.outputs) +
                    " (primal outputs, tangent outputs)");
  }
  const std::vector<ValueId> outs = inline_program(c.e.builder(), rule.program, ins);
  std::vector<ValueId> tangents(outs.begin() + static_cast<std::ptrdiff_t>(layout.outputs), outs.end());
  for (std::size_t k = 0; k < tangents.size(); ++k) {
    const ValueType got = c.e.type(tangents[k]);
    if (got.shape != c.out_types[k].shape || got.dtype != c.out_types[k].dtype) {
      throw RuleError(what + "gave a " + type_text(got) + " tangent for output " + std::to_string(k) + ", a " +
                      type_text(c.out_types[k]) + " (a tangent has its primal's shape and dtype)");
    }
  }
  return tangents;
}

// Why equation `eq` of a jvp rule is not linear in its operands flagged `dependent` (those a tangent input
// reaches), or nothing. Its own JVP is taken with respect to those operands alone, in a scratch program: the
// equation is linear in them exactly when that derivative reads none of them, directly or through the
// equation's results (t * c's is dt * c, reshape(t)'s reshape(dt); exp(t)'s reads exp(t), t * t's reads t,
// where(t > 0, t, 0)'s its condition). A zero derivative (sign(t), stop_gradient(t)) is not linear either, nor is a derivative that
// does not exist.
std::optional<std::string> nonlinear_in(const Program& rule, const Equation& eq, const std::vector<bool>& dependent) {
  Builder b(rule.mesh, rule.rules);
  Emitter e(b);
  Params params = eq.params;
  params.erase(kCheckpointParam);
  JvpContext c{e, eq.info(), params, {}, {}, {}, {}, {}};
  for (std::size_t k = 0; k < eq.inputs.size(); ++k) {
    const ValueType& type = rule.types[eq.inputs[k]];
    if (dependent[k] && !is_floating(type.dtype)) {
      return "reads a " + type_text(type) + " made from a tangent (a comparison or cast of a tangent is a step, "
             "not a linear map)";
    }
    c.in_types.push_back(type);
    c.ins.push_back(b.input(type));
    c.tangents.push_back(dependent[k] ? b.input(type) : kNoValue);
  }
  c.outs = b.emit(eq.info(), c.ins, params, eq.source);
  bool floating = false;
  for (ValueId out : c.outs) {
    c.out_types.push_back(b.type(out));
    floating = floating || is_floating(c.out_types.back().dtype);
  }
  if (!floating) return std::nullopt;  // integer results: whatever reads them is judged
  const OpInfo* info = &eq.info();
  if (info->jvp == nullptr || info->effectful) return std::string("has no derivative");
  std::vector<ValueId> tangents = info->jvp(c);
  std::vector<ValueId> read;
  for (std::size_t k = 0; k < tangents.size(); ++k) {
    if (!is_floating(c.out_types[k].dtype)) continue;
    if (tangents[k] == kNoValue) return std::string("has a zero derivative (a step or a constant is not linear)");
    read.push_back(tangents[k]);
  }
  b.set_outputs(read);
  const Program scratch = b.build();
  // Walk back from the derivative: which of the scratch program's values it reads.
  std::set<ValueId> reached(scratch.outputs.begin(), scratch.outputs.end());
  for (std::size_t i = scratch.equations.size(); i-- > 0;) {
    const Equation& s = scratch.equations[i];
    bool used = false;
    for (ValueId out : s.outputs) used = used || reached.count(out) > 0;
    if (used) reached.insert(s.inputs.begin(), s.inputs.end());
  }
  for (std::size_t k = 0; k < c.ins.size(); ++k) {
    if (dependent[k] && reached.count(c.ins[k]) > 0) {
      return "is not linear in operand " + std::to_string(k) + " (made from a tangent): its derivative depends on it";
    }
  }
  return std::nullopt;
}

// JAX transposes the linear part of a custom_jvp rule for reverse mode and raises where it meets an equation
// that is not linear in the tangents (its transpose rule is missing: "Transpose rule (for reverse-mode
// differentiation) for 'sin' not implemented"; or mul's asserts one linear operand). So does this: every
// equation a tangent input reaches and a tangent output reads must be linear in the tangents (nonlinear_in);
// equations of the primal outputs alone are free. Refused with the first equation that is not.
void check_linear_in_tangents(const Program& rule, const std::string& what) {
  const std::size_t primals = rule.inputs.size() / 2;
  std::set<ValueId> needed(rule.outputs.begin() + static_cast<std::ptrdiff_t>(rule.outputs.size() / 2), rule.outputs.end());
  for (std::size_t i = rule.equations.size(); i-- > 0;) {
    const Equation& eq = rule.equations[i];
    bool used = false;
    for (ValueId out : eq.outputs) used = used || needed.count(out) > 0;
    if (used) needed.insert(eq.inputs.begin(), eq.inputs.end());
  }
  std::set<ValueId> dependent(rule.inputs.begin() + static_cast<std::ptrdiff_t>(primals), rule.inputs.end());
  for (std::size_t i = 0; i < rule.equations.size(); ++i) {
    const Equation& eq = rule.equations[i];
    std::vector<bool> reached;
    for (ValueId in : eq.inputs) reached.push_back(dependent.count(in) > 0);
    if (std::find(reached.begin(), reached.end(), true) == reached.end()) continue;
    dependent.insert(eq.outputs.begin(), eq.outputs.end());
    bool used = false;
    for (ValueId out : eq.outputs) used = used || needed.count(out) > 0;
    if (!used) continue;
    if (const std::optional<std::string> why = nonlinear_in(rule, eq, reached)) {
      std::string where = equation_error_prefix(rule, i);
      where.resize(where.size() - 2);  // its ": "
      throw RuleError(what + "is not linear in its tangents, so reverse mode cannot transpose it (JAX raises for "
                      "such a rule too): its " + where + " " + *why +
                      ". Write the tangent outputs as linear maps of the tangents (coefficients from the primals)");
    }
  }
}

// The VJP of the jvp rule's tangent outputs with respect to its tangent inputs: inputs (primals, tangents,
// then one cotangent per tangent output), outputs the tangent outputs, then the tangents' cotangents. The
// primal outputs are left out (JAX transposes the linear part of the JVP only): nothing flows back from them,
// so the rule's primal computation may hold ops without a transpose (a pmax).
const Program& transposed_jvp_rule(const CustomCallLayout& layout, const CustomRule& rule) {
  const std::int64_t number = layout.rule;
  Table& t = table();
  {
    std::lock_guard lock(t.mutex);
    if (const auto it = t.transposed.find(number); it != t.transposed.end()) return *it->second;
  }
  check_linear_in_tangents(rule.program, who(layout, CustomKind::jvp) + "the jvp rule ");
  const std::size_t primals = rule.program.inputs.size() / 2;
  std::vector<int> wrt;
  for (std::size_t k = primals; k < 2 * primals; ++k) wrt.push_back(static_cast<int>(k));
  Program linear = rule.program;
  const auto primal_outputs = static_cast<std::ptrdiff_t>(linear.outputs.size() / 2);
  linear.outputs.erase(linear.outputs.begin(), linear.outputs.begin() + primal_outputs);
  auto made = std::make_unique<const Program>(vjp_program(linear, wrt));
  std::lock_guard lock(t.mutex);
  return *t.transposed.emplace(number, std::move(made)).first->second;
}

// Reverse mode through a custom_jvp function is the transpose of its JVP (as JAX differentiates it): the jvp
// rule is linear in its tangents, so the VJP of the rule's tangent outputs with respect to its tangent inputs,
// taken at zero tangents and seeded with the call's output cotangents, gives the primal operands their
// cotangents. f's outputs get none, so f's own equations are never transposed.
void custom_jvp_vjp(VjpContext& c) {
  const CustomCallLayout layout = custom_call_layout(c.prim(), c.params, c.ins.size());
  const CustomRule& rule = find_custom_rule(CustomKind::jvp, layout.rule);
  const std::string what = who(layout, CustomKind::jvp) + "the jvp rule ";
  if (rule.program.inputs.size() != 2 * layout.primals || rule.program.outputs.size() != 2 * layout.outputs) {
    throw RuleError(what + "maps " + std::to_string(rule.program.inputs.size()) + " inputs to " +
                    std::to_string(rule.program.outputs.size()) + " outputs; the call needs " +
                    std::to_string(2 * layout.primals) + " to " + std::to_string(2 * layout.outputs));
  }
  const Program& transposed = transposed_jvp_rule(layout, rule);
  std::vector<ValueId> ins(c.ins.begin(), c.ins.begin() + static_cast<std::ptrdiff_t>(layout.primals));
  for (std::size_t k = 0; k < layout.primals; ++k) ins.push_back(c.e.zeros(c.in_types[k]));
  ins.insert(ins.end(), c.cts.begin(), c.cts.end());
  const std::vector<ValueId> outs = inline_program(c.e.builder(), transposed, ins);
  for (std::size_t k = 0; k < layout.primals; ++k) {
    if (!is_floating(c.in_types[k].dtype)) continue;
    const ValueId ct = outs[layout.outputs + k];
    check_like_primal(c.e.type(ct), c.in_types[k], what + "(transposed) ", k);
    c.give(k, ct);
  }
}

// The jvp rule batched: each tangent carries the batch axis where its primal does (forward mode of the batched
// call gives tangents of the primal operands' batched types). An output carries it where f's output or either
// of the rule's outputs for it does; f's output and the rule's are broadcast to agree, so the rule's results
// always have the call's outputs' types.
Batched custom_jvp_batch(BatchContext& c) {
  const CustomCallLayout layout = custom_call_layout(c.prim(), c.params, c.ins.size());
  const CustomRule& rule = find_custom_rule(CustomKind::jvp, layout.rule);
  std::vector<bool> primals(c.batched.begin(), c.batched.begin() + static_cast<std::ptrdiff_t>(layout.primals));
  std::vector<bool> rule_ins = primals;
  rule_ins.insert(rule_ins.end(), primals.begin(), primals.end());
  // Which of the rule's outputs the batch reaches, to know which outputs of the call carry the batch axis.
  std::vector<bool> reached;
  try {
    reached = batch_program(rule.program, rule_ins, c.size, c.axis_name).out_batched;
  } catch (const InvalidArgument& err) {
    throw RuleError(who(layout, CustomKind::jvp) + "batching its jvp rule: " + err.what());
  }
  std::vector<bool> outs(layout.outputs);
  std::vector<ValueId> ins(c.ins.begin(), c.ins.begin() + static_cast<std::ptrdiff_t>(layout.primals));
  for (std::size_t k = 0; k < layout.outputs; ++k) {
    outs[k] = c.batched[layout.primals + k] || reached[k] || reached[layout.outputs + k];
    ins.push_back(outs[k] ? c.materialized(layout.primals + k) : c.ins[layout.primals + k]);
  }
  std::vector<bool> want = outs;
  want.insert(want.end(), outs.begin(), outs.end());
  const std::int64_t number = batched_rule(CustomKind::jvp, layout, rule_ins, want, c);
  return {call_with_rule(c, number, ins), outs};
}

// Both calls' kernel: the identity on the function's outputs, the operands after the primals.
std::vector<Array> call_kernel(const std::vector<Array>& in, const Params& p) {
  const auto from = in.begin() + param_int(p, "primals");
  return {from, from + param_int(p, "outputs")};
}

}  // namespace

std::int64_t register_custom_rule(CustomKind kind, Program program, std::string name) {
  verify(program);
  Table& t = table();
  std::lock_guard lock(t.mutex);
  const std::int64_t rule = t.next++;
  t.rules[rule] = std::make_unique<const CustomRule>(CustomRule{kind, std::move(program), std::move(name)});
  return rule;
}

const CustomRule& find_custom_rule(CustomKind kind, std::int64_t rule) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  const auto it = t.rules.find(rule);
  if (it == t.rules.end() || it->second->kind != kind) {
    throw RuleError(prim_name(op_of(kind)) + ": no " + kind_text(kind) + " rule " + std::to_string(rule) +
                    " is registered in this process (a call's rule is registered when the call is traced)");
  }
  return *it->second;
}

CustomCallLayout custom_call_layout(Prim op, const Params& params, std::size_t operands) {
  CustomCallLayout layout;
  layout.rule = param<std::int64_t>(params, "rule");
  layout.primals = count_param(op, params, "primals");
  layout.outputs = count_param(op, params, "outputs");
  layout.name = param<std::string>(params, "name");
  if (layout.primals + layout.outputs > operands) {
    throw RuleError(prim_name(op) + ": " + std::to_string(layout.primals) + " primal inputs and " +
                    std::to_string(layout.outputs) + " outputs need at least " +
                    std::to_string(layout.primals + layout.outputs) + " operands, got " + std::to_string(operands));
  }
  layout.residuals = operands - layout.primals - layout.outputs;
  if (op == Prim::custom_jvp_call && layout.residuals != 0) {
    throw RuleError(prim_name(op) + ": " + std::to_string(layout.primals) + " primal inputs and " +
                    std::to_string(layout.outputs) + " outputs are " + std::to_string(layout.primals + layout.outputs) +
                    " operands, got " + std::to_string(operands) + " (a custom_jvp call has no residuals)");
  }
  return layout;
}

void register_custom_ops(std::vector<OpInfo>& ops) {
  using K = ParamKind;
  const std::vector<ParamSpec> params{
      {"rule", K::integer}, {"primals", K::integer}, {"outputs", K::integer}, {"name", K::string}};
  ops.push_back({.id = Prim::custom_vjp_call, .min_inputs = 0, .max_inputs = -1, .params = params,
                 .infer = infer_vjp_call, .kernel = call_kernel, .vjp = custom_vjp_vjp, .jvp = custom_vjp_jvp,
                 .batch = custom_vjp_batch});
  ops.push_back({.id = Prim::custom_jvp_call, .min_inputs = 0, .max_inputs = -1, .params = params,
                 .infer = infer_jvp_call, .kernel = call_kernel, .vjp = custom_jvp_vjp, .jvp = custom_jvp_jvp,
                 .batch = custom_jvp_batch});
}

}  // namespace weft::program
