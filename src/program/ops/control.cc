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
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "program/printer.hpp"
#include "program/program_impl.hpp"
#include "program/rule_kit.hpp"

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

// `sub`'s inputs must be exactly `want` (what the equation passes it), `what` naming the program.
void check_inputs(Prim op, const program::Program& sub, const std::vector<ValueType>& want, const std::string& what) {
  const std::vector<ValueType> have = input_types(sub);
  if (have.size() != want.size()) {
    throw RuleError(op_name(op) + ": " + what + " takes " + std::to_string(have.size()) + " input(s), the equation gives it " +
                    std::to_string(want.size()) + " " + types_text(want));
  }
  for (std::size_t k = 0; k < have.size(); ++k) {
    if (!(have[k] == want[k])) {
      throw RuleError(op_name(op) + ": " + what + " takes " + type_text(have[k]) + " as input " + std::to_string(k) +
                      ", the equation gives it " + type_text(want[k]));
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
        throw RuleError("cond: branch 0 returns " + type_text(outs[k]) + " as output " + std::to_string(k) +
                        " but branch " + std::to_string(b) + " returns " + type_text(types[k]) +
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
      throw RuleError("while_loop: body_fun returns " + type_text(next[k]) + " for carry " + std::to_string(k) +
                      ", which enters the loop as " + type_text(carry[k]) + " (a loop's carry keeps its type)");
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
      throw RuleError("scan: the body returns " + type_text(outs[k]) + " for carry " + std::to_string(k) +
                      ", which enters the scan as " + type_text(ins[k]) + " (the carry keeps its type)");
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

}  // namespace

void register_control_ops(std::vector<OpInfo>& ops) {
  ops.push_back({.id = Prim::cond,
                 .min_inputs = 1,
                 .max_inputs = -1,
                 .params = {{"branches", ParamKind::programs}},
                 .infer = infer_cond,
                 .control = run_cond,
                 .no_rule = "not yet: the control-flow primitives' transformation rules are being written"});
  ops.push_back({.id = Prim::while_loop,
                 .min_inputs = 0,
                 .max_inputs = -1,
                 .params = {{"cond", ParamKind::programs},
                            {"body", ParamKind::programs},
                            {"cond_nconsts", ParamKind::integer},
                            {"body_nconsts", ParamKind::integer}},
                 .infer = infer_while,
                 .control = run_while,
                 .no_rule = "not yet: the control-flow primitives' transformation rules are being written"});
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
                 .no_rule = "not yet: the control-flow primitives' transformation rules are being written"});
}

}  // namespace weft::program
