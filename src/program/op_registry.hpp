// The op registry: for every op a program may hold, its name, arity, parameters and the rule that infers its
// result types. The verifier and the builder both check equations against it, so one table is the truth.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "program.hpp"

namespace weft {
struct CollectiveDescriptor;  // core/collective.hpp
}

namespace weft::program {

using InferRule =
    std::function<std::vector<ValueType>(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh)>;

// The transformation rules (rule_kit.hpp: their contexts and shared helpers).
struct VjpContext;
struct JvpContext;
struct BatchContext;
struct Batched;
using VjpRule = void (*)(VjpContext&);
using JvpRule = std::vector<ValueId> (*)(JvpContext&);
using BatchRule = Batched (*)(BatchContext&);

// One primitive's definition: its name, arity and parameters, the rule that infers its result types, and its
// transformation rules. A primitive without a rule for a transformation either has only integer or bool
// results (no derivative to take: the VJP and JVP give nothing) or says why in `no_rule`.
struct OpInfo {
  std::string name;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: any number
  std::vector<std::string> required_params;
  std::vector<std::string> optional_params;
  // Session effects (host / remote transfers, variable updates): never removed, never reordered.
  bool effectful = false;
  InferRule infer;
  VjpRule vjp = nullptr;
  JvpRule jvp = nullptr;
  BatchRule batch = nullptr;
  // Why a missing rule is missing (pmax: "JAX defines no derivative of pmax"), quoted by the refusal.
  std::string no_rule{};
  // A collective's row of the collectives' table (core/collective.hpp): how the executor runs it. Null for
  // every other op.
  const CollectiveDescriptor* collective = nullptr;
};

// The parameter any equation may carry besides its op's own: `checkpoint=<region>` marks it as recorded inside
// a call of weft.checkpoint (one integer per call). Passes other than the VJP ignore it; the VJP does not keep
// such an equation's values for the backward rules but emits the region again right before them
// (docs/autodiff.md, "checkpoint").
inline const std::string kCheckpointParam = "checkpoint";

// nullptr for an unknown op. A hash lookup in an index built once with the table.
const OpInfo* find_op(std::string_view name);
// A table's index by name; the keys view the table's names, so it lives no longer than `ops`. Throws
// std::logic_error naming an op registered twice (two families claiming one name would make the second
// definition unreachable).
using OpIndex = std::unordered_map<std::string_view, const OpInfo*>;
OpIndex index_ops(const std::vector<OpInfo>& ops);
// Every registered op's name, sorted.
std::vector<std::string> registered_ops();

// Checks arity and parameter names and kinds, then runs the rule: the result types of `op` on `ins`.
// Throws RuleError saying which rule failed.
// Under CollectiveRules::shard_map, all_gather's result keeps varying over its axes (JAX's all_gather) and
// axis index groups are refused.
std::vector<ValueType> infer_result_types(const std::string& op, const std::vector<ValueType>& ins,
                                          const Params& params, const Mesh& mesh,
                                          CollectiveRules rules = CollectiveRules::pmap);
// The collectives whose one operand is communicated over their `axes` (psum, all_gather, ppermute, ...):
// under shard_map an operand that does not vary over those axes is pvary-ed first.
bool communicates_operand(const std::string& op);

// The families' tables (one file each), collected by the registry.
void register_elementwise_ops(std::vector<OpInfo>& ops);
// Whether `name` is one of the elementwise family (the candidates for fusion).
bool is_elementwise_op(const std::string& name);
// ops/reductions.cc, shape.cc, linalg.cc, nn.cc, indexing.cc
void register_reduction_ops(std::vector<OpInfo>& ops);
void register_shape_ops(std::vector<OpInfo>& ops);
void register_linalg_ops(std::vector<OpInfo>& ops);
void register_nn_ops(std::vector<OpInfo>& ops);
void register_indexing_ops(std::vector<OpInfo>& ops);
void register_collective_ops(std::vector<OpInfo>& ops);
void register_effect_ops(std::vector<OpInfo>& ops);

// numpy broadcasting of the inputs' shapes; RuleError "shapes [4] and [3] do not broadcast".
std::vector<std::int64_t> broadcast_shapes(const std::vector<ValueType>& ins);
// Sorted union of the inputs' varying axes.
std::vector<std::string> union_varying(const std::vector<ValueType>& ins);
// "('i', 'j')"
std::string axes_text(const std::vector<std::string>& axes);

}  // namespace weft::program
