// What a primitive's transformation rules write with. A VJP, JVP or batching rule (ops/*.cc, beside the
// primitive's type rule) emits registry ops into the program being made through an Emitter, and reads its
// operands from a context the machinery (autodiff.cc, jvp.cc, batching.cc) fills in. The contexts are plain
// data, so a rule is a function of its context and nothing else: the machinery keeps only the machinery.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "builder.hpp"
#include "op_registry.hpp"
#include "program.hpp"

namespace weft::program {

// The builder of the program being made, the source line of the equation being transformed (its errors name
// it), and the small algebra every family's rules share.
class Emitter {
 public:
  explicit Emitter(Builder& builder) : b_(builder) {}
  void set_source(std::string source) { source_ = std::move(source); }

  // By primitive only (Prim::multiply), never by name: a misspelt op is a compile error, not a RuleError when
  // the rule first runs. Names enter programs only from outside (the trace, Python, the public builder).
  ValueId emit(Prim op, const std::vector<ValueId>& ins, Params params = {});
  std::vector<ValueId> emit_many(Prim op, const std::vector<ValueId>& ins, Params params = {});
  ValueId constant(Array value) { return b_.constant(std::move(value)); }
  ValueId scalar(double v, DType dtype);
  // Zeros of `type`'s dtype and shape.
  ValueId zeros(const ValueType& type);
  // A copy: the builder's types move as it grows, so a reference would dangle after the next emit.
  ValueType type(ValueId id) const { return b_.type(id); }
  const Mesh& mesh() const { return b_.mesh(); }
  CollectiveRules rules() const { return b_.rules(); }
  Builder& builder() { return b_; }

  ValueId reshape(ValueId v, std::vector<std::int64_t> shape);
  ValueId astype(ValueId v, DType dtype);  // v itself when it has the dtype
  ValueId broadcast_to(ValueId v, std::vector<std::int64_t> shape);
  ValueId transpose(ValueId v, std::vector<std::int64_t> perm);
  // `g` (of a broadcast result's shape) summed back to `shape`: over the leading axes the operand lacks and
  // the axes where it has size 1 (numpy broadcasting's transpose).
  ValueId unbroadcast(ValueId g, const std::vector<std::int64_t>& shape);
  // A reduced value (the result of reducing `in_shape` over `reduced`, keepdims or not) broadcast back.
  ValueId unreduce(ValueId g, const std::vector<std::int64_t>& in_shape, const std::vector<bool>& reduced);
  ValueId swap_last_two(ValueId v);
  // v with axis d reversed (a step -1 slice).
  ValueId reverse_axis(ValueId v, std::size_t d);
  // v's m elements along axis d moved to positions 0, s, 2s, ... with zeros between them, cut to `room`.
  ValueId spread_axis(ValueId v, std::size_t d, std::int64_t s, std::int64_t room);
  // v with `before` zeros ahead of it and `after` behind it along axis d.
  ValueId pad_axis(ValueId v, std::size_t d, std::int64_t before, std::int64_t after);
  // v with axis `from` moved to position `to` (numpy's moveaxis).
  ValueId moveaxis(ValueId v, std::int64_t from, std::int64_t to);

 private:
  Builder& b_;
  std::string source_;
};

// Which axes of `in` a reduction's `axes` parameter names (all of them when it names none).
std::vector<bool> reduced_axes(const ValueType& in, const Params& params);
// A possibly negative axis of a rank-`rank` value made non-negative; RuleError "axis 3 is out of range for
// rank 2" (the type rules of every family that takes an axis).
std::int64_t normalize_axis(std::int64_t axis, std::size_t rank);
// An `axis` parameter made non-negative for an operand of `rank` (`fallback` when absent).
std::int64_t axis_param(const Params& params, std::size_t rank, std::int64_t fallback = -1);
// [0, 1, ..., n - 1]
std::vector<std::int64_t> iota_axes(std::size_t n);
// `g` typed as varying over `axes` too (a pvary of the axes it lacks; itself when it has them all): a
// collective's shard_map rule, and a zero tangent or cotangent typed as its varying primal.
ValueId pvary_to(Emitter& e, ValueId g, const std::vector<std::string>& axes);
// The sentinel for "no value": a symbolic zero tangent, a cotangent not given.
inline constexpr ValueId kNoValue = -1;

// ---- the contexts ------------------------------------------------------------------------------------------

// A VJP (transpose) rule's view of one forward equation. `ins` / `outs` are the forward values in the program
// being made; `cts` the outputs' cotangents (zeros where nothing flowed). The rule calls give(k, ct) for each
// input it differentiates: the machinery sums a broadcast cotangent back to the input's shape, casts it to
// the input's dtype and adds it to what the input already has. Inputs of integer or bool type take nothing.
struct VjpContext {
  Emitter& e;
  const OpInfo& op;
  const Params& params;
  std::vector<ValueType> in_types, out_types;
  std::vector<ValueId> ins, outs, cts;
  std::vector<ValueId> given;  // per input, kNoValue until give()
  // What the primitive's forward rule (OpInfo::vjp_forward) left for this rule when the forward pass was
  // emitted (a scan's stacked per-iteration values); empty for a primitive without one.
  std::vector<ValueId> residuals;

  Prim prim() const { return op.id; }
  ValueId in(std::size_t k) const { return ins[k]; }
  ValueId out(std::size_t k = 0) const { return outs[k]; }
  ValueId ct(std::size_t k = 0) const { return cts[k]; }
  DType dtype() const { return out_types.at(0).dtype; }
  void give(std::size_t k, ValueId cotangent);
};

// A VJP's forward pass emits an equation through its primitive's forward rule (OpInfo::vjp_forward), where it
// has one, instead of as it is: for a primitive whose VJP rule needs values computed inside it (a loop's
// per-iteration values, which the equation itself does not return). The rule emits the primitive (or what
// computes the same) on `ins` and returns its outputs, which stand for the equation's from then on, and the
// residuals, which its VJP rule reads as VjpContext::residuals. Emitted again, with new residuals, where a
// checkpoint region holding the equation is recomputed.
struct VjpForwardContext {
  Emitter& e;
  const OpInfo& op;
  const Params& params;
  std::vector<ValueType> in_types;
  std::vector<ValueId> ins;
};
struct WithResiduals {
  std::vector<ValueId> outs, residuals;
};

// A JVP rule's view of one equation. The machinery has emitted the primal equation already (`outs`); the
// rule returns one tangent per output (kNoValue for a zero one). A rule that computes the primal results
// together with the tangents (a loop carrying both, so the primal loop need not run twice) replaces `outs`
// with them: the equation's outputs map to those from then on, and the first emission is dead code. `tangents[k]` is kNoValue where input k's
// tangent is symbolically zero (an integer input, a constant, a value nothing differentiable reaches); the
// rule is called only when some input has one.
struct JvpContext {
  Emitter& e;
  const OpInfo& op;
  const Params& params;
  std::vector<ValueType> in_types, out_types;
  std::vector<ValueId> ins, outs, tangents;

  Prim prim() const { return op.id; }
  ValueId in(std::size_t k) const { return ins[k]; }
  ValueId out(std::size_t k = 0) const { return outs[k]; }
  bool has_tangent(std::size_t k) const { return tangents[k] != kNoValue; }
  // Input k's tangent, zeros of its type (dtype, shape) where it is symbolically zero.
  ValueId tangent(std::size_t k);
  DType dtype() const { return out_types.at(0).dtype; }
};

// A batching rule's view of one equation under vmap. Every batched value carries the batch axis first (the
// machinery moves in_axes there and out_axes away); `batched[k]` says whether input k has it. `in_types` /
// `out_types` are the per-example types (the unbatched program's). The rule returns the results and which
// carry the batch axis. `axis_name` is vmap's (empty for none): collectives over it act along the batch axis.
struct BatchContext {
  Emitter& e;
  const OpInfo& op;
  const Params& params;
  std::vector<ValueType> in_types, out_types;
  std::vector<ValueId> ins;
  std::vector<bool> batched;
  std::int64_t size = 0;
  std::string axis_name;

  Prim prim() const { return op.id; }
  ValueId in(std::size_t k) const { return ins[k]; }
  bool any_batched() const;
  // Input k with the batch axis in front (broadcast along it when it has none).
  ValueId materialized(std::size_t k);
  // Input k reshaped so that numpy broadcasting against the batched results of rank 1 + `rank` lines its
  // batch axis up with theirs: [B, 1, ..., 1, *shape] (unbatched inputs are returned as they are).
  ValueId aligned(std::size_t k, std::size_t rank);
};
struct Batched {
  std::vector<ValueId> outs;
  std::vector<bool> batched;
};

// ---- rules many primitives share -----------------------------------------------------------------------------

// JVP of an op linear in all its inputs (add, reshape, psum, ...): the op itself on the tangents (zeros where
// an input has none).
std::vector<ValueId> linear_jvp(JvpContext& c);
// JVP of an op whose result does not depend differentiably on its inputs (stop_gradient, sign, comparisons).
std::vector<ValueId> zero_jvp(JvpContext& c);
// Batching of an elementwise op (numpy broadcasting): batched operands lined up with `aligned`, the op as is.
Batched elementwise_batch(BatchContext& c);
// Batching of a one-input op with an `axes` / `axis` parameter counted from the front: the parameter shifted
// by one (negative ones made non-negative first). An op whose absent parameter means "every axis" (sum)
// spells its axes out before calling it.
Batched shifted_axes_batch(BatchContext& c);

}  // namespace weft::program
