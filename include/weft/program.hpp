// Programs: a function traced once into a typed SSA program (a jaxpr) that every replica runs in C++.
//
//   ProgramBuilder b(Mesh({{"i", 8}}));
//   int x = b.input({DType::f32, {4}, {"i"}});
//   int y = b.emit("psum", {x}, {{"axes", std::vector<std::string>{"i"}}})[0];
//   b.set_outputs({y});
//   Program p = b.build();            // verified; p.text() prints like jax.make_jaxpr
//   std::vector<Array> out = run_program(p, replica, inputs);
//
// Tracers (weft.jit / weft.pmap in Python) record into a ProgramBuilder; the runtime runs the result
// equation by equation on each replica's fiber, through the same collectives as hand-written code, freeing
// every buffer right after its last use. docs/programs.md describes the layer and the ops.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "weft/array.hpp"
#include "weft/dtype.hpp"
#include "weft/groups.hpp"
#include "weft/program_params.hpp"

namespace weft {

class Replica;
struct ProgramHandles;  // weft/session.hpp
namespace program {
struct Program;
class Builder;
class TraceState;
}  // namespace program

// What a trace knows of an array without its data (JAX's abstract value): dtype, shape, and the mesh axes
// along which the value may differ between replicas (JAX's varying axes; sorted, unique).
struct ValueType {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::string> varying;

  std::int64_t num_elements() const;
  std::size_t num_bytes() const;
  bool operator==(const ValueType&) const = default;
};

// Which of JAX's two rule sets a program's collectives follow (docs/autodiff.md). Under `pmap` values mix
// freely and psum transposes to psum (so the gradient of a psum'ed loss is n-scaled, as in JAX). Under
// `shard_map` (JAX's shard_map with check_vma=True) the varying axes are the law: an op mixing a value that
// varies over an axis with one that does not gets the latter `pvary`-ed first (as does a collective's
// operand that does not vary over the collective's axes), all_gather's result stays varying, psum
// transposes to pvary and pvary to psum: the gradient of a pmean'ed loss with respect to invariant
// parameters is the true one, with one all-reduce per parameter. Axis index groups are refused there, as
// JAX's shard_map has none.
enum class CollectiveRules { pmap, shard_map };

// A built program: immutable and shared (copies share it). Empty until built.
class Program {
 public:
  Program();
  // The jaxpr-like text: "{ lambda ; a:f32[4] . let\n    b:f32[4] = psum[axes=('i',)] a\n  in (b,) }".
  std::string text() const;
  std::size_t num_equations() const;
  // How many equations apply `op`.
  std::size_t count(std::string_view op) const;
  // The op of equation i, in program order.
  const std::string& equation_op(std::size_t i) const;
  const Mesh& mesh() const;
  CollectiveRules collective_rules() const;
  std::vector<ValueType> input_types() const;
  std::vector<ValueType> output_types() const;
  // Peak bytes of the buffers live at once when the program runs (inputs included; constants not).
  std::size_t peak_live_bytes() const;
  // How many runs of elementwise equations execute fused (block by block; WEFT_FUSION, docs/programs.md).
  std::size_t fused_runs() const;

  struct Impl;
  explicit Program(std::shared_ptr<const Impl> impl);
  const Impl& impl() const;

 private:
  std::shared_ptr<const Impl> impl_;
};
std::ostream& operator<<(std::ostream& os, const Program& program);

// The parameters op `op` takes, as the program registry defines them (docs/programs.md, "The ops"): what a
// binding converts its values by; last, the optional `checkpoint` marker every equation may carry (an int,
// weft::checkpoint's region). InvalidArgument "unknown op 'x'" for an op the registry does not know.
std::vector<ProgramParamSpec> op_schema(std::string_view op);
// "an int", "a tuple of axis names": how a refusal names a kind ("parameter 'axes' must be a tuple of axis names").
const char* program_param_kind_text(ProgramParamKind kind);
// "int", "strs": a kind's name as the Python module spells it (_weft.op_schema).
const char* program_param_kind_name(ProgramParamKind kind);

// Records a program equation by equation, inferring each result's type (shape, dtype, varying axes) as it
// goes; a rule broken is an InvalidArgument naming the equation, its source and the rule, at once.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(Mesh mesh = Mesh(), CollectiveRules rules = CollectiveRules::pmap);
  ~ProgramBuilder();
  ProgramBuilder(ProgramBuilder&&) noexcept;
  ProgramBuilder& operator=(ProgramBuilder&&) noexcept;

  int input(ValueType type);
  // A value known at trace time (a jaxpr constvar): the program holds it.
  int constant(Array value);
  // Appends `outs = op[params](ins)`; `source` ("train.py:42") is named by this equation's errors, at build
  // time and when it runs.
  std::vector<int> emit(const std::string& op, const std::vector<int>& inputs, ProgramParams params = {},
                        std::string source = {});
  const ValueType& type(int value) const;
  void set_outputs(std::vector<int> outputs);
  std::size_t num_equations() const;
  // The program so far: verified, with dead code removed and liveness computed.
  Program build() const;
  // Appends `program`'s equations, its inputs bound to `inputs` (values of this builder); returns the values
  // of its outputs (how a traced grad or jit inlines into the trace around it).
  std::vector<int> inline_program(const Program& program, const std::vector<int>& inputs);

 private:
  std::unique_ptr<program::Builder> builder_;
};

// One function being traced into a program (what weft::jit, weft::make_program and pmap(jit(f)) use,
// weft/jit.hpp): its inputs are symbolic Arrays, and every op on them (operators, weft::ops, Array methods,
// a traced Replica's collectives) records an equation here; concrete Arrays they meet become constants.
class ProgramTrace {
 public:
  explicit ProgramTrace(Mesh mesh = Mesh(), std::string name = "jit");
  // A trace nested in `outer`, as a control-flow body is (weft/control_flow.hpp): the same mesh; symbolic
  // Arrays of `outer`, or of the traces `outer` is nested in, that the traced function meets become further
  // inputs of this one (captured() lists those values, in order), and while it is open a traced Replica's
  // collectives record here (the body's own equations).
  ProgramTrace(ProgramTrace& outer, std::string name);
  // Ends the trace: a symbolic Array of it kept past this point refuses every op, naming the trace.
  ~ProgramTrace();
  ProgramTrace(const ProgramTrace&) = delete;
  ProgramTrace& operator=(const ProgramTrace&) = delete;

  // A new program input: a symbolic Array of `type` (its varying axes: mesh axes it may differ along).
  Array input(ValueType type);
  // Records `outs = op[params](ins)` (for ops no Array function records: the collectives). `source` is the
  // user's line ("file.cc:42"), named by the equation's errors.
  std::vector<Array> record(const std::string& op, const std::vector<Array>& ins, ProgramParams params = {},
                            std::string source = {});
  // The full type of a symbolic Array of this trace (with its varying axes).
  const ValueType& type(const Array& value) const;
  // `value` as a symbolic Array of this trace: itself, a new constant for a concrete Array, or, in a nested
  // trace, the input standing for a value of a trace around it.
  Array value(const Array& value);
  // The values of the traces around a nested trace that it captured, in the order of its inputs after its own.
  const std::vector<Array>& captured() const;
  // Whether this trace is nested in `outer` (directly or through other nested traces).
  bool nested_in(const ProgramTrace& outer) const;
  const Mesh& mesh() const;
  const std::string& name() const;
  // The program with these outputs (a concrete output becomes a constant), built: verified, dead code
  // removed, liveness computed. Ends the trace.
  Program finish(const std::vector<Array>& outputs);

 private:
  std::shared_ptr<program::TraceState> state_;
};

namespace detail {
// The innermost ProgramTrace open on this thread (constructed, not yet destroyed), or null: where
// weft/control_flow.hpp records its equations.
ProgramTrace* current_program_trace();
// Where a traced Replica of `trace` records a collective: the innermost trace open on this thread when it is
// nested in `trace` (a control-flow body being traced), else `trace`.
ProgramTrace* recording_trace(ProgramTrace* trace);
// Appends `program` to the trace its symbolic `inputs` belong to (concrete ones become constants) and returns
// its outputs as symbolic Arrays of that trace: how a transform called inside jit or pmap(jit) inlines.
std::vector<Array> inline_into_trace(const Program& program, std::span<const Array> inputs);
// A new checkpoint region number, unique in the process (Python's weft.checkpoint draws from it too, so a
// program inlined into another's trace never shares a region with it).
std::int64_t new_checkpoint_region();
// custom_vjp (docs/autodiff.md; src/program/custom_calls.hpp): registers `bwd`, the program from a call's
// residuals and its outputs' cotangents to one cotangent per primal input, for the process; returns the
// number a custom_vjp_call equation names it by (its `rule`). `name` is the user's function's, for messages.
std::int64_t register_custom_vjp(const Program& bwd, std::string name);
// custom_jvp (docs/autodiff.md): registers `jvp`, the program from a call's primals then one tangent per primal
// (each its primal's type) to its primal outputs then one tangent per output; returns the number a
// custom_jvp_call equation names it by.
std::int64_t register_custom_jvp(const Program& jvp, std::string name);

// While one lives, the equations traces record on this thread carry checkpoint=<a new region>; the one
// around it, if any, applies again when it ends.
class CheckpointScope {
 public:
  CheckpointScope();
  ~CheckpointScope();
  CheckpointScope(const CheckpointScope&) = delete;
  CheckpointScope& operator=(const CheckpointScope&) = delete;

 private:
  std::optional<std::int64_t> outer_;
};

}  // namespace detail

// Reverse mode (JAX's vjp on a jaxpr): the program computing `program`'s outputs and the cotangents of its
// inputs at positions `wrt`. Its inputs are `program`'s, then one cotangent per output (the output's type);
// its outputs are `program`'s, then one cotangent per `wrt` input. Collectives transpose by JAX's pmap rules
// (docs/autodiff.md); an op without a rule (pmax, pmin) is an InvalidArgument naming it.
Program vjp_program(const Program& program, const std::vector<int>& wrt);

// What the backward pass of vjp_program(program, wrt) keeps from the forward pass (JAX's residuals; what
// jax.ad_checkpoint.print_saved_residuals lists), in the order first read: each value's type, and either the
// primal input it is (`input` >= 0) or the op and source line that computed it. A checkpoint region's
// recomputed values are not kept; its inputs are.
struct SavedResidual {
  ValueType type;
  int input = -1;
  std::string op, source;
};
std::vector<SavedResidual> saved_residuals(const Program& program, const std::vector<int>& wrt);

// Forward mode (JAX's jvp on a jaxpr): the program computing `program`'s outputs and their tangents. Its
// inputs are `program`'s, then one tangent per input (the input's type; an integer or bool input's tangent is
// read as zero); its outputs are `program`'s, then one tangent per output. Every primitive's JVP rule lives
// beside its type rule (src/program/ops/); one without a rule where a tangent reaches it is an InvalidArgument.
Program jvp_program(const Program& program);

// Batching (JAX's vmap on a jaxpr): the program computing `program` for `size` examples at once. Input k
// carries a leading batch axis of `size` where `batched[k]`, and is shared by every example otherwise.
// `axis_name` (may be empty) names vmap's axis: a mesh axis of `program` of that size, whose collectives act
// along the batch axis; the batched program's mesh no longer has it. `out_batched[k]` says whether output k
// carries the batch axis (in front); an output no example changes does not.
struct BatchedProgram {
  Program program;
  std::vector<bool> out_batched;
};
BatchedProgram batch_program(const Program& program, const std::vector<bool>& batched, std::int64_t size,
                             const std::string& axis_name = {});

// Partial evaluation (JAX's pe.partial_eval_jaxpr_nounits): `program` split by data dependence, given which
// inputs are unknown (`unknowns`, one per input). `known` takes the known inputs and gives the known outputs,
// then `num_residuals` residuals; `unknown` takes those residuals, then the unknown inputs, and gives the
// unknown outputs. Output k is unknown when it depends on an unknown input or `instantiate[k]` (empty: none).
// An equation is known when all its inputs are, collectives included; session effects keep their order (after
// an unknown effect every effect is unknown). linearize splits jvp_program this way.
struct PartialEval {
  Program known;
  Program unknown;
  std::vector<bool> out_unknowns;
  std::size_t num_residuals = 0;
};
PartialEval partial_eval(const Program& program, const std::vector<bool>& unknowns,
                         const std::vector<bool>& instantiate = {});

// Runs `program` on this thread, outside any pmap (its collectives have no replicas to meet: the builder
// refuses them, as the mesh is empty). Inputs must have the input types' dtypes and shapes.
std::vector<Array> run_program(const Program& program, std::span<const Array> inputs);
// The same, consuming `inputs` (see the consuming form below).
std::vector<Array> run_program(const Program& program, std::vector<Array>&& inputs);
// Runs `program` as `replica` (inside pmap or a session): collectives go through the replica; session effects
// find their variables, buffers and streams in `handles` (by name; null outside a session's run).
std::vector<Array> run_program(const Program& program, Replica& replica, std::span<const Array> inputs,
                               const ProgramHandles* handles = nullptr);
// The same, consuming `inputs` (JAX's donated buffers): an input buffer nothing else holds may be reused for
// a result once the input's last use has read it (an optimizer's update in place). An input the caller still
// holds elsewhere is never written.
std::vector<Array> run_program(const Program& program, Replica& replica, std::vector<Array>&& inputs,
                               const ProgramHandles* handles = nullptr);

}  // namespace weft
