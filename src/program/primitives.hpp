// The primitives: one list of every primitive a program may hold, from which come the enum an equation's op
// is compared by (`Prim`) and each primitive's name (what programs print and Python emits), and the shape of
// a primitive's definition (`OpInfo`). Each definition is one row in its family file (ops/*.cc), written with
// designated initializers so a row names only the fields it has; the registry (op_registry.hpp) refuses a
// Prim without exactly one row.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "params.hpp"
#include "weft/program.hpp"

namespace weft {
struct CollectiveDescriptor;  // core/collective.hpp
}

namespace weft::program {

using weft::ValueType;
using ValueId = int;

// Grouped by family file (ops/*.cc); the order is the enum's and means nothing else.
#define WEFT_PRIMITIVES(X)                                                                                        \
  /* ops/elementwise.cc */                                                                                       \
  X(add) X(subtract) X(multiply) X(divide) X(power) X(maximum) X(minimum) X(negative) X(copy) X(integer_pow)     \
  X(exp) X(log) X(log1p) X(tanh) X(sqrt) X(rsqrt) X(sigmoid) X(gelu_tanh) X(gelu_tanh_derivative) X(abs) X(relu) \
  X(where) X(astype) X(stop_gradient) X(sign) X(equal) X(not_equal) X(less) X(less_equal) X(greater)             \
  X(greater_equal) X(bitwise_and) X(bitwise_or) X(bitwise_xor) X(bitwise_not)                                    \
  /* ops/reductions.cc */                                                                                        \
  X(sum) X(mean) X(max) X(min) X(argmax) X(argmin) X(logsumexp) X(cumsum) X(cumprod)                             \
  /* ops/shape.cc */                                                                                             \
  X(reshape) X(transpose) X(broadcast_to) X(concatenate) X(slice)                                                \
  /* ops/linalg.cc, nn.cc, indexing.cc */                                                                        \
  X(matmul) X(softmax) X(log_softmax) X(layer_norm) X(layer_norm_vjp) X(take) X(one_hot)                         \
  /* ops/collectives.cc */                                                                                       \
  X(psum) X(pmean) X(pmax) X(pmin) X(pprod) X(all_reduce_identical_inputs) X(all_reduce_identical_grad_inputs)   \
  X(replicated_reduce_scatter) X(replica_sharded_slice) X(gather_shards) X(all_gather) X(psum_scatter)           \
  X(all_to_all) X(ppermute) X(pbroadcast) X(axis_index) X(pvary)                                                 \
  /* ops/effects.cc */                                                                                           \
  X(host_load) X(host_store) X(remote_load) X(remote_store) X(variable_read) X(variable_update)                  \
  /* ops/custom.cc */                                                                                            \
  X(custom_vjp_call) X(custom_jvp_call)                                                                          \
  /* ops/control.cc, pmap.cc */                                                                                   \
  X(cond) X(while_loop) X(scan) X(pmap)

enum class Prim : std::uint8_t {
#define WEFT_PRIM_ENUMERATOR(name) name,
  WEFT_PRIMITIVES(WEFT_PRIM_ENUMERATOR)
#undef WEFT_PRIM_ENUMERATOR
};

inline constexpr std::size_t kNumPrims = 0
#define WEFT_PRIM_COUNT(name) +1
    WEFT_PRIMITIVES(WEFT_PRIM_COUNT)
#undef WEFT_PRIM_COUNT
    ;

// The primitive's name as programs print it ("add", "psum"); one string per Prim, made once.
const std::string& prim_name(Prim prim);

// A parameter's kind (weft/program_params.hpp: one per ProgramParam alternative, its variant index) and one
// entry of a primitive's schema: {name, kind} or {name, kind, kOptional}.
using ParamKind = ProgramParamKind;
using ParamSpec = ProgramParamSpec;
inline constexpr bool kOptional = false;

// A primitive's array kernel: what the executor runs for an equation it computes locally. Its result has
// exactly the type the primitive's type rule gives (the kernel-types test checks every dtype).
using Kernel = std::vector<Array> (*)(const std::vector<Array>& ins, const Params& params);

// How a control-flow primitive (ops/control.cc) runs its sub-programs: the executor, in the runtime layer above
// this one, implements it, running a sub-program on the same replica as the equation, so a collective inside a
// loop's body meets the other replicas' as one outside it does.
class SubProgramRunner {
 public:
  virtual std::vector<Array> run(const weft::Program& program, std::vector<Array> inputs) = 0;
  // `body` on every replica of its mesh's one axis, operand k split along in_axes[k] (-1: whole to each),
  // result k's replica axis placed at out_axes[k] (-1: replica 0's value): the pmap primitive (ops/pmap.cc).
  virtual std::vector<Array> run_mapped(const weft::Program& body, const std::vector<Array>& inputs,
                                        const std::vector<std::int64_t>& in_axes,
                                        const std::vector<std::int64_t>& out_axes) = 0;

 protected:
  ~SubProgramRunner() = default;
};
// A control-flow primitive's execution: its kernel, given a runner for its sub-programs.
using ControlKernel = std::vector<Array> (*)(const std::vector<Array>& ins, const Params& params,
                                             SubProgramRunner& runner);

using InferRule = std::function<std::vector<ValueType>(const std::vector<ValueType>& ins, const Params& params,
                                                       const Mesh& mesh)>;

// The transformation rules (rule_kit.hpp: their contexts and shared helpers).
struct VjpContext;
struct JvpContext;
struct BatchContext;
struct Batched;
struct VjpForwardContext;
struct WithResiduals;
using VjpForwardRule = WithResiduals (*)(VjpForwardContext&);
using VjpRule = void (*)(VjpContext&);
using JvpRule = std::vector<ValueId> (*)(JvpContext&);
using BatchRule = Batched (*)(BatchContext&);

// One primitive's definition: its identity, arity and parameters, the properties the passes ask of it, the
// rule that infers its result types, its kernel and its transformation rules. A primitive without a rule for a
// transformation either has only integer or bool results (no derivative to take: the VJP and JVP give nothing)
// or says why in `no_rule`.
struct OpInfo {
  Prim id{};
  int min_inputs = 0;
  int max_inputs = 0;  // -1: any number
  // The parameters an equation of it may set: the registry refuses a missing required one, an unknown one and
  // one of another kind.
  std::vector<ParamSpec> params{};
  // Session effects (host / remote transfers, variable updates): never removed, never reordered.
  bool effectful = false;
  // One of the elementwise family: a candidate for fusion (fusion.hpp).
  bool elementwise = false;
  // A collective whose one operand is communicated over its `axes` (psum, all_gather, ppermute, ...): under
  // shard_map an operand that does not vary over those axes is pvary-ed first, and groups are refused.
  bool communicates_operand = false;
  // A collective whose result is the same on every member of a group (a reduction, a gather): what the
  // shared-products analysis may assume of it.
  bool equal_within_groups = false;
  InferRule infer{};
  // nullptr for the collectives and the session effects, which the executor runs on the replica, and for the
  // control-flow primitives, which run through `control`.
  Kernel kernel = nullptr;
  ControlKernel control = nullptr;
  VjpRule vjp = nullptr;
  // How a VJP's forward pass emits the equation where `vjp` needs values computed inside it (rule_kit.hpp's
  // VjpForwardContext); null: emitted as it is.
  VjpForwardRule vjp_forward = nullptr;
  JvpRule jvp = nullptr;
  BatchRule batch = nullptr;
  // Why a missing rule is missing (pmax: "JAX defines no derivative of pmax"), quoted by the refusal.
  std::string no_rule{};
  // A collective's row of the collectives' table (core/collective.hpp): how the executor runs it. Null for
  // every other op.
  const CollectiveDescriptor* collective = nullptr;

  const std::string& name() const { return prim_name(id); }
};

}  // namespace weft::program
