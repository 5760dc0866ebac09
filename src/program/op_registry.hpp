// The op registry: for every op a program may hold, its name, arity, parameters and the rule that infers its
// result types. The verifier and the builder both check equations against it, so one table is the truth.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "program.hpp"

namespace weft::program {

// The parameter any equation may carry besides its op's own: `checkpoint=<region>` marks it as recorded inside
// a call of weft.checkpoint (one integer per call). Passes other than the VJP ignore it; the VJP does not keep
// such an equation's values for the backward rules but emits the region again right before them
// (docs/autodiff.md, "checkpoint").
inline const std::string kCheckpointParam = "checkpoint";

// nullptr for an unknown op. A hash lookup in an index built once with the table.
const OpInfo* find_op(std::string_view name);
// The row of `name`; RuleError "unknown op 'frobnicate'" for an unknown one (what the builder and a
// hand-written Equation refuse it with).
const OpInfo& op_named(std::string_view name);
// The row of a primitive (every Prim has exactly one: the registry checks when it builds its table).
const OpInfo& op_info(Prim prim);
// A table's index by primitive (nullptr for a Prim the table has no row of). Throws std::logic_error naming a
// primitive registered twice (two families claiming one would make the second definition unreachable); the
// registry's own table is refused as well when some Prim has no row.
using OpIndex = std::vector<const OpInfo*>;
OpIndex index_ops(const std::vector<OpInfo>& ops);
// The schema's entry for parameter `name` of `op` (the checkpoint marker included); nullptr when it has none.
const ParamSpec* param_spec(const OpInfo& op, std::string_view name);
// Every registered op's name, sorted.
std::vector<std::string> registered_ops();

// Checks arity and the parameters against the op's schema (required ones present, no unknown one, each of its
// kind: RuleError "parameter 'axes' must be a tuple of axis names"), then runs the rule: the result types of
// `op` on `ins`.
// Throws RuleError saying which rule failed.
// Under CollectiveRules::shard_map, all_gather's result keeps varying over its axes (JAX's all_gather) and
// axis index groups are refused.
std::vector<ValueType> infer_result_types(const OpInfo& op, const std::vector<ValueType>& ins,
                                          const Params& params, const Mesh& mesh,
                                          CollectiveRules rules = CollectiveRules::pmap);
// The same by name (tests, tools): RuleError "unknown op 'x'" for an unknown one.
std::vector<ValueType> infer_result_types(std::string_view op, const std::vector<ValueType>& ins,
                                          const Params& params, const Mesh& mesh,
                                          CollectiveRules rules = CollectiveRules::pmap);

// The families' tables (one file each), collected by the registry.
void register_elementwise_ops(std::vector<OpInfo>& ops);
// ops/reductions.cc, shape.cc, linalg.cc, nn.cc, indexing.cc
void register_reduction_ops(std::vector<OpInfo>& ops);
void register_shape_ops(std::vector<OpInfo>& ops);
void register_linalg_ops(std::vector<OpInfo>& ops);
void register_nn_ops(std::vector<OpInfo>& ops);
void register_indexing_ops(std::vector<OpInfo>& ops);
void register_collective_ops(std::vector<OpInfo>& ops);
void register_effect_ops(std::vector<OpInfo>& ops);
void register_control_ops(std::vector<OpInfo>& ops);  // ops/control.cc
void register_pmap_ops(std::vector<OpInfo>& ops);     // ops/pmap.cc

// numpy broadcasting of the inputs' shapes; RuleError "shapes [4] and [3] do not broadcast".
std::vector<std::int64_t> broadcast_shapes(const std::vector<ValueType>& ins);
// Sorted union of the inputs' varying axes.
std::vector<std::string> union_varying(const std::vector<ValueType>& ins);
// "('i', 'j')"
std::string axes_text(const std::vector<std::string>& axes);

}  // namespace weft::program
