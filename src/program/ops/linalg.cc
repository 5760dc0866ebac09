// matmul (numpy's, with weft::MatmulOptions' transpose_a / transpose_b): its type rule, VJP, JVP and
// batching rule side by side, by JAX's rules for dot_general (jax/_src/lax/lax.py): bilinear, so the JVP is
// ta @ b + a @ tb, and the VJP contracts the cotangent with the other operand.
#include <algorithm>

#include "program/op_registry.hpp"
#include "program/rule_kit.hpp"
#include "weft/ops.hpp"

namespace weft::program {
namespace {


// numpy matmul: 1-D operands gain and lose a unit dimension; leading (batch) dimensions broadcast. The
// optional transpose_a / transpose_b swap an operand's last two axes first.
std::vector<ValueType> matmul(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  std::vector<std::int64_t> a = ins[0].shape;
  std::vector<std::int64_t> b = ins[1].shape;
  if (a.empty() || b.empty()) throw RuleError("matmul needs operands of rank 1 or more");
  for (auto [name, shape] : {std::pair{"transpose_a", &a}, std::pair{"transpose_b", &b}}) {
    if (!has_param(params, name) || !param<bool>(params, name)) continue;
    if (shape->size() < 2) throw RuleError(std::string(name) + " needs an operand of rank 2 or more");
    std::swap((*shape)[shape->size() - 1], (*shape)[shape->size() - 2]);
  }
  const bool a_vector = a.size() == 1;
  const bool b_vector = b.size() == 1;
  if (a_vector) a.insert(a.begin(), 1);
  if (b_vector) b.push_back(1);
  if (a.back() != b[b.size() - 2]) {
    throw RuleError("contracting dimensions differ: " + type_text(ins[0]) + " @ " + type_text(ins[1]));
  }
  ValueType batch_a{DType::f32, {a.begin(), a.end() - 2}, {}};
  ValueType batch_b{DType::f32, {b.begin(), b.end() - 2}, {}};
  std::vector<std::int64_t> shape;
  if (batch_a.shape.empty()) {
    shape = batch_b.shape;
  } else if (batch_b.shape.empty()) {
    shape = batch_a.shape;
  } else {
    shape = broadcast_shapes({batch_a, batch_b});
  }
  if (!a_vector) shape.push_back(a[a.size() - 2]);
  if (!b_vector) shape.push_back(b.back());
  return {ValueType{promote_types(ins[0].dtype, ins[1].dtype), shape, union_varying(ins)}};
}

// a (..., m, k) @ b (..., k, n); a 1-D operand is a row / column vector; with transpose_a / transpose_b the
// operand enters with its last two axes swapped (so its cotangent leaves so). ga = g @ b^T and gb = a^T @ g,
// the transposes folded into the products; broadcast batch axes are summed back by the machinery.
void matmul_vjp(VjpContext& c) {
  Emitter& e = c.e;
  ValueId a = c.in(0), b = c.in(1), g = c.ct();
  const bool ta = param_flag(c.params, "transpose_a"), tb = param_flag(c.params, "transpose_b");
  if (ta) a = e.swap_last_two(a);
  if (tb) b = e.swap_last_two(b);
  const std::vector<std::int64_t> as = e.type(a).shape, bs = e.type(b).shape, gs = e.type(g).shape;
  const bool a_vector = as.size() == 1, b_vector = bs.size() == 1;
  if (a_vector) a = e.reshape(a, {1, as[0]});
  if (b_vector) b = e.reshape(b, {bs[0], 1});
  std::vector<std::int64_t> g2 = gs;
  if (a_vector) g2.insert(g2.end() - (b_vector ? 0 : 1), 1);
  if (b_vector) g2.push_back(1);
  g = e.reshape(g, g2);
  ValueId ga = e.emit(Prim::matmul, {g, b}, {{"transpose_b", bool_param(true)}});
  ValueId gb = e.emit(Prim::matmul, {a, g}, {{"transpose_a", bool_param(true)}});
  // A vector operand's cotangent: summed over the batch axes, its unit axis dropped.
  if (a_vector) {
    ga = e.reshape(e.emit(Prim::sum, {ga}, {{"axes", ints_param(iota_axes(e.type(ga).shape.size() - 1))}}), as);
  }
  if (b_vector) {
    gb = e.reshape(e.emit(Prim::sum, {gb}, {{"axes", ints_param(iota_axes(e.type(gb).shape.size() - 2))}}), bs);
  }
  if (ta) ga = e.swap_last_two(ga);
  if (tb) gb = e.swap_last_two(gb);
  c.give(0, ga);
  c.give(1, gb);
}

std::vector<ValueId> matmul_jvp(JvpContext& c) {
  std::vector<ValueId> terms;
  if (c.has_tangent(0)) terms.push_back(c.e.emit(Prim::matmul, {c.tangents[0], c.in(1)}, c.params));
  if (c.has_tangent(1)) terms.push_back(c.e.emit(Prim::matmul, {c.in(0), c.tangents[1]}, c.params));
  return {terms.size() == 1 ? terms[0] : c.e.emit(Prim::add, terms)};
}

// Under vmap one matmul equation, never a copy of an unbatched operand per example: numpy matmul already
// broadcasts batch axes (the kernel loops over them reading the shared operand in place), so the batched
// operands need only their batch axis lined up:
// - a 1-D operand that is batched, [B, k], becomes a matrix [B, 1, ..., 1, k] (a row) or [B, ..., k, 1] (a
//   column) whose unit axis the result loses again, unless the other operand is shared and of rank 2 or
//   less: then [B, k] @ w is the one product, rows for examples (and w @ [B, k]^T, its columns moved to the
//   front);
// - a batched operand with fewer batch axes than the other gets unit ones after the batch axis.
Batched matmul_batch(BatchContext& c) {
  Emitter& e = c.e;
  const std::size_t ra = c.in_types[0].shape.size(), rb = c.in_types[1].shape.size();
  const auto front = [&](ValueId v) { return std::vector<ValueId>{v}; };
  // A batched vector against a shared matrix: one product over the examples.
  if (c.batched[0] && !c.batched[1] && ra == 1 && rb <= 2) {
    return {front(e.emit(Prim::matmul, {c.in(0), c.in(1)}, c.params)), {true}};
  }
  if (c.batched[1] && !c.batched[0] && rb == 1 && ra >= 1) {
    // a @ v_e for every example e: a @ [B, k]^T, the examples' column last, moved to the front.
    Params q = c.params;
    q["transpose_b"] = bool_param(true);
    const ValueId out = e.emit(Prim::matmul, {c.in(0), c.in(1)}, q);
    return {front(ra == 1 ? out : e.moveaxis(out, -1, 0)), {true}};
  }
  // Batch axes (the examples' own, behind B) the operands have besides their last one or two.
  const std::size_t na = ra >= 2 ? ra - 2 : 0, nb = rb >= 2 ? rb - 2 : 0;
  const std::size_t batch = std::max(na, nb);
  std::vector<ValueId> ins;
  for (std::size_t k = 0; k < 2; ++k) {
    const ValueId v = c.in(k);
    if (!c.batched[k]) {
      ins.push_back(v);
      continue;
    }
    std::vector<std::int64_t> shape = e.type(v).shape;  // [B, own batch axes..., last one or two]
    const std::size_t own = k == 0 ? na : nb;
    const bool vector = (k == 0 ? ra : rb) == 1;
    if (vector) shape.insert(k == 0 ? shape.end() - 1 : shape.end(), 1);  // a row [1, k] or a column [k, 1]
    shape.insert(shape.begin() + 1, batch - own, 1);
    ins.push_back(e.reshape(v, shape));
  }
  ValueId out = e.emit(Prim::matmul, ins, c.params);
  std::vector<std::int64_t> shape = c.out_types[0].shape;
  shape.insert(shape.begin(), c.size);
  return {front(e.reshape(out, shape)), {true}};
}

std::vector<Array> matmul_kernel(const std::vector<Array>& in, const Params& p) {
  return {weft::matmul(in[0], in[1], {.transpose_a = param_flag(p, "transpose_a"), .transpose_b = param_flag(p, "transpose_b")})};
}

}  // namespace

void register_linalg_ops(std::vector<OpInfo>& ops) {
  using K = ParamKind;
  ops.push_back({.id = Prim::matmul, .min_inputs = 2, .max_inputs = 2,
                 .params = {{"transpose_a", K::boolean, kOptional}, {"transpose_b", K::boolean, kOptional}},
                 .infer = matmul, .kernel = matmul_kernel, .vjp = matmul_vjp, .jvp = matmul_jvp,
                 .batch = matmul_batch});
}

}  // namespace weft::program
