// The registry proper: collects the op families' tables once, indexes them by primitive, and checks arity and
// parameter names before a family's rule runs, so the rules see only well-formed equations.
#include "op_registry.hpp"

#include <algorithm>
#include <array>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "custom_calls.hpp"

namespace weft::program {
namespace {

const std::vector<OpInfo>& all_ops() {
  static const std::vector<OpInfo> ops = [] {
    std::vector<OpInfo> list;
    register_elementwise_ops(list);
    register_reduction_ops(list);
    register_shape_ops(list);
    register_linalg_ops(list);
    register_nn_ops(list);
    register_indexing_ops(list);
    register_collective_ops(list);
    register_effect_ops(list);
    register_custom_ops(list);
    register_control_ops(list);
    register_pmap_ops(list);
    return list;
  }();
  return ops;
}

// Built once beside the table: every Prim's row, or a std::logic_error naming the primitive no family defines.
const OpIndex& op_index() {
  static const OpIndex index = [] {
    OpIndex built = index_ops(all_ops());
    for (std::size_t k = 0; k < built.size(); ++k) {
      if (built[k] == nullptr) {
        throw std::logic_error("op registry: no family's table defines '" + prim_name(static_cast<Prim>(k)) +
                               "' (primitives.hpp lists it; each primitive has one row)");
      }
    }
    return built;
  }();
  return index;
}

const std::array<std::string, kNumPrims>& names() {
  static const std::array<std::string, kNumPrims> list = {
#define WEFT_PRIM_NAME(name) #name,
      WEFT_PRIMITIVES(WEFT_PRIM_NAME)
#undef WEFT_PRIM_NAME
  };
  return list;
}

// The parameter every equation may carry (op_registry.hpp, kCheckpointParam): an int.
const ParamSpec& checkpoint_spec() {
  static const ParamSpec spec{kCheckpointParam, ParamKind::integer, kOptional};
  return spec;
}

// Names to primitives, for the builder and Python (the only places an op is still spelled).
const std::unordered_map<std::string_view, Prim>& by_name() {
  static const std::unordered_map<std::string_view, Prim> map = [] {
    std::unordered_map<std::string_view, Prim> built;
    for (std::size_t k = 0; k < kNumPrims; ++k) built.emplace(names()[k], static_cast<Prim>(k));
    return built;
  }();
  return map;
}

void check_arity(const OpInfo& info, std::size_t given) {
  const int n = static_cast<int>(given);
  if (n >= info.min_inputs && (info.max_inputs < 0 || n <= info.max_inputs)) return;
  std::string expected = std::to_string(info.min_inputs);
  if (info.max_inputs < 0) {
    expected += " or more";
  } else if (info.max_inputs != info.min_inputs) {
    expected += " to " + std::to_string(info.max_inputs);
  }
  throw RuleError(info.name() + " takes " + expected + " input(s), got " + std::to_string(n));
}

// The schema's word on each parameter: present when required, known, and of its kind.
void check_params(const OpInfo& info, const Params& params) {
  for (const ParamSpec& spec : info.params) {
    if (spec.required && !params.contains(spec.name)) {
      throw RuleError(info.name() + " needs parameter '" + spec.name + "'");
    }
  }
  for (const auto& [name, value] : params) {
    const ParamSpec* spec = param_spec(info, name);
    if (spec == nullptr) throw RuleError(info.name() + " has no parameter '" + name + "'");
    if (value.index() != static_cast<std::size_t>(spec->kind)) {
      throw RuleError("parameter '" + name + "' must be " + program_param_kind_text(spec->kind));
    }
  }
}

}  // namespace

const ParamSpec* param_spec(const OpInfo& op, std::string_view name) {
  if (name == kCheckpointParam) return &checkpoint_spec();
  for (const ParamSpec& spec : op.params) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

const std::string& prim_name(Prim prim) { return names().at(static_cast<std::size_t>(prim)); }

OpIndex index_ops(const std::vector<OpInfo>& ops) {
  OpIndex index(kNumPrims, nullptr);
  for (const OpInfo& info : ops) {
    const OpInfo*& slot = index.at(static_cast<std::size_t>(info.id));
    if (slot != nullptr) {
      throw std::logic_error("op registry: '" + info.name() +
                             "' is registered twice (two families' tables define it; each op has one definition)");
    }
    slot = &info;
  }
  return index;
}

const OpInfo& op_info(Prim prim) { return *op_index()[static_cast<std::size_t>(prim)]; }

const OpInfo* find_op(std::string_view name) {
  const auto& map = by_name();
  const auto it = map.find(name);
  return it == map.end() ? nullptr : &op_info(it->second);
}

const OpInfo& op_named(std::string_view name) {
  const OpInfo* info = find_op(name);
  if (info == nullptr) throw RuleError("unknown op '" + std::string(name) + "'");
  return *info;
}

std::vector<std::string> registered_ops() {
  std::vector<std::string> list;
  for (const OpInfo& info : all_ops()) list.push_back(info.name());
  std::sort(list.begin(), list.end());
  return list;
}

std::vector<ValueType> infer_result_types(const OpInfo& op, const std::vector<ValueType>& ins, const Params& params,
                                          const Mesh& mesh, CollectiveRules rules) {
  check_arity(op, ins.size());
  check_params(op, params);
  std::vector<ValueType> outs = op.infer(ins, params, mesh);
  if (rules == CollectiveRules::shard_map && op.communicates_operand) {
    if (has_param(params, "groups")) {
      throw RuleError(op.name() + " with axis_index_groups under shard_map: shard_map has no groups (as in JAX); "
                      "use a mesh axis of the group's size, or pmap");
    }
    if (op.id == Prim::all_gather) outs[0].varying = union_varying({outs[0], ins[0]});
  }
  return outs;
}

std::vector<ValueType> infer_result_types(std::string_view op, const std::vector<ValueType>& ins,
                                          const Params& params, const Mesh& mesh, CollectiveRules rules) {
  return infer_result_types(op_named(op), ins, params, mesh, rules);
}

Equation::Equation(Prim op, Params parameters, std::vector<ValueId> ins, std::vector<ValueId> outs, std::string where)
    : Equation(op_info(op), std::move(parameters), std::move(ins), std::move(outs), std::move(where)) {}
Equation::Equation(std::string_view op, Params parameters, std::vector<ValueId> ins, std::vector<ValueId> outs,
                   std::string where)
    : Equation(op_named(op), std::move(parameters), std::move(ins), std::move(outs), std::move(where)) {}

std::vector<std::string> union_varying(const std::vector<ValueType>& ins) {
  std::set<std::string> axes;
  for (const ValueType& in : ins) axes.insert(in.varying.begin(), in.varying.end());
  return {axes.begin(), axes.end()};
}

std::string axes_text(const std::vector<std::string>& axes) {
  std::string text = "(";
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (i > 0) text += ", ";
    text += "'" + axes[i] + "'";
  }
  if (axes.size() == 1) text += ",";
  return text + ")";
}

}  // namespace weft::program
