// The registry proper: collects the op families' tables once and checks arity and parameter names before a
// family's rule runs, so the rules see only well-formed equations.
#include "op_registry.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

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
    return list;
  }();
  return ops;
}

// Built once beside the table (every emit, verification and executor dispatch looks an op up); its keys view
// the table's names, which never move.
const OpIndex& op_index() {
  static const OpIndex index = index_ops(all_ops());
  return index;
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
  throw RuleError(info.name + " takes " + expected + " input(s), got " + std::to_string(n));
}

void check_param_names(const OpInfo& info, const Params& params) {
  for (const std::string& name : info.required_params) {
    if (!params.contains(name)) throw RuleError(info.name + " needs parameter '" + name + "'");
  }
  for (const auto& [name, value] : params) {
    if (name == kCheckpointParam) {
      param_int(params, name);  // RuleError unless an int
      continue;
    }
    const bool known = std::count(info.required_params.begin(), info.required_params.end(), name) > 0 ||
                       std::count(info.optional_params.begin(), info.optional_params.end(), name) > 0;
    if (!known) throw RuleError(info.name + " has no parameter '" + name + "'");
  }
}

}  // namespace

OpIndex index_ops(const std::vector<OpInfo>& ops) {
  OpIndex index;
  index.reserve(ops.size());
  for (const OpInfo& info : ops) {
    if (!index.emplace(info.name, &info).second) {
      throw std::logic_error("op registry: '" + info.name +
                             "' is registered twice (two families' tables define it; each op has one definition)");
    }
  }
  return index;
}

const OpInfo* find_op(std::string_view name) {
  const OpIndex& index = op_index();
  const auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

std::vector<std::string> registered_ops() {
  std::vector<std::string> names;
  for (const OpInfo& info : all_ops()) names.push_back(info.name);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<ValueType> infer_result_types(const std::string& op, const std::vector<ValueType>& ins,
                                          const Params& params, const Mesh& mesh, CollectiveRules rules) {
  const OpInfo* info = find_op(op);
  if (info == nullptr) throw RuleError("unknown op '" + op + "'");
  check_arity(*info, ins.size());
  check_param_names(*info, params);
  std::vector<ValueType> outs = info->infer(ins, params, mesh);
  if (rules == CollectiveRules::shard_map && communicates_operand(op)) {
    if (has_param(params, "groups")) {
      throw RuleError(op + " with axis_index_groups under shard_map: shard_map has no groups (as in JAX); use a "
                      "mesh axis of the group's size, or pmap");
    }
    if (op == "all_gather") outs[0].varying = union_varying({outs[0], ins[0]});
  }
  return outs;
}

bool communicates_operand(const std::string& op) {
  static const std::set<std::string> ops = {"psum", "pmean", "pmax", "pmin", "pprod", "all_gather",
                                            "psum_scatter", "all_to_all", "ppermute", "pbroadcast"};
  return ops.contains(op);
}

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
