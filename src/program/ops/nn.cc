// The neural-network ops: softmax, log_softmax (along `axis`), layer_norm and its fused VJP layer_norm_vjp.
// Each primitive's type rule, VJP, JVP and batching rule side by side, by JAX's rules (jax/_src/nn/
// functions.py: softmax's and log_softmax's derivatives from their outputs).
#include "array/layer_norm.hpp"
#include "program/autodiff.hpp"
#include "program/op_registry.hpp"
#include "program/rule_kit.hpp"
#include "program/transforms.hpp"
#include "weft/ops.hpp"

namespace weft::program {
namespace {

// ---- softmax, log_softmax: x's shape, a float dtype (integers give float32).
std::vector<ValueType> along_axis(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  if (has_param(params, "axis")) normalize_axis(param<std::int64_t>(params, "axis"), ins[0].shape.size());
  ValueType out = ins[0];
  if (!is_floating(out.dtype)) out.dtype = DType::f32;
  return {out};
}

// Sums along the op's axis, kept (so they broadcast against x).
Params kept_axis(const Params& params, std::size_t rank) {
  return {{"axes", ints_param({axis_param(params, rank)})}, {"keepdims", bool_param(true)}};
}

// softmax: d out = out * (t - sum(t * out)); the VJP is the same form in the cotangent (the Jacobian is
// symmetric).
ValueId softmax_rule(Emitter& e, ValueId v, ValueId out, const Params& params, std::size_t rank) {
  const ValueId dot = e.emit(Prim::sum, {e.emit(Prim::multiply, {v, out})}, kept_axis(params, rank));
  return e.emit(Prim::multiply, {out, e.emit(Prim::subtract, {v, dot})});
}

void softmax_vjp(VjpContext& c) { c.give(0, softmax_rule(c.e, c.ct(), c.out(), c.params, c.in_types[0].shape.size())); }

std::vector<ValueId> softmax_jvp(JvpContext& c) {
  return {softmax_rule(c.e, c.tangent(0), c.out(), c.params, c.in_types[0].shape.size())};
}

// log_softmax: d out = t - sum(exp(out) * t) (softmax = exp(out)); the VJP g - exp(out) * sum(g).
void log_softmax_vjp(VjpContext& c) {
  const Params axis = kept_axis(c.params, c.in_types[0].shape.size());
  c.give(0, c.e.emit(Prim::subtract, {c.ct(), c.e.emit(Prim::multiply, {c.e.emit(Prim::exp, {c.out()}),
                                                                        c.e.emit(Prim::sum, {c.ct()}, axis)})}));
}

std::vector<ValueId> log_softmax_jvp(JvpContext& c) {
  const Params axis = kept_axis(c.params, c.in_types[0].shape.size());
  const ValueId t = c.tangent(0);
  return {c.e.emit(Prim::subtract,
                   {t, c.e.emit(Prim::sum, {c.e.emit(Prim::multiply, {c.e.emit(Prim::exp, {c.out()}), t})}, axis)})};
}

// ---- layer_norm(x, scale, bias, eps): x (..., d) of a float dtype, scale and bias (d), eps a scalar; the
// result has x's type, varying over every operand's axes. layer_norm_vjp(x, scale, dy, eps) gives the
// cotangents (dx like x; dscale and dbias like scale).
void check_layer_norm(const std::vector<ValueType>& ins, const char* second_vector) {
  const ValueType& x = ins[0];
  if (x.shape.empty()) throw RuleError("x must have at least one dimension");
  if (!is_floating(x.dtype)) throw RuleError("x must be of a float dtype");
  const std::int64_t d = x.shape.back();
  if (ins[1].shape != std::vector<std::int64_t>{d}) {
    throw RuleError("scale must have shape [" + std::to_string(d) + "], the last dimension of x");
  }
  if (std::string(second_vector) == "bias" && ins[2].shape != std::vector<std::int64_t>{d}) {
    throw RuleError("bias must have shape [" + std::to_string(d) + "], the last dimension of x");
  }
  if (!ins[3].shape.empty()) throw RuleError("eps must be a scalar");
}

std::vector<ValueType> layer_norm(const std::vector<ValueType>& ins, const Params&, const Mesh&) {
  check_layer_norm(ins, "bias");
  return {ValueType{ins[0].dtype, ins[0].shape, union_varying(ins)}};
}

std::vector<ValueType> layer_norm_vjp_type(const std::vector<ValueType>& ins, const Params&, const Mesh&) {
  check_layer_norm(ins, "dy");
  if (ins[2].shape != ins[0].shape) throw RuleError("dy must have x's shape");
  const std::vector<std::string> varying = union_varying(ins);
  const ValueType vec{ins[0].dtype, ins[1].shape, varying};
  return {ValueType{ins[0].dtype, ins[0].shape, varying}, vec, vec};
}

// One fused equation for the three cotangents (it recomputes the rows' statistics from x). eps is read as a
// constant (it gets no cotangent, and the JVP no tangent from it).
void layer_norm_vjp(VjpContext& c) {
  const std::vector<ValueId> grads = c.e.emit_many(Prim::layer_norm_vjp, {c.in(0), c.in(1), c.ct(), c.in(3)});
  for (std::size_t k = 0; k < 3; ++k) c.give(k, grads[k]);
}

// y = xhat * scale + bias with xhat = (x - mean) * r, r = 1 / sqrt(var + eps) over the last axis, so
// d xhat = r * (tx - mean(tx) - xhat * mean(xhat * tx)) (d mean = mean(tx), d var = 2 mean((x - mean) tx))
// and dy = d xhat * scale + xhat * tscale + tbias: the transpose of layer_norm_vjp's formulas.
std::vector<ValueId> layer_norm_jvp(JvpContext& c) {
  Emitter& e = c.e;
  const DType dt = c.dtype();
  const Params row{{"axes", ints_param({static_cast<std::int64_t>(c.in_types[0].shape.size()) - 1})},
                   {"keepdims", bool_param(true)}};
  const ValueId x = c.in(0);
  const ValueId centred = e.emit(Prim::subtract, {x, e.emit(Prim::mean, {x}, row)});
  const ValueId var = e.emit(Prim::mean, {e.emit(Prim::multiply, {centred, centred})}, row);
  const ValueId r = e.emit(Prim::rsqrt, {e.emit(Prim::add, {var, e.astype(c.in(3), dt)})});
  const ValueId xhat = e.emit(Prim::multiply, {centred, r});
  std::vector<ValueId> terms;
  if (c.has_tangent(0)) {
    const ValueId t = c.tangents[0];
    const ValueId m1 = e.emit(Prim::mean, {t}, row);
    const ValueId m2 = e.emit(Prim::mean, {e.emit(Prim::multiply, {xhat, t})}, row);
    const ValueId dxhat =
        e.emit(Prim::multiply,
               {r, e.emit(Prim::subtract, {e.emit(Prim::subtract, {t, m1}), e.emit(Prim::multiply, {xhat, m2})})});
    terms.push_back(e.emit(Prim::multiply, {dxhat, c.in(1)}));
  }
  if (c.has_tangent(1)) terms.push_back(e.emit(Prim::multiply, {xhat, c.tangents[1]}));
  if (c.has_tangent(2)) terms.push_back(c.tangents[2]);
  if (terms.empty()) return {kNoValue};  // a tangent of eps only
  ValueId sum = terms[0];
  for (std::size_t k = 1; k < terms.size(); ++k) sum = e.emit(Prim::add, {sum, terms[k]});
  return {sum};
}

// The op once per example, on its slices of the batched operands, results stacked: for operands the fused
// kernels take per row only (a per-example scale, or the VJP's dscale / dbias, sums over one example's rows).
// Bit for bit what each example's own run gives.
Batched per_example_batch(BatchContext& c) {
  Emitter& e = c.e;
  std::vector<std::vector<ValueId>> parts(c.out_types.size());
  for (std::int64_t i = 0; i < c.size; ++i) {
    std::vector<ValueId> ins;
    for (std::size_t k = 0; k < c.ins.size(); ++k) {
      if (!c.batched[k]) {
        ins.push_back(c.in(k));
        continue;
      }
      std::vector<std::int64_t> shape = e.type(c.in(k)).shape, start(shape.size(), 0), step(shape.size(), 1);
      start[0] = i;
      shape[0] = i + 1;
      const ValueId one =
          e.emit(Prim::slice, {c.in(k)},
                 {{"start", ints_param(start)}, {"limit", ints_param(shape)}, {"step", ints_param(step)}});
      ins.push_back(e.reshape(one, c.in_types[k].shape));
    }
    const std::vector<ValueId> outs = e.emit_many(c.prim(), ins, c.params);
    for (std::size_t j = 0; j < outs.size(); ++j) {
      std::vector<std::int64_t> shape = c.out_types[j].shape;
      shape.insert(shape.begin(), 1);
      parts[j].push_back(e.reshape(outs[j], shape));
    }
  }
  Batched result;
  for (std::size_t j = 0; j < parts.size(); ++j) {
    ValueType type = c.out_types[j];
    type.shape.insert(type.shape.begin(), c.size);
    type.varying = {};
    result.outs.push_back(parts[j].empty() ? e.zeros(type)
                                           : e.emit(Prim::concatenate, parts[j], {{"axis", int_param(0)}}));
    result.batched.push_back(true);
  }
  return result;
}

// The dtype the kernels compute in (src/array/layer_norm.cc): float64 for float64 x, float32 otherwise.
DType compute_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// Rows of every example at once (the kernel normalises row by row). A batched scale or bias (per-example
// affine parameters): the rows normalised by the unbatched kernel with scale 1 and bias 0, which gives xhat
// exactly (the kernel computes ((x - mean) * rstd) * scale + bias, in its compute dtype), then each example's
// scale and bias applied by broadcasting in that dtype: the roundings of each example's own kernel run, so bit
// for bit, in one program. A batched eps (a per-example epsilon, which the kernel takes as one number) runs
// once per example.
Batched layer_norm_batch(BatchContext& c) {
  if (c.batched[3]) return per_example_batch(c);
  Emitter& e = c.e;
  if (!c.batched[1] && !c.batched[2]) return {e.emit_many(Prim::layer_norm, c.ins, c.params), {true}};
  const ValueType& x = c.in_types[0];
  const DType dt = compute_dtype(x.dtype);
  const std::size_t rank = x.shape.size();
  const ValueType vec{dt, {x.shape.back()}, {}};
  const ValueId one = e.broadcast_to(e.scalar(1, dt), vec.shape);
  const ValueId xhat = e.emit(Prim::layer_norm, {e.astype(c.in(0), dt), one, e.zeros(vec), c.in(3)}, c.params);
  const ValueId scaled = e.emit(Prim::multiply, {xhat, e.astype(c.aligned(1, rank), dt)});
  const ValueId y = e.emit(Prim::add, {scaled, e.astype(c.aligned(2, rank), dt)});
  return {{e.astype(y, x.dtype)}, {true}};
}

// layer_norm_vjp's formulas (the kernel's, src/array/layer_norm.cc) as a program of registry ops, in the
// kernel's compute dtype: (x, scale, dy, eps) -> (dx, dscale, dbias). Its derivatives are the fused op's.
Program composed_layer_norm_vjp(const std::vector<ValueType>& ins, const Mesh& mesh, CollectiveRules rules) {
  Builder b(mesh, rules);
  Emitter e(b);
  std::vector<ValueId> in;
  for (const ValueType& t : ins) in.push_back(b.input(t));
  const DType dt = compute_dtype(ins[0].dtype);
  const std::size_t rank = ins[0].shape.size();
  const Params row{{"axes", ints_param({static_cast<std::int64_t>(rank) - 1})}, {"keepdims", bool_param(true)}};
  const auto mul = [&](ValueId a, ValueId v) { return e.emit(Prim::multiply, {a, v}); };
  const auto sub = [&](ValueId a, ValueId v) { return e.emit(Prim::subtract, {a, v}); };
  const ValueId x = e.astype(in[0], dt), scale = e.astype(in[1], dt), dy = e.astype(in[2], dt);
  const ValueId centred = sub(x, e.emit(Prim::mean, {x}, row));
  const ValueId r =
      e.emit(Prim::rsqrt, {e.emit(Prim::add, {e.emit(Prim::mean, {mul(centred, centred)}, row), e.astype(in[3], dt)})});
  const ValueId xhat = mul(centred, r);
  const ValueId dxhat = mul(dy, scale);
  const ValueId m1 = e.emit(Prim::mean, {dxhat}, row), m2 = e.emit(Prim::mean, {mul(dxhat, xhat)}, row);
  const ValueId dx = mul(r, sub(sub(dxhat, m1), mul(xhat, m2)));
  const Params rows{{"axes", ints_param(iota_axes(rank - 1))}};  // every axis but the last
  const ValueId dscale = rank == 1 ? mul(dy, xhat) : e.emit(Prim::sum, {mul(dy, xhat)}, rows);
  const ValueId dbias = rank == 1 ? dy : e.emit(Prim::sum, {dy}, rows);
  b.set_outputs({e.astype(dx, ins[0].dtype), e.astype(dscale, ins[0].dtype), e.astype(dbias, ins[0].dtype)});
  return b.build();
}

// layer_norm_vjp's JVP and VJP (second derivatives of layer_norm): those of its composed form, inlined. eps is
// read as a constant, as layer_norm's rules read it (no tangent, no cotangent).
std::vector<ValueId> layer_norm_vjp_jvp(JvpContext& c) {
  const Program forward = jvp_program(composed_layer_norm_vjp(c.in_types, c.e.mesh(), c.e.rules()));
  std::vector<ValueId> ins = c.ins;
  for (std::size_t k = 0; k < 3; ++k) ins.push_back(c.tangent(k));
  ins.push_back(c.e.zeros(c.in_types[3]));
  const std::vector<ValueId> outs = inline_program(c.e.builder(), forward, ins);
  return {outs.begin() + 3, outs.end()};
}

void layer_norm_vjp_vjp(VjpContext& c) {
  const Program reverse = vjp_program(composed_layer_norm_vjp(c.in_types, c.e.mesh(), c.e.rules()), {0, 1, 2});
  std::vector<ValueId> ins = c.ins;
  ins.insert(ins.end(), c.cts.begin(), c.cts.end());
  const std::vector<ValueId> outs = inline_program(c.e.builder(), reverse, ins);
  for (std::size_t k = 0; k < 3; ++k) c.give(k, outs[3 + k]);
}

// ---- kernels ----------------------------------------------------------------------------------------------

using Ins = std::vector<Array>;
using Outs = std::vector<Array>;

template <Array (*f)(const Array&, int)>
Outs along_axis_kernel(const Ins& in, const Params& p) {
  return {f(in[0], param_axis_if(p).value_or(-1))};
}
Outs layer_norm_kernel(const Ins& in, const Params&) {
  return {detail::layer_norm(in[0], in[1], in[2], in[3].to_doubles().at(0))};
}
Outs layer_norm_vjp_kernel(const Ins& in, const Params&) {
  detail::LayerNormGrads g = detail::layer_norm_vjp(in[0], in[1], in[2], in[3].to_doubles().at(0));
  return {std::move(g.dx), std::move(g.dscale), std::move(g.dbias)};
}

}  // namespace

void register_nn_ops(std::vector<OpInfo>& ops) {
  using K = ParamKind;
  ops.push_back({.id = Prim::softmax, .min_inputs = 1, .max_inputs = 1, .params = {{"axis", K::integer, kOptional}},
                 .infer = along_axis, .kernel = along_axis_kernel<weft::softmax>, .vjp = softmax_vjp,
                 .jvp = softmax_jvp, .batch = shifted_axes_batch});
  ops.push_back({.id = Prim::log_softmax, .min_inputs = 1, .max_inputs = 1,
                 .params = {{"axis", K::integer, kOptional}}, .infer = along_axis,
                 .kernel = along_axis_kernel<weft::log_softmax>, .vjp = log_softmax_vjp, .jvp = log_softmax_jvp,
                 .batch = shifted_axes_batch});
  ops.push_back({.id = Prim::layer_norm, .min_inputs = 4, .max_inputs = 4, .infer = layer_norm,
                 .kernel = layer_norm_kernel, .vjp = layer_norm_vjp, .jvp = layer_norm_jvp,
                 .batch = layer_norm_batch});
  ops.push_back({.id = Prim::layer_norm_vjp, .min_inputs = 4, .max_inputs = 4, .infer = layer_norm_vjp_type,
                 .kernel = layer_norm_vjp_kernel, .vjp = layer_norm_vjp_vjp, .jvp = layer_norm_vjp_jvp,
                 .batch = per_example_batch});
}

}  // namespace weft::program
