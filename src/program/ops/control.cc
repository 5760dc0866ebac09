// The control-flow primitives, as JAX's lax keeps them: cond (lax.cond / lax.switch), while_loop (lax.while_loop,
// a fori_loop with traced bounds) and scan (lax.scan, lax.map, a fori_loop with static bounds). Each holds its
// branches or body as built programs (a `programs` parameter, JAX's jaxpr-valued parameters) and runs them
// through the executor's SubProgramRunner on the same replica, so collectives inside a body meet the other
// replicas' as those outside do, and a loop never returns to Python.
//
// Layouts (the operands a body closes over come last, as a trace captures them, where JAX puts them first):
//   cond        ins: index (an integer scalar), operands...       branches: operands -> outs (every branch the
//               same output types); the index is clamped to [0, branches) as lax.switch clamps it.
//   while_loop  ins: carry..., cond_consts..., body_consts...     cond: carry, cond_consts -> bool[]
//               params cond_nconsts, body_nconsts                  body: carry, body_consts -> carry
//   scan        ins: carry..., xs..., consts...                   body: carry, x..., consts -> carry, y...
//               params length, reverse, num_carry, num_consts,     outs: the last carry, then each y stacked
//               unroll (accepted for JAX's signature: the         along a new leading axis of `length`
//               executor runs iterations without unrolling)
//
// Their transformation rules (JVP, VJP with scan's forward rule, batching) are the file's last section
// (docs/programs.md, "Control flow").
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "program/autodiff.hpp"
#include "program/partial_eval.hpp"
#include "program/printer.hpp"
#include "program/program_impl.hpp"
#include "program/rule_kit.hpp"
#include "program/transforms.hpp"

namespace weft::program {
namespace {

const std::string& op_name(Prim op) { return prim_name(op); }

bool same_mesh(const Mesh& a, const Mesh& b) {
  return std::equal(a.axes().begin(), a.axes().end(), b.axes().begin(), b.axes().end(),
                    [](const MeshAxis& x, const MeshAxis& y) { return x.name == y.name && x.size == y.size; });
}

// The sub-programs of parameter `name`, refused unless there are `count` of them (any number >= 1 when -1)
// and each is a program of this mesh.
const SubPrograms& sub_programs(Prim op, const Params& params, const char* name, int count, const Mesh& mesh) {
  const SubPrograms& subs = param<SubPrograms>(params, name);
  if (count >= 0 && subs.size() != static_cast<std::size_t>(count)) {
    throw RuleError(op_name(op) + ": parameter '" + name + "' holds " + std::to_string(subs.size()) +
                    " program(s), not " + std::to_string(count));
  }
  if (subs.empty()) throw RuleError(op_name(op) + ": parameter '" + name + "' holds no program");
  for (const auto& sub : subs) {
    if (sub == nullptr) throw RuleError(op_name(op) + ": parameter '" + name + "' holds a null program");
    if (!same_mesh(sub->impl().program.mesh, mesh)) {
      throw RuleError(op_name(op) + ": a program of parameter '" + name +
                      "' was traced for another mesh than the equation's");
    }
  }
  return subs;
}

const program::Program& inner(const std::shared_ptr<const weft::Program>& sub) { return sub->impl().program; }

std::vector<ValueType> input_types(const program::Program& p) {
  std::vector<ValueType> types;
  for (ValueId id : p.inputs) types.push_back(p.types[id]);
  return types;
}
std::vector<ValueType> output_types(const program::Program& p) {
  std::vector<ValueType> types;
  for (ValueId id : p.outputs) types.push_back(p.types[id]);
  return types;
}

std::string types_text(const std::vector<ValueType>& types) {
  std::string text = "(";
  for (std::size_t k = 0; k < types.size(); ++k) text += (k > 0 ? ", " : "") + type_text(types[k]);
  return text + (types.size() == 1 ? ",)" : ")");
}

// A type as the control-flow errors name it: with its varying axes when they are what differs (shard_map's and
// pmap's typing: "f32[3] varying over ('i',)").
std::string typed_text(const ValueType& t, const ValueType& other) {
  if (t.dtype != other.dtype || t.shape != other.shape) return type_text(t);
  return type_text(t) + (t.varying.empty() ? " invariant" : " varying over " + axes_text(t.varying));
}

// `sub`'s inputs must be exactly `want` (what the equation passes it), `what` naming the program.
void check_inputs(Prim op, const program::Program& sub, const std::vector<ValueType>& want, const std::string& what) {
  const std::vector<ValueType> have = input_types(sub);
  if (have.size() != want.size()) {
    throw RuleError(op_name(op) + ": " + what + " takes " + std::to_string(have.size()) + " input(s), the equation gives it " +
                    std::to_string(want.size()) + " " + types_text(want));
  }
  for (std::size_t k = 0; k < have.size(); ++k) {
    if (!(have[k] == want[k])) {
      throw RuleError(op_name(op) + ": " + what + " takes " + typed_text(have[k], want[k]) + " as input " +
                      std::to_string(k) + ", the equation gives it " + typed_text(want[k], have[k]));
    }
  }
}

// Session effects run once per equation of the outer program; inside a branch or a loop they would run a
// number of times the session's bookkeeping (remote buffers, variable versions) does not expect.
void refuse_effects(Prim op, const program::Program& sub, const std::string& what) {
  for (const Equation& eq : sub.equations) {
    if (eq.info().effectful) {
      throw RuleError(op_name(op) + ": " + what + " holds " + eq.name() +
                      ", a session effect: effects are not supported inside control flow");
    }
  }
}

std::size_t count_param(Prim op, const Params& params, const char* name) {
  const std::int64_t n = param<std::int64_t>(params, name);
  if (n < 0) throw RuleError(op_name(op) + ": parameter '" + std::string(name) + "' must not be negative");
  return static_cast<std::size_t>(n);
}

// ---- cond ----------------------------------------------------------------------------------------------------

std::vector<ValueType> infer_cond(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const SubPrograms& branches = sub_programs(Prim::cond, params, "branches", -1, mesh);
  if (!is_integer(ins[0].dtype) || !ins[0].shape.empty()) {
    throw RuleError("cond: the branch index must be an integer scalar, not " + type_text(ins[0]) +
                    " (lax.cond converts its boolean predicate to one)");
  }
  const std::vector<ValueType> operands(ins.begin() + 1, ins.end());
  std::vector<ValueType> outs;
  for (std::size_t b = 0; b < branches.size(); ++b) {
    const program::Program& branch = inner(branches[b]);
    const std::string what = "branch " + std::to_string(b);
    check_inputs(Prim::cond, branch, operands, what);
    refuse_effects(Prim::cond, branch, what);
    const std::vector<ValueType> types = output_types(branch);
    if (b == 0) {
      outs = types;
      continue;
    }
    if (types.size() != outs.size()) {
      throw RuleError("cond: branch 0 returns " + std::to_string(outs.size()) + " output(s) " + types_text(outs) +
                      " but branch " + std::to_string(b) + " returns " + std::to_string(types.size()) + " " +
                      types_text(types) + " (every branch must return the same types)");
    }
    for (std::size_t k = 0; k < types.size(); ++k) {
      if (!(types[k] == outs[k])) {
        throw RuleError("cond: branch 0 returns " + typed_text(outs[k], types[k]) + " as output " + std::to_string(k) +
                        " but branch " + std::to_string(b) + " returns " + typed_text(types[k], outs[k]) +
                        " (every branch must return the same types)");
      }
    }
  }
  return outs;
}

std::vector<Array> run_cond(const std::vector<Array>& ins, const Params& params, SubProgramRunner& runner) {
  const SubPrograms& branches = param<SubPrograms>(params, "branches");
  const auto last = static_cast<std::int64_t>(branches.size()) - 1;
  const auto index = std::clamp(static_cast<std::int64_t>(ins[0].value_at(0)), std::int64_t{0}, last);
  return runner.run(*branches[static_cast<std::size_t>(index)], {ins.begin() + 1, ins.end()});
}

// ---- while_loop ----------------------------------------------------------------------------------------------

struct WhileLayout {
  std::size_t carry, cond_consts, body_consts;
};

WhileLayout while_layout(const Params& params, std::size_t inputs) {
  const std::size_t cond_consts = count_param(Prim::while_loop, params, "cond_nconsts");
  const std::size_t body_consts = count_param(Prim::while_loop, params, "body_nconsts");
  if (cond_consts + body_consts > inputs) {
    throw RuleError("while_loop: cond_nconsts + body_nconsts = " + std::to_string(cond_consts + body_consts) +
                    " exceeds its " + std::to_string(inputs) + " inputs");
  }
  return {inputs - cond_consts - body_consts, cond_consts, body_consts};
}

std::vector<ValueType> infer_while(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const program::Program& cond = inner(sub_programs(Prim::while_loop, params, "cond", 1, mesh)[0]);
  const program::Program& body = inner(sub_programs(Prim::while_loop, params, "body", 1, mesh)[0]);
  const WhileLayout l = while_layout(params, ins.size());
  const std::vector<ValueType> carry(ins.begin(), ins.begin() + static_cast<std::ptrdiff_t>(l.carry));
  std::vector<ValueType> cond_ins = carry;
  cond_ins.insert(cond_ins.end(), ins.begin() + static_cast<std::ptrdiff_t>(l.carry),
                  ins.begin() + static_cast<std::ptrdiff_t>(l.carry + l.cond_consts));
  std::vector<ValueType> body_ins = carry;
  body_ins.insert(body_ins.end(), ins.begin() + static_cast<std::ptrdiff_t>(l.carry + l.cond_consts), ins.end());
  check_inputs(Prim::while_loop, cond, cond_ins, "its cond_fun");
  check_inputs(Prim::while_loop, body, body_ins, "its body_fun");
  refuse_effects(Prim::while_loop, cond, "its cond_fun");
  refuse_effects(Prim::while_loop, body, "its body_fun");
  const std::vector<ValueType> test = output_types(cond);
  if (test.size() != 1 || test[0].dtype != DType::boolean || !test[0].shape.empty()) {
    throw RuleError("while_loop: cond_fun must return a boolean scalar, not " + types_text(test));
  }
  const std::vector<ValueType> next = output_types(body);
  if (next.size() != carry.size()) {
    throw RuleError("while_loop: body_fun returns " + std::to_string(next.size()) + " value(s) " + types_text(next) +
                    " for a carry of " + std::to_string(carry.size()) + " " + types_text(carry) +
                    " (body_fun must return its carry's structure)");
  }
  for (std::size_t k = 0; k < next.size(); ++k) {
    if (!(next[k] == carry[k])) {
      throw RuleError("while_loop: body_fun returns " + typed_text(next[k], carry[k]) + " for carry " + std::to_string(k) +
                      ", which enters the loop as " + typed_text(carry[k], next[k]) + " (a loop's carry keeps its type)");
    }
  }
  return carry;
}

std::vector<Array> run_while(const std::vector<Array>& ins, const Params& params, SubProgramRunner& runner) {
  const weft::Program& cond = *param<SubPrograms>(params, "cond")[0];
  const weft::Program& body = *param<SubPrograms>(params, "body")[0];
  const WhileLayout l = while_layout(params, ins.size());
  std::vector<Array> carry(ins.begin(), ins.begin() + static_cast<std::ptrdiff_t>(l.carry));
  const auto cond_consts = ins.begin() + static_cast<std::ptrdiff_t>(l.carry);
  const auto body_consts = cond_consts + static_cast<std::ptrdiff_t>(l.cond_consts);
  std::vector<Array> args;
  for (;;) {
    args = carry;
    args.insert(args.end(), cond_consts, body_consts);
    if (runner.run(cond, std::move(args)).at(0).value_at(0) == 0) return carry;
    args = std::move(carry);
    args.insert(args.end(), body_consts, ins.end());
    carry = runner.run(body, std::move(args));
  }
}

// ---- scan ----------------------------------------------------------------------------------------------------

struct ScanLayout {
  std::size_t carry, xs, consts;
  std::int64_t length;
  bool reverse;
};

ScanLayout scan_layout(const Params& params, std::size_t inputs) {
  const std::size_t carry = count_param(Prim::scan, params, "num_carry");
  const std::size_t consts = count_param(Prim::scan, params, "num_consts");
  const std::int64_t length = param<std::int64_t>(params, "length");
  if (length < 0) throw RuleError("scan: length " + std::to_string(length) + " is negative");
  if (carry + consts > inputs) {
    throw RuleError("scan: num_carry + num_consts = " + std::to_string(carry + consts) + " exceeds its " +
                    std::to_string(inputs) + " inputs");
  }
  if (const std::int64_t* unroll = param_if<std::int64_t>(params, "unroll"); unroll != nullptr && *unroll < 0) {
    throw RuleError("scan: unroll " + std::to_string(*unroll) + " is negative");
  }
  return {carry, inputs - carry - consts, consts, length, param_flag(params, "reverse")};
}

std::vector<ValueType> infer_scan(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const program::Program& body = inner(sub_programs(Prim::scan, params, "body", 1, mesh)[0]);
  const ScanLayout l = scan_layout(params, ins.size());
  std::vector<ValueType> body_ins(ins.begin(), ins.begin() + static_cast<std::ptrdiff_t>(l.carry));
  for (std::size_t k = l.carry; k < l.carry + l.xs; ++k) {
    if (ins[k].shape.empty() || ins[k].shape[0] != l.length) {
      throw RuleError("scan: xs " + std::to_string(k - l.carry) + " is " + type_text(ins[k]) +
                      ", whose leading axis is not the scan's length " + std::to_string(l.length));
    }
    ValueType slice = ins[k];
    slice.shape.erase(slice.shape.begin());
    body_ins.push_back(std::move(slice));
  }
  body_ins.insert(body_ins.end(), ins.end() - static_cast<std::ptrdiff_t>(l.consts), ins.end());
  check_inputs(Prim::scan, body, body_ins, "its body");
  refuse_effects(Prim::scan, body, "its body");
  const std::vector<ValueType> outs = output_types(body);
  if (outs.size() < l.carry) {
    throw RuleError("scan: the body returns " + std::to_string(outs.size()) + " value(s) for a carry of " +
                    std::to_string(l.carry) + " (it returns (carry, y))");
  }
  std::vector<ValueType> result;
  for (std::size_t k = 0; k < l.carry; ++k) {
    if (!(outs[k] == ins[k])) {
      throw RuleError("scan: the body returns " + typed_text(outs[k], ins[k]) + " for carry " + std::to_string(k) +
                      ", which enters the scan as " + typed_text(ins[k], outs[k]) + " (the carry keeps its type)");
    }
    result.push_back(outs[k]);
  }
  for (std::size_t k = l.carry; k < outs.size(); ++k) {
    ValueType stacked = outs[k];
    stacked.shape.insert(stacked.shape.begin(), l.length);
    result.push_back(std::move(stacked));
  }
  return result;
}

std::vector<Array> run_scan(const std::vector<Array>& ins, const Params& params, SubProgramRunner& runner) {
  const weft::Program& body = *param<SubPrograms>(params, "body")[0];
  const ScanLayout l = scan_layout(params, ins.size());
  std::vector<Array> carry(ins.begin(), ins.begin() + static_cast<std::ptrdiff_t>(l.carry));
  const std::vector<ValueType> body_outs = output_types(body.impl().program);
  // The stacked ys, written slice by slice (a y of iteration i lands at row i, also when running in reverse).
  std::vector<Array> ys;
  for (std::size_t k = l.carry; k < body_outs.size(); ++k) {
    std::vector<std::int64_t> shape = body_outs[k].shape;
    shape.insert(shape.begin(), l.length);
    ys.push_back(Array::empty(shape, body_outs[k].dtype));
  }
  std::vector<Array> args;
  for (std::int64_t step = 0; step < l.length; ++step) {
    const std::int64_t i = l.reverse ? l.length - 1 - step : step;
    args = std::move(carry);
    for (std::size_t k = l.carry; k < l.carry + l.xs; ++k) args.push_back(ins[k][i]);
    args.insert(args.end(), ins.end() - static_cast<std::ptrdiff_t>(l.consts), ins.end());
    std::vector<Array> outs = runner.run(body, std::move(args));
    carry.assign(std::make_move_iterator(outs.begin()),
                 std::make_move_iterator(outs.begin() + static_cast<std::ptrdiff_t>(l.carry)));
    for (std::size_t k = 0; k < ys.size(); ++k) {
      const Array& y = outs[l.carry + k];
      std::memcpy(ys[k].mutable_bytes() + static_cast<std::size_t>(i) * y.nbytes(), y.bytes(), y.nbytes());
    }
  }
  carry.insert(carry.end(), std::make_move_iterator(ys.begin()), std::make_move_iterator(ys.end()));
  return carry;
}


// ==== transformation rules ======================================================================================
// Each rule makes new sub-programs from the equation's with the program transforms (jvp_program, vjp_program,
// batch_program) and emits the same primitive on them, as JAX's rules do: a transformed loop stays one loop.

using SubProgram = std::shared_ptr<const weft::Program>;

SubProgram made(Program verified) { return std::make_shared<const weft::Program>(runnable(std::move(verified))); }

template <class T>
std::vector<T> part(const std::vector<T>& v, std::size_t from, std::size_t n) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(from + n)};
}
template <class T>
void append(std::vector<T>& to, const std::vector<T>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

// Fresh inputs of `p`'s input types [from, from + n) in `b`.
std::vector<ValueId> inputs_like(Builder& b, const Program& p, std::size_t from, std::size_t n) {
  std::vector<ValueId> ids;
  for (std::size_t k = from; k < from + n; ++k) ids.push_back(b.input(p.types[p.inputs[k]]));
  return ids;
}

// `p` with each output typed as `want[k]` where it varies over fewer mesh axes, pvary-ed to them: under
// shard_map a zero tangent or cotangent is invariant where its primal varies, yet a body keeps its carry's
// type and every branch returns the same types.
Program typed_outputs(Program p, const std::vector<ValueType>& want) {
  bool fits = true;
  for (std::size_t k = 0; k < want.size(); ++k) fits = fits && p.types[p.outputs[k]].varying == want[k].varying;
  if (fits) return p;
  Builder b(p.mesh, p.rules);
  Emitter e(b);
  std::vector<ValueId> ins;
  for (ValueId id : p.inputs) ins.push_back(b.input(p.types[id]));
  std::vector<ValueId> outs = inline_program(b, p, ins);
  for (std::size_t k = 0; k < want.size(); ++k) outs[k] = pvary_to(e, outs[k], want[k].varying);
  b.set_outputs(outs);
  return b.build();
}

// The types of `types` flagged in `keep`.
std::vector<ValueType> kept_types(const std::vector<ValueType>& types, const std::vector<bool>& keep) {
  std::vector<ValueType> out;
  for (std::size_t k = 0; k < types.size(); ++k) {
    if (keep[k]) out.push_back(types[k]);
  }
  return out;
}

Params with_programs(const Params& params, const char* name, SubPrograms programs) {
  Params out = params;
  out[name] = Param{std::move(programs)};
  return out;
}

// ---- JVP ----------------------------------------------------------------------------------------------------
// The sub-programs' JVPs, carrying a tangent beside each floating carry (instantiated even where it starts as
// zero: the simplest fixpoint, JAX's instantiate=True) and beside each operand that has one. The new equation
// computes the primal results too, so they replace the first emission's (JvpContext).

// `p`'s JVP emitted into `b` on primals `ins` and tangents `ts` (kNoValue: zeros); the primal outputs, then a
// tangent per output.
std::vector<ValueId> emit_jvp(Builder& b, const Program& p, const std::vector<ValueId>& ins,
                              const std::vector<ValueId>& ts) {
  Emitter e(b);
  std::vector<ValueId> args = ins;
  for (std::size_t k = 0; k < ts.size(); ++k) args.push_back(ts[k] != kNoValue ? ts[k] : e.zeros(p.types[p.inputs[k]]));
  return inline_program(b, jvp_program(p), args);
}

// Whether input k (of the equation) brings a tangent: it is floating and has one.
bool brings_tangent(const JvpContext& c, std::size_t k) { return c.has_tangent(k) && is_floating(c.in_types[k].dtype); }

// Tangent inputs in `b` for `p`'s inputs [from, from + n) flagged in `with` (kNoValue for the others).
std::vector<ValueId> tangent_inputs(Builder& b, const Program& p, std::size_t from, const std::vector<bool>& with) {
  std::vector<ValueId> ts;
  for (std::size_t k = 0; k < with.size(); ++k) ts.push_back(with[k] ? b.input(p.types[p.inputs[from + k]]) : kNoValue);
  return ts;
}

std::vector<bool> floating_flags(const std::vector<ValueType>& types) {
  std::vector<bool> flags;
  for (const ValueType& t : types) flags.push_back(is_floating(t.dtype));
  return flags;
}

// outs (primal, then one tangent per output) cut to the primals of [from, from + n), then their tangents
// where `keep` says.
void push_primals_and_tangents(std::vector<ValueId>& to, const std::vector<ValueId>& outs, std::size_t num_outs,
                               std::size_t from, const std::vector<bool>& keep) {
  append(to, part(outs, from, keep.size()));
  for (std::size_t k = 0; k < keep.size(); ++k) {
    if (keep[k]) to.push_back(outs[num_outs + from + k]);
  }
}

// The new equation's results split into the primals (which replace c.outs) and the tangents of the floating
// outputs, laid out as `groups` of (count, floating flags): each group's primals, then its floating tangents.
std::vector<ValueId> take_results(JvpContext& c, const std::vector<ValueId>& results,
                                  const std::vector<std::vector<bool>>& groups) {
  std::vector<ValueId> tangents;
  std::size_t at = 0, out = 0;
  for (const std::vector<bool>& floating : groups) {
    for (std::size_t k = 0; k < floating.size(); ++k) c.outs[out + k] = results[at + k];
    at += floating.size();
    for (std::size_t k = 0; k < floating.size(); ++k) tangents.push_back(floating[k] ? results[at++] : kNoValue);
    out += floating.size();
  }
  return tangents;
}

std::vector<ValueId> cond_jvp(JvpContext& c) {
  const std::size_t n = c.ins.size() - 1;
  std::vector<bool> with(n);
  for (std::size_t k = 0; k < n; ++k) with[k] = brings_tangent(c, k + 1);
  const std::vector<bool> floating_outs = floating_flags(c.out_types);
  SubPrograms jvps;
  for (const SubProgram& branch : param<SubPrograms>(c.params, "branches")) {
    const Program& p = inner(branch);
    Builder b(p.mesh, p.rules);
    const std::vector<ValueId> ins = inputs_like(b, p, 0, n);
    const std::vector<ValueId> outs = emit_jvp(b, p, ins, tangent_inputs(b, p, 0, with));
    std::vector<ValueId> result;
    push_primals_and_tangents(result, outs, p.outputs.size(), 0, floating_outs);
    b.set_outputs(result);
    std::vector<ValueType> want = c.out_types;
    append(want, kept_types(c.out_types, floating_outs));
    jvps.push_back(made(typed_outputs(b.build(), want)));
  }
  std::vector<ValueId> ins = c.ins;
  for (std::size_t k = 0; k < n; ++k) {
    if (with[k]) ins.push_back(c.tangents[k + 1]);
  }
  const std::vector<ValueId> results = c.e.emit_many(Prim::cond, ins, with_programs(c.params, "branches", jvps));
  return take_results(c, results, {floating_outs});
}

// while_loop: the carry's floating values carry tangents, cond_fun reads the primal carry only (JAX's rule).
std::vector<ValueId> while_jvp(JvpContext& c) {
  const Program& cond = inner(param<SubPrograms>(c.params, "cond")[0]);
  const Program& body = inner(param<SubPrograms>(c.params, "body")[0]);
  const WhileLayout l = while_layout(c.params, c.ins.size());
  const std::vector<bool> carry_t = floating_flags(part(c.in_types, 0, l.carry));
  std::vector<bool> const_t(l.body_consts);
  for (std::size_t k = 0; k < l.body_consts; ++k) const_t[k] = brings_tangent(c, l.carry + l.cond_consts + k);
  const auto count = [](const std::vector<bool>& f) { return static_cast<std::size_t>(std::count(f.begin(), f.end(), true)); };

  Builder bc(cond.mesh, cond.rules);
  std::vector<ValueId> cond_ins = inputs_like(bc, cond, 0, l.carry);
  for (std::size_t k = 0; k < l.carry; ++k) {
    if (carry_t[k]) bc.input(cond.types[cond.inputs[k]]);  // the tangents, unread
  }
  append(cond_ins, inputs_like(bc, cond, l.carry, l.cond_consts));
  bc.set_outputs(inline_program(bc, cond, cond_ins));

  Builder bb(body.mesh, body.rules);
  std::vector<ValueId> ins = inputs_like(bb, body, 0, l.carry);
  std::vector<ValueId> ts = tangent_inputs(bb, body, 0, carry_t);
  append(ins, inputs_like(bb, body, l.carry, l.body_consts));
  append(ts, tangent_inputs(bb, body, l.carry, const_t));
  const std::vector<ValueId> outs = emit_jvp(bb, body, ins, ts);
  std::vector<ValueId> result;
  push_primals_and_tangents(result, outs, l.carry, 0, carry_t);
  bb.set_outputs(result);

  std::vector<ValueId> args = part(c.ins, 0, l.carry);
  for (std::size_t k = 0; k < l.carry; ++k) {
    if (carry_t[k]) args.push_back(c.tangent(k));
  }
  append(args, part(c.ins, l.carry, l.cond_consts + l.body_consts));
  for (std::size_t k = 0; k < l.body_consts; ++k) {
    if (const_t[k]) args.push_back(c.tangents[l.carry + l.cond_consts + k]);
  }
  std::vector<ValueType> carry_types = part(c.in_types, 0, l.carry);
  append(carry_types, kept_types(part(c.in_types, 0, l.carry), carry_t));
  Params params = with_programs(with_programs(c.params, "cond", {made(bc.build())}), "body",
                                {made(typed_outputs(bb.build(), carry_types))});
  params["body_nconsts"] = int_param(static_cast<std::int64_t>(l.body_consts + count(const_t)));
  return take_results(c, c.e.emit_many(Prim::while_loop, args, params), {carry_t});
}

// scan: (carry, carry tangents), (x, x tangents), (consts, const tangents) -> (carry, carry tangents),
// (y, y tangents).
std::vector<ValueId> scan_jvp(JvpContext& c) {
  const Program& body = inner(param<SubPrograms>(c.params, "body")[0]);
  const ScanLayout l = scan_layout(c.params, c.ins.size());
  const std::size_t num_ys = body.outputs.size() - l.carry;
  const std::vector<bool> carry_t = floating_flags(part(c.in_types, 0, l.carry));
  std::vector<bool> xs_t(l.xs), const_t(l.consts);
  const std::vector<const std::vector<bool>*> groups = {&carry_t, &xs_t, &const_t};
  for (std::size_t k = 0; k < l.xs; ++k) xs_t[k] = brings_tangent(c, l.carry + k);
  for (std::size_t k = 0; k < l.consts; ++k) const_t[k] = brings_tangent(c, l.carry + l.xs + k);
  const std::vector<bool> ys_t = floating_flags(part(c.out_types, l.carry, num_ys));
  const auto count = [](const std::vector<bool>& f) { return static_cast<std::int64_t>(std::count(f.begin(), f.end(), true)); };

  Builder b(body.mesh, body.rules);
  std::vector<ValueId> ins, ts;
  std::size_t from = 0;
  for (const std::vector<bool>* group : groups) {
    append(ins, inputs_like(b, body, from, group->size()));
    append(ts, tangent_inputs(b, body, from, *group));
    from += group->size();
  }
  // The inputs were made group by group: (primals, tangents) each, the order the scan passes them in.
  const std::vector<ValueId> outs = emit_jvp(b, body, ins, ts);
  std::vector<ValueId> result;
  push_primals_and_tangents(result, outs, body.outputs.size(), 0, carry_t);
  push_primals_and_tangents(result, outs, body.outputs.size(), l.carry, ys_t);
  b.set_outputs(result);

  std::vector<ValueId> args;
  from = 0;
  for (const std::vector<bool>* group : groups) {
    append(args, part(c.ins, from, group->size()));
    for (std::size_t k = 0; k < group->size(); ++k) {
      if ((*group)[k]) args.push_back(c.tangent(from + k));
    }
    from += group->size();
  }
  std::vector<ValueType> want = part(c.in_types, 0, l.carry);
  append(want, kept_types(want, carry_t));
  std::vector<ValueType> y_types;
  for (std::size_t k = l.carry; k < body.outputs.size(); ++k) y_types.push_back(body.types[body.outputs[k]]);
  append(want, y_types);
  append(want, kept_types(y_types, ys_t));
  Params params = with_programs(c.params, "body", {made(typed_outputs(b.build(), want))});
  params["num_carry"] = int_param(static_cast<std::int64_t>(l.carry) + count(carry_t));
  params["num_consts"] = int_param(static_cast<std::int64_t>(l.consts) + count(const_t));
  return take_results(c, c.e.emit_many(Prim::scan, args, params), {carry_t, ys_t});
}


// ---- VJP ----------------------------------------------------------------------------------------------------

// cond: a cond of the branches' VJPs, on (operands, the outputs' cotangents) -> the floating operands'
// cotangents. Each branch's VJP recomputes its own forward (only the branch taken runs).
void cond_vjp(VjpContext& c) {
  std::vector<int> wrt;
  for (std::size_t k = 1; k < c.ins.size(); ++k) {
    if (is_floating(c.in_types[k].dtype)) wrt.push_back(static_cast<int>(k - 1));
  }
  if (wrt.empty()) return;
  SubPrograms vjps;
  for (const SubProgram& branch : param<SubPrograms>(c.params, "branches")) {
    Program vjp = vjp_program(inner(branch), wrt);
    vjp.outputs.erase(vjp.outputs.begin(), vjp.outputs.begin() + static_cast<std::ptrdiff_t>(c.outs.size()));
    std::vector<ValueType> want;
    for (const int k : wrt) want.push_back(c.in_types[static_cast<std::size_t>(k) + 1]);
    vjps.push_back(made(typed_outputs(std::move(vjp), want)));
  }
  std::vector<ValueId> ins = c.ins;
  append(ins, c.cts);
  const std::vector<ValueId> cts = c.e.emit_many(Prim::cond, ins, with_programs(c.params, "branches", vjps));
  for (std::size_t k = 0; k < wrt.size(); ++k) c.give(static_cast<std::size_t>(wrt[k]) + 1, cts[k]);
}

// scan's VJP split as JAX splits it: the body's VJP partially evaluated with the primals known, into a known
// part (the body's forward, also returning the residuals its backward reads), run by the forward scan, and an
// unknown part (the backward, from the residuals and the cotangents), run by the reverse scan. So the backward
// recomputes no forward (checkpoint regions aside), and no step recomputes the scan. A residual that is one of the consts or xs
// is passed as it is, as is one that is a y (the forward's stacked ys), one computed from the consts alone (W's transpose) once before the reverse scan (JAX
// hoists such loop invariants too); the others are stacked by the forward scan (as ys). The equations of a checkpoint region
// inside the body are recomputed by the backward (partial_eval's `recompute`): their inputs are stored, not
// their results.
struct ScanSplit {
  enum class From { stacked, x, y, constant, invariant };
  std::vector<int> wrt;  // the body's floating inputs
  Program known;         // (carry, x, consts) -> (carry, y, the stacked residuals)
  Program unknown;       // (residuals, carry cotangents, y cotangents) -> wrt's cotangents
  Program invariant;     // (consts) -> the residuals computed from them alone
  std::vector<std::pair<From, std::size_t>> residuals;  // per residual of `unknown`: where it comes from
  std::size_t stacked = 0;
};

// The same split for the forward rule and the VJP rule (both call it on the same equation).
ScanSplit split_scan(const Program& body, const ScanLayout& l, const std::vector<ValueType>& in_types) {
  ScanSplit split;
  for (std::size_t k = 0; k < in_types.size(); ++k) {
    if (is_floating(in_types[k].dtype)) split.wrt.push_back(static_cast<int>(k));
  }
  if (split.wrt.empty()) return split;
  std::vector<bool> backward;
  const Program vjp = vjp_program(body, split.wrt, backward);  // (carry, x, consts, cts) -> (carry, y, wrt cts)
  const std::size_t n_in = body.inputs.size(), n_out = body.outputs.size();
  // The residuals are the forward's values the backward reads: the backward's equations that read a value of
  // the iteration (made from its carry or x) go to the unknown part even where their inputs are known (a
  // reshape of the carry for W's cotangent: the carry is stored, not also its reshape); those made from the
  // consts alone stay known, to be hoisted out of the loop below. A checkpoint region's recomputation is
  // the backward's too, so its inputs are stored rather than its results.
  std::vector<char> per_iteration(vjp.types.size(), 0);
  for (std::size_t k = 0; k < l.carry + l.xs; ++k) per_iteration[vjp.inputs[k]] = 1;
  std::vector<bool> recompute(vjp.equations.size(), false);
  for (std::size_t i = 0; i < vjp.equations.size(); ++i) {
    const Equation& eq = vjp.equations[i];
    bool reads = false;
    for (ValueId id : eq.inputs) reads = reads || per_iteration[id] != 0;
    for (ValueId id : eq.outputs) per_iteration[id] = reads ? 1 : 0;
    recompute[i] = backward[i] && reads;
  }
  std::vector<bool> unknowns(n_in + n_out, false), instantiate(vjp.outputs.size(), false);
  std::fill(unknowns.begin() + static_cast<std::ptrdiff_t>(n_in), unknowns.end(), true);
  std::fill(instantiate.begin() + static_cast<std::ptrdiff_t>(n_out), instantiate.end(), true);
  PartialEval pe = partial_eval(vjp, unknowns, instantiate, recompute);
  split.unknown = std::move(pe.unknown);
  split.known = std::move(pe.known);
  std::vector<ValueId>& outs = split.known.outputs;
  std::vector<ValueId> kept(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(n_out));
  // The known part's values computed from the consts alone, emitted again into `invariant` as found.
  const Program& known = split.known;
  Builder hoisted(known.mesh, known.rules);
  std::map<ValueId, ValueId> invariant;
  for (std::size_t k = l.carry + l.xs; k < known.inputs.size(); ++k) {
    invariant[known.inputs[k]] = hoisted.input(known.types[known.inputs[k]]);
  }
  for (std::size_t k = 0; k < known.constants.size(); ++k) {
    invariant[known.constants[k]] = hoisted.constant(known.constant_values[k]);
  }
  for (const Equation& eq : known.equations) {
    std::vector<ValueId> ins;
    for (ValueId id : eq.inputs) {
      if (const auto it = invariant.find(id); it != invariant.end()) ins.push_back(it->second);
    }
    if (ins.size() != eq.inputs.size()) continue;
    const std::vector<ValueId> results = hoisted.emit(eq.info(), ins, eq.params, eq.source);
    for (std::size_t k = 0; k < results.size(); ++k) invariant[eq.outputs[k]] = results[k];
  }
  std::vector<ValueId> hoisted_outs;
  for (std::size_t r = n_out; r < outs.size(); ++r) {
    const auto input = std::find(split.known.inputs.begin(), split.known.inputs.end(), outs[r]);
    const auto at = static_cast<std::size_t>(input - split.known.inputs.begin());
    if (input != split.known.inputs.end() && at >= l.carry + l.xs) {
      split.residuals.emplace_back(ScanSplit::From::constant, at - l.carry - l.xs);
    } else if (input != split.known.inputs.end() && at >= l.carry) {
      split.residuals.emplace_back(ScanSplit::From::x, at - l.carry);
    } else if (const auto y = std::find(outs.begin() + static_cast<std::ptrdiff_t>(l.carry),
                                        outs.begin() + static_cast<std::ptrdiff_t>(n_out), outs[r]);
               input == split.known.inputs.end() && y != outs.begin() + static_cast<std::ptrdiff_t>(n_out)) {
      split.residuals.emplace_back(ScanSplit::From::y, static_cast<std::size_t>(y - outs.begin()) - l.carry);
    } else if (input == split.known.inputs.end() && invariant.count(outs[r]) > 0) {
      split.residuals.emplace_back(ScanSplit::From::invariant, hoisted_outs.size());
      hoisted_outs.push_back(invariant.at(outs[r]));
    } else {
      split.residuals.emplace_back(ScanSplit::From::stacked, split.stacked++);
      kept.push_back(outs[r]);
    }
  }
  outs = std::move(kept);
  hoisted.set_outputs(hoisted_outs);
  split.invariant = hoisted.build();
  return split;
}

// scan's forward pass: the scan of the split's known part, its stacked residuals left for scan_vjp.
WithResiduals scan_forward(VjpForwardContext& c) {
  const Program& body = inner(param<SubPrograms>(c.params, "body")[0]);
  const ScanLayout l = scan_layout(c.params, c.ins.size());
  ScanSplit split = split_scan(body, l, c.in_types);
  if (split.wrt.empty()) return {c.e.emit_many(Prim::scan, c.ins, c.params), {}};
  std::vector<ValueId> outs = c.e.emit_many(Prim::scan, c.ins, with_programs(c.params, "body", {made(std::move(split.known))}));
  const auto first_residual = outs.begin() + static_cast<std::ptrdiff_t>(body.outputs.size());
  return {{outs.begin(), first_residual}, {first_residual, outs.end()}};
}

// scan: the reverse scan of the split's unknown part. Its carry: the floating carries' cotangents, then the
// floating consts' cotangents summed over the iterations; its xs: the residuals stacked or taken from the xs,
// then the floating ys' cotangents; its consts: the residuals that are consts; its ys: the floating xs'
// cotangents.
// The type of the sum of a const's cotangents over a scan's iterations. Under pmap's rules every replica's is its
// own (an invariant const met by varying values gets a varying cotangent): typed varying over the whole mesh.
ValueType const_cotangent_type(const Program& body, ValueType t) {
  if (body.rules != CollectiveRules::pmap) return t;
  t.varying.clear();
  for (const MeshAxis& a : body.mesh.axes()) t.varying.push_back(a.name);
  std::sort(t.varying.begin(), t.varying.end());
  return t;
}

void scan_vjp(VjpContext& c) {
  const Program& body = inner(param<SubPrograms>(c.params, "body")[0]);
  const ScanLayout l = scan_layout(c.params, c.ins.size());
  const std::size_t num_ys = body.outputs.size() - l.carry;
  const ScanSplit split = split_scan(body, l, c.in_types);
  if (split.wrt.empty()) return;
  if (c.residuals.size() != split.stacked) {
    throw RuleError("scan: the VJP rule expects " + std::to_string(split.stacked) + " stacked residuals from its "
                    "forward rule, it left " + std::to_string(c.residuals.size()));
  }
  const Program& backward = split.unknown;
  const std::vector<bool> floating_in = floating_flags(c.in_types);
  const std::vector<bool> ys_floating = floating_flags(part(c.out_types, l.carry, num_ys));
  using From = ScanSplit::From;
  const auto residual_type = [&](std::size_t r) { return backward.types[backward.inputs[r]]; };

  Builder b(body.mesh, body.rules);
  Emitter e(b);
  // The reverse scan's inputs, made in its order: carry, xs, consts.
  std::vector<ValueId> carry_cts, const_sums, residuals(split.residuals.size()), y_cts;
  for (std::size_t k = 0; k < l.carry; ++k) {
    if (floating_in[k]) carry_cts.push_back(b.input(body.types[body.inputs[k]]));
  }
  const auto const_sum_type = [&](const ValueType& t) { return const_cotangent_type(body, t); };
  for (std::size_t k = l.carry + l.xs; k < c.ins.size(); ++k) {
    if (floating_in[k]) const_sums.push_back(b.input(const_sum_type(body.types[body.inputs[k]])));
  }
  const auto is_const = [&](std::size_t r) {
    return split.residuals[r].first == From::constant || split.residuals[r].first == From::invariant;
  };
  for (std::size_t r = 0; r < residuals.size(); ++r) {
    if (!is_const(r)) residuals[r] = b.input(residual_type(r));
  }
  for (std::size_t k = 0; k < num_ys; ++k) {
    if (ys_floating[k]) y_cts.push_back(b.input(body.types[body.outputs[l.carry + k]]));
  }
  for (std::size_t r = 0; r < residuals.size(); ++r) {
    if (is_const(r)) residuals[r] = b.input(residual_type(r));
  }
  std::vector<ValueId> args = residuals;
  for (std::size_t k = 0, at = 0; k < l.carry; ++k) {
    args.push_back(floating_in[k] ? carry_cts[at++] : e.zeros(body.types[body.outputs[k]]));
  }
  for (std::size_t k = 0, at = 0; k < num_ys; ++k) {
    args.push_back(ys_floating[k] ? y_cts[at++] : e.zeros(body.types[body.outputs[l.carry + k]]));
  }
  const std::vector<ValueId> cts = inline_program(b, backward, args);  // wrt's cotangents
  // The new carry (the carries' cotangents, the consts' sums) and ys (the xs' cotangents), each typed as the
  // body input it is the cotangent of (typed_outputs).
  std::vector<ValueId> next, x_cts;
  std::vector<ValueType> want, const_types, x_types;
  for (std::size_t k = 0, at = 0; k < split.wrt.size(); ++k) {
    const auto in = static_cast<std::size_t>(split.wrt[k]);
    const ValueType& type = body.types[body.inputs[in]];
    if (in < l.carry) {
      next.push_back(cts[k]);
      want.push_back(type);
    } else if (in < l.carry + l.xs) {
      x_cts.push_back(cts[k]);
      x_types.push_back(type);
    } else {
      const_sums[at] = e.emit(Prim::add, {const_sums[at], cts[k]});
      const_types.push_back(const_sum_type(type));
      ++at;
    }
  }
  append(next, const_sums);
  append(next, x_cts);
  append(want, const_types);
  append(want, x_types);
  b.set_outputs(next);

  // (a cotangent from outside may vary over fewer axes than its carry or y: typed as the body takes it)
  std::vector<ValueId> ins;
  for (std::size_t k = 0; k < l.carry; ++k) {
    if (floating_in[k]) ins.push_back(pvary_to(c.e, c.ct(k), body.types[body.inputs[k]].varying));
  }
  for (std::size_t k = l.carry + l.xs; k < c.ins.size(); ++k) {
    if (floating_in[k]) ins.push_back(pvary_to(c.e, c.e.zeros(c.in_types[k]), const_sum_type(c.in_types[k]).varying));
  }
  const std::size_t num_carry = ins.size();
  std::vector<ValueId> consts;
  const std::vector<ValueId> invariants = inline_program(
      c.e.builder(), split.invariant, part(c.ins, l.carry + l.xs, l.consts));
  for (const auto& [from, index] : split.residuals) {
    if (from == From::invariant) consts.push_back(invariants[index]);
    if (from == From::stacked) ins.push_back(c.residuals[index]);
    if (from == From::x) ins.push_back(c.ins[l.carry + index]);
    if (from == From::y) ins.push_back(c.outs[l.carry + index]);
    if (from == From::constant) consts.push_back(c.ins[l.carry + l.xs + index]);
  }
  for (std::size_t k = 0; k < num_ys; ++k) {
    if (ys_floating[k]) ins.push_back(pvary_to(c.e, c.ct(l.carry + k), body.types[body.outputs[l.carry + k]].varying));
  }
  append(ins, consts);
  Params params = with_programs(c.params, "body", {made(typed_outputs(b.build(), want))});
  params["reverse"] = bool_param(!l.reverse);
  params["num_carry"] = int_param(static_cast<std::int64_t>(num_carry));
  params["num_consts"] = int_param(static_cast<std::int64_t>(consts.size()));
  const std::vector<ValueId> results = c.e.emit_many(Prim::scan, ins, params);
  // results: the carries' cotangents, the consts', then the xs' stacked, each group in wrt's order.
  std::size_t at = 0;
  for (const int k : split.wrt) {
    if (static_cast<std::size_t>(k) < l.carry) c.give(static_cast<std::size_t>(k), results[at++]);
  }
  for (const int k : split.wrt) {
    if (static_cast<std::size_t>(k) >= l.carry + l.xs) c.give(static_cast<std::size_t>(k), results[at++]);
  }
  for (const int k : split.wrt) {
    const auto in = static_cast<std::size_t>(k);
    if (in >= l.carry && in < l.carry + l.xs) c.give(in, results[at++]);
  }
}

// ---- batching -----------------------------------------------------------------------------------------------

std::vector<bool> any_of_each(const std::vector<bool>& a, const std::vector<bool>& b) {
  std::vector<bool> out(a.size());
  for (std::size_t k = 0; k < a.size(); ++k) out[k] = a[k] || b[k];
  return out;
}

// `p` batched with its first `carry` inputs and outputs (a loop's carry) batched alike: a carry the body
// batches is batched from the start, until nothing changes (JAX's fixpoint). `flags` holds every input's
// flag and is updated in place; the body, its carry outputs conformed to the carry's flags.
BatchedProgram carry_fixpoint(const Program& p, std::size_t carry, std::vector<bool>& flags, const BatchContext& c) {
  for (;;) {
    BatchedProgram batched = batch_program(p, flags, c.size, c.axis_name);
    bool changed = false;
    for (std::size_t k = 0; k < carry; ++k) {
      if (batched.out_batched[k] && !flags[k]) changed = flags[k] = true;
    }
    if (changed) continue;
    std::vector<bool> want = batched.out_batched;
    for (std::size_t k = 0; k < carry; ++k) want[k] = flags[k];
    batched.program = conform_batched(std::move(batched), want, c.size);
    batched.out_batched = want;
    return batched;
  }
}

// The batch axis of a batched [B, ...] value as a mask against results of rank 1 + `rank`: [B, 1, ..., 1].
ValueId per_example(Emitter& e, ValueId mask, std::int64_t size, std::size_t rank) {
  std::vector<std::int64_t> shape(rank + 1, 1);
  shape[0] = size;
  return e.reshape(mask, shape);
}

// cond. An index every example shares: a cond of the batched branches, their outputs batched alike (an output
// is batched when any branch batches it). A batched index: JAX's rule, every branch run on the whole batch and
// each example's result selected by its own index (collectives in every branch run, as JAX's select does).
Batched cond_batch(BatchContext& c) {
  const SubPrograms& branches = param<SubPrograms>(c.params, "branches");
  const std::vector<bool> operands(c.batched.begin() + 1, c.batched.end());
  std::vector<BatchedProgram> batched;
  std::vector<bool> want(c.out_types.size(), c.batched[0]);
  for (const SubProgram& branch : branches) {
    batched.push_back(batch_program(inner(branch), operands, c.size, c.axis_name));
    want = any_of_each(want, batched.back().out_batched);
  }
  SubPrograms conformed;
  for (BatchedProgram& b : batched) conformed.push_back(made(conform_batched(std::move(b), want, c.size)));
  if (!c.batched[0]) {
    return {c.e.emit_many(Prim::cond, c.ins, with_programs(c.params, "branches", conformed)), want};
  }
  const DType index_type = c.in_types[0].dtype;
  const auto last = static_cast<double>(branches.size() - 1);
  const ValueId index = c.e.emit(Prim::minimum, {c.e.emit(Prim::maximum, {c.ins[0], c.e.scalar(0, index_type)}),
                                                 c.e.scalar(last, index_type)});
  const std::vector<ValueId> operand_ids(c.ins.begin() + 1, c.ins.end());
  std::vector<ValueId> outs = inline_program(c.e.builder(), inner(conformed[0]), operand_ids);
  for (std::size_t b = 1; b < conformed.size(); ++b) {
    const std::vector<ValueId> taken = inline_program(c.e.builder(), inner(conformed[b]), operand_ids);
    const ValueId is_b = c.e.emit(Prim::equal, {index, c.e.scalar(static_cast<double>(b), index_type)});
    for (std::size_t j = 0; j < outs.size(); ++j) {
      const ValueId mask = per_example(c.e, is_b, c.size, c.out_types[j].shape.size());
      outs[j] = c.e.emit(Prim::where, {mask, taken[j], outs[j]});
    }
  }
  return {outs, want};
}

// scan: a scan of the batched body, the carry batched as a fixpoint; batched xs and ys carry the batch axis
// second inside the scan (the scan's axis stays first).
Batched scan_batch(BatchContext& c) {
  const Program& body = inner(param<SubPrograms>(c.params, "body")[0]);
  const ScanLayout l = scan_layout(c.params, c.ins.size());
  std::vector<bool> flags = c.batched;
  const BatchedProgram batched = carry_fixpoint(body, l.carry, flags, c);
  std::vector<ValueId> ins;
  for (std::size_t k = 0; k < c.ins.size(); ++k) {
    const bool is_xs = k >= l.carry && k < l.carry + l.xs;
    if (is_xs && c.batched[k]) {
      ins.push_back(c.e.moveaxis(c.ins[k], 0, 1));
    } else {
      ins.push_back(flags[k] ? c.materialized(k) : c.ins[k]);
    }
  }
  std::vector<ValueId> outs = c.e.emit_many(Prim::scan, ins, with_programs(c.params, "body", {made(batched.program)}));
  for (std::size_t k = l.carry; k < outs.size(); ++k) {
    if (batched.out_batched[k]) outs[k] = c.e.moveaxis(outs[k], 1, 0);
  }
  return {outs, batched.out_batched};
}

// while_loop. A predicate every example shares: a loop of the batched body (the carry batched as a
// fixpoint). A batched predicate (JAX's rule): the whole carry batched, the loop runs while any example's
// predicate holds, and each iteration updates an example's carry only where its own predicate holds.
Batched while_batch(BatchContext& c) {
  const Program& cond = inner(param<SubPrograms>(c.params, "cond")[0]);
  const Program& body = inner(param<SubPrograms>(c.params, "body")[0]);
  const WhileLayout l = while_layout(c.params, c.ins.size());
  std::vector<bool> body_flags = part(c.batched, 0, l.carry);
  append(body_flags, part(c.batched, l.carry + l.cond_consts, l.body_consts));
  carry_fixpoint(body, l.carry, body_flags, c);
  std::vector<bool> cond_flags = part(body_flags, 0, l.carry);
  append(cond_flags, part(c.batched, l.carry, l.cond_consts));
  const bool batched_predicate = batch_program(cond, cond_flags, c.size, c.axis_name).out_batched[0];
  if (batched_predicate) {
    for (std::size_t k = 0; k < l.carry; ++k) body_flags[k] = cond_flags[k] = true;
  }
  const BatchedProgram batched_body = carry_fixpoint(body, l.carry, body_flags, c);
  BatchedProgram batched_cond = batch_program(cond, cond_flags, c.size, c.axis_name);
  std::vector<ValueId> ins;
  for (std::size_t k = 0; k < l.carry; ++k) ins.push_back(body_flags[k] ? c.materialized(k) : c.ins[k]);
  const std::vector<bool> carry_flags = part(body_flags, 0, l.carry);
  if (!batched_predicate) {
    append(ins, part(c.ins, l.carry, l.cond_consts + l.body_consts));
    Params params = with_programs(c.params, "cond", {made(std::move(batched_cond.program))});
    params = with_programs(params, "body", {made(batched_body.program)});
    return {c.e.emit_many(Prim::while_loop, ins, params), carry_flags};
  }
  const Program& test = batched_cond.program;
  // cond: (carry, cond_consts) -> whether any example's predicate holds.
  Builder bc(test.mesh, test.rules);
  Emitter ec(bc);
  const std::vector<ValueId> cond_ins = inputs_like(bc, test, 0, test.inputs.size());
  const ValueId holds = inline_program(bc, test, cond_ins)[0];
  const ValueId count = ec.emit(Prim::max, {ec.astype(holds, DType::i32)}, {{"axes", ints_param({0})}});
  bc.set_outputs({ec.emit(Prim::not_equal, {count, ec.scalar(0, DType::i32)})});
  // body: (carry, cond_consts, body_consts) -> each example's carry stepped where its predicate holds.
  const Program& step = batched_body.program;
  Builder bb(step.mesh, step.rules);
  Emitter eb(bb);
  const std::vector<ValueId> carry = inputs_like(bb, step, 0, l.carry);
  std::vector<ValueId> test_args = carry;
  append(test_args, inputs_like(bb, test, l.carry, l.cond_consts));
  std::vector<ValueId> step_args = carry;
  append(step_args, inputs_like(bb, step, l.carry, l.body_consts));
  const ValueId now = inline_program(bb, test, test_args)[0];
  std::vector<ValueId> next = inline_program(bb, step, step_args);
  for (std::size_t k = 0; k < l.carry; ++k) {
    const ValueId mask = per_example(eb, now, c.size, c.out_types[k].shape.size());
    next[k] = eb.emit(Prim::where, {mask, next[k], carry[k]});
  }
  bb.set_outputs(next);
  append(ins, part(c.ins, l.carry, l.cond_consts));
  append(ins, part(c.ins, l.carry, l.cond_consts + l.body_consts));
  Params params = with_programs(c.params, "cond", {made(bc.build())});
  params = with_programs(params, "body", {made(bb.build())});
  params["body_nconsts"] = int_param(static_cast<std::int64_t>(l.cond_consts + l.body_consts));
  return {c.e.emit_many(Prim::while_loop, ins, params), carry_flags};
}

}  // namespace

void register_control_ops(std::vector<OpInfo>& ops) {
  ops.push_back({.id = Prim::cond,
                 .min_inputs = 1,
                 .max_inputs = -1,
                 .params = {{"branches", ParamKind::programs}},
                 .infer = infer_cond,
                 .control = run_cond,
                 .vjp = cond_vjp,
                 .jvp = cond_jvp,
                 .batch = cond_batch});
  ops.push_back({.id = Prim::while_loop,
                 .min_inputs = 0,
                 .max_inputs = -1,
                 .params = {{"cond", ParamKind::programs},
                            {"body", ParamKind::programs},
                            {"cond_nconsts", ParamKind::integer},
                            {"body_nconsts", ParamKind::integer}},
                 .infer = infer_while,
                 .control = run_while,
                 .jvp = while_jvp,
                 .batch = while_batch,
                 .no_rule = "Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with "
                            "dynamic start/stop values. Try using lax.scan, or using fori_loop with static "
                            "start/stop."});
  ops.push_back({.id = Prim::scan,
                 .min_inputs = 0,
                 .max_inputs = -1,
                 .params = {{"body", ParamKind::programs},
                            {"length", ParamKind::integer},
                            {"reverse", ParamKind::boolean},
                            {"num_carry", ParamKind::integer},
                            {"num_consts", ParamKind::integer},
                            {"unroll", ParamKind::integer, kOptional}},
                 .infer = infer_scan,
                 .control = run_scan,
                 .vjp = scan_vjp,
                 .vjp_forward = scan_forward,
                 .jvp = scan_jvp,
                 .batch = scan_batch});
}

}  // namespace weft::program
