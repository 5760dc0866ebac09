// Builder: type inference at each emit, through the same registry the verifier checks against.
#include "builder.hpp"

#include <algorithm>

#include "op_registry.hpp"
#include "verifier.hpp"
#include "weft/error.hpp"

namespace weft::program {

Builder::Builder(Mesh mesh, CollectiveRules rules) {
  program_.mesh = std::move(mesh);
  program_.rules = rules;
}

ValueId Builder::input(ValueType type) {
  program_.types.push_back(std::move(type));
  const auto id = static_cast<ValueId>(program_.types.size() - 1);
  program_.inputs.push_back(id);
  return id;
}

ValueId Builder::constant(Array value) {
  program_.types.push_back(ValueType{value.dtype(), value.shape(), {}});
  const auto id = static_cast<ValueId>(program_.types.size() - 1);
  program_.constants.push_back(id);
  program_.constant_values.push_back(std::move(value));
  return id;
}

const ValueType& Builder::type(ValueId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= program_.types.size()) {
    throw InvalidArgument("program builder: value " + std::to_string(id) + " does not exist (the program has " +
                          std::to_string(program_.types.size()) + ")");
  }
  return program_.types[id];
}

std::vector<ValueId> Builder::with_pvary(const OpInfo& op, const std::vector<ValueId>& ins, const Params& params,
                                         const std::string& source) {
  // A control-flow equation's operands are typed by its sub-programs' inputs (a loop's invariant consts stay
  // invariant beside a varying carry): its type rule checks them against those, nothing is pvary-ed.
  if (op.effectful || op.id == Prim::pvary || op.control != nullptr) return ins;
  std::vector<std::string> want;
  if (op.communicates_operand) {
    auto axes = params.find("axes");
    if (ins.size() != 1 || axes == params.end()) return ins;
    const auto* names = std::get_if<std::vector<std::string>>(&axes->second);
    if (names == nullptr) return ins;
    std::vector<ValueType> both{type(ins[0]), ValueType{}};
    both[1].varying = *names;
    for (const std::string& a : *names) {
      if (!program_.mesh.has_axis(a)) return ins;  // the rule names the unbound axis
    }
    want = union_varying(both);
  } else if (ins.size() > 1) {
    std::vector<ValueType> in_types;
    for (ValueId id : ins) in_types.push_back(type(id));
    want = union_varying(in_types);
  } else {
    return ins;
  }
  std::vector<ValueId> out = ins;
  for (ValueId& id : out) {
    const std::vector<std::string>& has = type(id).varying;
    if (has == want) continue;
    // A constant is the same on every device and never differentiated: no pvary needed for its type's sake.
    const auto& constants = program_.constants;
    if (std::find(constants.begin(), constants.end(), id) != constants.end()) continue;
    std::vector<std::string> missing;
    for (const std::string& a : want) {
      if (std::find(has.begin(), has.end(), a) == has.end()) missing.push_back(a);
    }
    id = emit1(op_info(Prim::pvary), {id}, {{"axes", Param{missing}}}, source);
  }
  return out;
}

std::vector<ValueId> Builder::emit(const OpInfo& op, const std::vector<ValueId>& ins_given, Params params,
                                   std::string source) {
  const std::vector<ValueId> ins =
      program_.rules == CollectiveRules::shard_map ? with_pvary(op, ins_given, params, source) : ins_given;
  std::vector<ValueType> in_types;
  for (ValueId id : ins) in_types.push_back(type(id));
  program_.equations.push_back(Equation{op, std::move(params), ins, {}, std::move(source)});
  std::vector<ValueType> out_types;
  try {
    out_types = infer_result_types(op, in_types, program_.equations.back().params, program_.mesh, program_.rules);
  } catch (const RuleError& e) {
    const std::string message = equation_error_prefix(program_, program_.equations.size() - 1) + e.what();
    program_.equations.pop_back();
    throw InvalidArgument(message);
  }
  Equation& eq = program_.equations.back();
  for (ValueType& out : out_types) {
    program_.types.push_back(std::move(out));
    eq.outputs.push_back(static_cast<ValueId>(program_.types.size() - 1));
  }
  return eq.outputs;
}

std::vector<ValueId> Builder::emit(Prim op, const std::vector<ValueId>& ins, Params params, std::string source) {
  return emit(op_info(op), ins, std::move(params), std::move(source));
}

namespace {

// The one place a name becomes a primitive while building: an unknown name is refused before any equation.
const OpInfo& resolve(std::string_view op, const std::string& source) {
  const OpInfo* info = find_op(op);
  if (info == nullptr) {
    throw InvalidArgument("program builder: unknown op '" + std::string(op) + "'" +
                          (source.empty() ? "" : " (" + source + ")"));
  }
  return *info;
}

}  // namespace

std::vector<ValueId> Builder::emit(std::string_view op, const std::vector<ValueId>& ins, Params params,
                                   std::string source) {
  const OpInfo& info = resolve(op, source);
  return emit(info, ins, std::move(params), std::move(source));
}

ValueId Builder::emit1(std::string_view op, const std::vector<ValueId>& ins, Params params, std::string source) {
  const OpInfo& info = resolve(op, source);
  return emit1(info, ins, std::move(params), std::move(source));
}

ValueId Builder::emit1(const OpInfo& op, const std::vector<ValueId>& ins, Params params, std::string source) {
  const std::vector<ValueId> outs = emit(op, ins, std::move(params), std::move(source));
  if (outs.size() != 1) {
    throw InvalidArgument("program builder: " + op.name() + " has " + std::to_string(outs.size()) +
                          " results; emit1 is for ops with one");
  }
  return outs[0];
}

void Builder::set_outputs(std::vector<ValueId> outputs) {
  for (ValueId id : outputs) type(id);
  program_.outputs = std::move(outputs);
}

Program Builder::build() const {
  verify(program_);
  return program_;
}

}  // namespace weft::program
