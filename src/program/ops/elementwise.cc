// The elementwise family: each primitive's type rule and its transformation rules, side by side (one table,
// family() below).
// - Types: numpy broadcasting of shapes (as weft::ops broadcasts) and JAX's dtype promotion
//   (weft::promote_types, JAX's lattice with int16 absent: uint8 with int8 gives int32).
// - Derivatives: JAX's lax.py rules (defjvp / defjvp2), each primitive given once as its partial derivatives,
//   from which its VJP and its JVP are both made (so the two agree at every point, singular ones included);
//   where, astype, stop_gradient and sign say theirs directly. Comparisons and bitwise ops have integer or
//   bool results: no derivative, no rule.
// - Batching (vmap): numpy broadcasting with the batch axis in front, for every one of them.
#include <algorithm>
#include <functional>

#include "array/gelu.hpp"
#include "array/integer_pow.hpp"
#include "program/op_registry.hpp"
#include "program/rule_kit.hpp"
#include "weft/ops.hpp"

namespace weft::program {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  ValueType t{DType::f32, shape, {}};
  std::string text = type_text(t);
  return text.substr(3);  // drop "f32"
}

DType promote_all(const std::vector<ValueType>& ins, std::size_t first) {
  DType dtype = ins[first].dtype;
  for (std::size_t i = first + 1; i < ins.size(); ++i) dtype = promote_types(dtype, ins[i].dtype);
  return dtype;
}

// Transcendental ops compute in floating point: integer and bool inputs give float32 (jnp.exp(int32) is f32).
std::vector<ValueType> float_unary(const std::vector<ValueType>& ins, const Params&, const Mesh&) {
  ValueType out = ins[0];
  if (!is_floating(out.dtype)) out.dtype = DType::f32;
  return {out};
}

std::vector<ValueType> same_unary(const std::vector<ValueType>& ins, const Params&, const Mesh&) { return {ins[0]}; }

// Negation and its relatives are for numbers: JAX's neg, sign and sub refuse bool (as numpy's `-` does).
// Bool mixed with a number is that number's type, so only an all-bool equation is refused.
std::vector<ValueType> numeric(const char* op, const char* hint, std::vector<ValueType> result) {
  if (result[0].dtype == DType::boolean) {
    throw RuleError(std::string(op) + " takes numbers, not bool operands (JAX's rule)" + hint);
  }
  return result;
}

std::vector<ValueType> arithmetic(const std::vector<ValueType>& ins, const Params&, const Mesh&) {
  return {ValueType{promote_all(ins, 0), broadcast_shapes(ins), union_varying(ins)}};
}

std::vector<ValueType> negation(const std::vector<ValueType>& ins, const Params& p, const Mesh& m) {
  return numeric("negative", "; for bools, bitwise_not (~)", same_unary(ins, p, m));
}
std::vector<ValueType> signum(const std::vector<ValueType>& ins, const Params& p, const Mesh& m) {
  return numeric("sign", "", same_unary(ins, p, m));
}
std::vector<ValueType> difference(const std::vector<ValueType>& ins, const Params& p, const Mesh& m) {
  return numeric("subtract", "; for bools, bitwise_xor (^)", arithmetic(ins, p, m));
}

// jnp.divide is true division: integer operands give float32.
std::vector<ValueType> true_divide(const std::vector<ValueType>& ins, const Params& p, const Mesh& m) {
  std::vector<ValueType> out = arithmetic(ins, p, m);
  if (!is_floating(out[0].dtype)) out[0].dtype = DType::f32;
  return out;
}

std::vector<ValueType> comparison(const std::vector<ValueType>& ins, const Params&, const Mesh&) {
  return {ValueType{DType::boolean, broadcast_shapes(ins), union_varying(ins)}};
}

std::vector<ValueType> select(const std::vector<ValueType>& ins, const Params&, const Mesh&) {
  if (ins[0].dtype != DType::boolean) {
    throw RuleError("where's condition must be bool, not " + short_dtype_name(ins[0].dtype));
  }
  return {ValueType{promote_all(ins, 1), broadcast_shapes(ins), union_varying(ins)}};
}

// Bitwise ops take integers and bool only (JAX's rule; jnp.bitwise_and on floats is a TypeError).
std::vector<ValueType> bitwise(const std::vector<ValueType>& ins, const Params&, const Mesh&) {
  for (const ValueType& in : ins) {
    if (is_floating(in.dtype)) {
      throw RuleError("bitwise ops take integer or bool operands, not " + short_dtype_name(in.dtype));
    }
  }
  return {ValueType{promote_all(ins, 0), broadcast_shapes(ins), union_varying(ins)}};
}

// x ** n for a Python int n (JAX's integer_pow): the dtype stays x's; a negative n needs a float x.
std::vector<ValueType> integer_pow(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const std::int64_t y = param<std::int64_t>(params, "y");
  if (y < 0 && !is_floating(ins[0].dtype)) {
    throw RuleError("integers cannot be raised to the negative power " + std::to_string(y));
  }
  return {ins[0]};
}

std::vector<ValueType> convert(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  ValueType out = ins[0];
  out.dtype = param<DType>(params, "dtype");
  return {out};
}

// ---- the derivatives ------------------------------------------------------------------------------------
// JAX's defjvp: each differentiable primitive is given as its partial derivatives, input k's part of the
// derivative applied to g, where g is a tangent of input k (the JVP) or the result's cotangent (the VJP).
// Elementwise, each part is a diagonal linear map (a multiplication by d out / d input k, or a select), so it
// is its own transpose: one function gives both rules, and they agree at every point, the singular ones
// included (pow at 0, abs at 0, max ties): <vjp(u), v> = <u, jvp(v)> to rounding. The VJP machinery
// sums a broadcast cotangent back to the input's shape and casts it to its dtype; the JVP machinery
// broadcasts a tangent to the result's shape and casts it to its dtype.

// What a partial derivative reads: the equation's operands and result in the program being made.
struct Point {
  Emitter& e;
  const Params& params;
  const std::vector<ValueType>& in_types;
  const std::vector<ValueId>& ins;
  ValueId out;
  DType dtype;  // the result's

  ValueId in(std::size_t k) const { return ins[k]; }
  ValueId scalar(double v) const { return e.scalar(v, dtype); }
  ValueId op(Prim prim, const std::vector<ValueId>& operands, Params p = {}) const {
    return e.emit(prim, operands, std::move(p));
  }
};

// Input k's part of the derivative applied to g (kNoValue: the result does not depend on input k).
using Partial = ValueId (*)(const Point& p, std::size_t k, ValueId g);

// The VJP made from the partials: each floating input gets its part applied to the cotangent.
template <Partial partial>
void vjp_from(VjpContext& c) {
  const Point p{c.e, c.params, c.in_types, c.ins, c.out(), c.dtype()};
  for (std::size_t k = 0; k < c.ins.size(); ++k) {
    if (!is_floating(c.in_types[k].dtype)) continue;  // an integer or bool input takes no cotangent
    const ValueId ct = partial(p, k, c.ct());
    if (ct != kNoValue) c.give(k, ct);
  }
}

// The JVP made from the partials: the sum of each input's part applied to its tangent, over the inputs
// that have one (JAX skips a symbolically zero tangent rather than multiplying zeros).
template <Partial partial>
std::vector<ValueId> jvp_from(JvpContext& c) {
  const Point p{c.e, c.params, c.in_types, c.ins, c.out(), c.dtype()};
  ValueId sum = kNoValue;
  for (std::size_t k = 0; k < c.ins.size(); ++k) {
    if (!c.has_tangent(k)) continue;
    const ValueId term = partial(p, k, c.tangents[k]);
    if (term == kNoValue) continue;
    sum = sum == kNoValue ? term : c.e.emit(Prim::add, {sum, term});
  }
  return {sum};
}

// The linear ones.
// add (either side), copy, and astype between floating dtypes (the machinery casts either way; to an integer
// or bool dtype the result carries no tangent and takes no cotangent, so the rule is not asked).
ValueId identity_partial(const Point&, std::size_t, ValueId g) { return g; }
ValueId subtract_partial(const Point& p, std::size_t k, ValueId g) { return k == 0 ? g : p.op(Prim::negative, {g}); }
ValueId negative_partial(const Point& p, std::size_t, ValueId g) { return p.op(Prim::negative, {g}); }
// where(c, x, y): the cotangent goes to the side the condition picked; the condition takes none.
ValueId where_partial(const Point& p, std::size_t k, ValueId g) {
  const ValueId zero = p.scalar(0);
  return k == 1 ? p.op(Prim::where, {p.in(0), g, zero}) : p.op(Prim::where, {p.in(0), zero, g});
}

// Products and quotients.
ValueId multiply_partial(const Point& p, std::size_t k, ValueId g) { return p.op(Prim::multiply, {g, p.in(1 - k)}); }
// d/dx x / y = 1 / y; d/dy = -x y^-2 (inf, or nan for 0 / 0, at y = 0).
ValueId divide_partial(const Point& p, std::size_t k, ValueId g) {
  if (k == 0) return p.op(Prim::divide, {g, p.in(1)});
  return p.op(Prim::multiply, {p.op(Prim::multiply, {p.op(Prim::negative, {g}), p.in(0)}),
                           p.op(Prim::integer_pow, {p.in(1)}, {{"y", int_param(-2)}})});
}
// JAX's pow rules, which keep their values at x == 0 (y out / x and log(x) out gave nan there): d/dx is
// y x^(y-1), with x^(y-1) computed rather than out / x (0 for y = 2, inf for y = 0.5), and 0 where an integer
// y is 0; d/dy is log(x) out with x == 0 read as 1 (0 for y >= 0, where log(0) * 0 was nan).
ValueId power_partial(const Point& p, std::size_t k, ValueId g) {
  const ValueId zero = p.scalar(0), one = p.scalar(1);
  if (k == 1) {
    const ValueId base = p.op(Prim::where, {p.op(Prim::equal, {p.in(0), zero}), one, p.in(0)});
    return p.op(Prim::multiply, {g, p.op(Prim::multiply, {p.op(Prim::log, {base}), p.out})});
  }
  ValueId jac = p.op(Prim::multiply, {p.in(1), p.op(Prim::power, {p.in(0), p.op(Prim::subtract, {p.in(1), one})})});
  if (!is_floating(p.in_types[1].dtype)) jac = p.op(Prim::where, {p.op(Prim::equal, {p.in(1), zero}), zero, jac});
  return p.op(Prim::multiply, {g, jac});
}
// JAX's integer_pow rule: y x^(y-1); x^0 is a constant, so nothing for y = 0 (0 * x^-1 was nan at 0).
ValueId integer_pow_partial(const Point& p, std::size_t, ValueId g) {
  const std::int64_t y = param<std::int64_t>(p.params, "y");
  if (y == 0) return kNoValue;
  ValueId d = p.scalar(static_cast<double>(y));
  if (y != 1) {
    const ValueId power = y - 1 == 1 ? p.in(0) : p.op(Prim::integer_pow, {p.in(0)}, {{"y", int_param(y - 1)}});
    d = p.op(Prim::multiply, {d, power});
  }
  return p.op(Prim::multiply, {g, d});
}
// JAX's max / min rule (_balanced_eq): the operand equal to the result takes g, ties share it equally.
ValueId extremum_partial(const Point& p, std::size_t k, ValueId g) {
  const ValueId won = p.op(Prim::equal, {p.in(k), p.out}), tie = p.op(Prim::equal, {p.in(1 - k), p.out});
  const ValueId share = p.op(Prim::where, {won, p.op(Prim::where, {tie, p.scalar(0.5), p.scalar(1)}), p.scalar(0)});
  return p.op(Prim::multiply, {g, share});
}

// The transcendental ones, by JAX's defjvp / defjvp2 (in terms of the result where that is cheaper).
ValueId exp_partial(const Point& p, std::size_t, ValueId g) { return p.op(Prim::multiply, {g, p.out}); }
ValueId log_partial(const Point& p, std::size_t, ValueId g) { return p.op(Prim::divide, {g, p.in(0)}); }
ValueId log1p_partial(const Point& p, std::size_t, ValueId g) {
  return p.op(Prim::divide, {g, p.op(Prim::add, {p.in(0), p.scalar(1)})});
}
// (g + g out) (1 - out): 1 - out^2 factored, which keeps its digits where out is near +-1.
ValueId tanh_partial(const Point& p, std::size_t, ValueId g) {
  return p.op(Prim::multiply,
              {p.op(Prim::add, {g, p.op(Prim::multiply, {g, p.out})}), p.op(Prim::subtract, {p.scalar(1), p.out})});
}
ValueId sqrt_partial(const Point& p, std::size_t, ValueId g) {
  return p.op(Prim::multiply, {g, p.op(Prim::divide, {p.scalar(0.5), p.out})});
}
// d/dx x^-1/2 = -1/2 x^-3/2 = -0.5 out / x
ValueId rsqrt_partial(const Point& p, std::size_t, ValueId g) {
  return p.op(Prim::multiply, {g, p.op(Prim::multiply, {p.scalar(-0.5), p.op(Prim::divide, {p.out, p.in(0)})})});
}
ValueId sigmoid_partial(const Point& p, std::size_t, ValueId g) {
  return p.op(Prim::multiply, {g, p.op(Prim::multiply, {p.out, p.op(Prim::subtract, {p.scalar(1), p.out})})});
}
ValueId gelu_tanh_partial(const Point& p, std::size_t, ValueId g) {
  return p.op(Prim::multiply, {g, p.op(Prim::gelu_tanh_derivative, {p.in(0)})});
}
// The second derivative of gelu_tanh, so that gelu networks have Hessians: with u = c (x + a x^3),
// t = tanh(u), u' = c (1 + 3 a x^2) and u'' = 6 a c x, d/dx [0.5 (1 + t) + 0.5 x (1 - t^2) u'] is
// (1 - t^2) (u' + 0.5 x (u'' - 2 t u'^2)). Written with registry ops, so it is differentiable in turn.
ValueId gelu_tanh_derivative_partial(const Point& p, std::size_t, ValueId g) {
  const auto mul = [&](ValueId a, ValueId b) { return p.op(Prim::multiply, {a, b}); };
  const auto add = [&](ValueId a, ValueId b) { return p.op(Prim::add, {a, b}); };
  const ValueId x = p.in(0);
  const ValueId x2 = mul(x, x);
  const ValueId t =
      p.op(Prim::tanh, {mul(p.scalar(detail::kGeluC), add(x, mul(p.scalar(detail::kGeluA), mul(x, x2))))});
  const ValueId du = mul(p.scalar(detail::kGeluC), add(p.scalar(1), mul(p.scalar(3 * detail::kGeluA), x2)));
  const ValueId ddu = mul(p.scalar(6 * detail::kGeluA * detail::kGeluC), x);
  const ValueId bend = p.op(Prim::subtract, {ddu, mul(mul(p.scalar(2), t), mul(du, du))});
  const ValueId inner = add(du, mul(mul(p.scalar(0.5), x), bend));
  return mul(g, mul(p.op(Prim::subtract, {p.scalar(1), mul(t, t)}), inner));
}
// JAX's abs rule: g where x >= 0, -g elsewhere (so +g at 0 and -0, where sign(x) would give 0).
ValueId abs_partial(const Point& p, std::size_t, ValueId g) {
  return p.op(Prim::where, {p.op(Prim::greater_equal, {p.in(0), p.scalar(0)}), g, p.op(Prim::negative, {g})});
}
// jax.nn.relu's custom JVP: g where x > 0, 0 elsewhere (0 at 0).
ValueId relu_partial(const Point& p, std::size_t, ValueId g) {
  return p.op(Prim::where, {p.op(Prim::greater, {p.in(0), p.scalar(0)}), g, p.scalar(0)});
}

// where's JVP selects between the tangents as the primal selects between the values (JAX's select_n rule),
// zeros for a side without one; the condition has none.
std::vector<ValueId> where_jvp(JvpContext& c) {
  return {c.e.emit(Prim::where, {c.in(0), c.tangent(1), c.tangent(2)})};
}
// astype's JVP is the tangent cast to the new dtype (JAX's convert_element_type rule); to an integer or bool
// dtype there is no tangent (JAX's float0).
std::vector<ValueId> astype_jvp(JvpContext& c) {
  if (!is_floating(c.dtype())) return {kNoValue};
  return {c.e.astype(c.tangent(0), c.dtype())};
}
// stop_gradient and sign (zero almost everywhere): the result does not depend differentiably on the input.
void no_cotangent_vjp(VjpContext&) {}

// A primitive's derivative rules: both from its partials (`by<...>`), or written out; none where its results
// are integers or bools.
struct Rules {
  VjpRule vjp = nullptr;
  JvpRule jvp = nullptr;
};
template <Partial partial>
constexpr Rules by{vjp_from<partial>, jvp_from<partial>};

// ---- kernels: weft::ops on the equation's arrays --------------------------------------------------------

using Ins = std::vector<Array>;
using Outs = std::vector<Array>;

template <Array (*f)(const Array&)>
Outs unary(const Ins& in, const Params&) {
  return {f(in[0])};
}
template <Array (*f)(const Array&, const Array&)>
Outs binary(const Ins& in, const Params&) {
  return {f(in[0], in[1])};
}
// Array's operators (a + b, ~a) through the standard function objects.
template <class Op>
Outs infix(const Ins& in, const Params&) {
  return {Op{}(in[0], in[1])};
}
template <class Op>
Outs prefix(const Ins& in, const Params&) {
  return {Op{}(in[0])};
}
// Arrays are immutable: copy, stop_gradient and the like hand their operand on.
Outs identity_kernel(const Ins& in, const Params&) { return {in[0]}; }
// where's branches promote to a common dtype first (weft::where does not promote on its own), as the type rule.
Outs where_kernel(const Ins& in, const Params&) {
  const DType dtype = promote_types(in[1].dtype(), in[2].dtype());
  return {weft::where(in[0], in[1].astype(dtype), in[2].astype(dtype))};
}
Outs astype_kernel(const Ins& in, const Params& p) { return {in[0].astype(param_dtype(p))}; }
Outs integer_pow_kernel(const Ins& in, const Params& p) { return {detail::integer_pow(in[0], param_int(p, "y"))}; }

// One row of the family's table: a primitive, its arity and parameters, its type rule, its derivative rules
// and its kernel. Every one of them batches by numpy broadcasting with the batch axis in front
// (elementwise_batch: parameters such as integer_pow's y and astype's dtype pass through).
struct Row {
  Prim id;
  int arity;
  std::vector<ParamSpec> params;
  InferRule infer;
  Rules rules;
  Kernel kernel;
};

std::vector<Row> family() {
  using P = Prim;
  constexpr Rules none{};  // integer or bool results: no derivative
  return {
      // primitive, arity, parameters, type rule, derivatives, kernel
      {P::add,                  2, {},        arithmetic,  by<identity_partial>,                     infix<std::plus<>>},
      {P::subtract,             2, {},        difference,  by<subtract_partial>,                     infix<std::minus<>>},
      {P::multiply,             2, {},        arithmetic,  by<multiply_partial>,                     infix<std::multiplies<>>},
      {P::divide,               2, {},        true_divide, by<divide_partial>,                       infix<std::divides<>>},
      {P::power,                2, {},        arithmetic,  by<power_partial>,                        binary<weft::power>},
      {P::maximum,              2, {},        arithmetic,  by<extremum_partial>,                     binary<weft::maximum>},
      {P::minimum,              2, {},        arithmetic,  by<extremum_partial>,                     binary<weft::minimum>},
      {P::negative,             1, {},        negation,    by<negative_partial>,                     prefix<std::negate<>>},
      {P::copy,                 1, {},        same_unary,  by<identity_partial>,                     identity_kernel},
      {P::integer_pow,          1, {{"y", ParamKind::integer}}, integer_pow, by<integer_pow_partial>,                  integer_pow_kernel},
      {P::exp,                  1, {},        float_unary, by<exp_partial>,                          unary<weft::exp>},
      {P::log,                  1, {},        float_unary, by<log_partial>,                          unary<weft::log>},
      {P::log1p,                1, {},        float_unary, by<log1p_partial>,                        unary<weft::log1p>},
      {P::tanh,                 1, {},        float_unary, by<tanh_partial>,                         unary<weft::tanh>},
      {P::sqrt,                 1, {},        float_unary, by<sqrt_partial>,                         unary<weft::sqrt>},
      {P::rsqrt,                1, {},        float_unary, by<rsqrt_partial>,                        unary<weft::rsqrt>},
      {P::sigmoid,              1, {},        float_unary, by<sigmoid_partial>,                      unary<weft::sigmoid>},
      {P::gelu_tanh,            1, {},        float_unary, by<gelu_tanh_partial>,                    unary<detail::gelu_tanh>},
      {P::gelu_tanh_derivative, 1, {},        float_unary, by<gelu_tanh_derivative_partial>,         unary<detail::gelu_tanh_derivative>},
      {P::abs,                  1, {},        same_unary,  by<abs_partial>,                          unary<weft::abs>},
      {P::relu,                 1, {},        same_unary,  by<relu_partial>,                         unary<weft::relu>},
      {P::where,                3, {},        select,      {vjp_from<where_partial>, where_jvp},     where_kernel},
      {P::astype,               1, {{"dtype", ParamKind::dtype}}, convert,     {vjp_from<identity_partial>, astype_jvp}, astype_kernel},
      {P::stop_gradient,        1, {},        same_unary,  {no_cotangent_vjp, zero_jvp},             identity_kernel},
      {P::sign,                 1, {},        signum,      {no_cotangent_vjp, zero_jvp},             unary<weft::sign>},
      {P::equal,                2, {},        comparison,  none,                                     binary<weft::equal>},
      {P::not_equal,            2, {},        comparison,  none,                                     binary<weft::not_equal>},
      {P::less,                 2, {},        comparison,  none,                                     infix<std::less<>>},
      {P::less_equal,           2, {},        comparison,  none,                                     infix<std::less_equal<>>},
      {P::greater,              2, {},        comparison,  none,                                     infix<std::greater<>>},
      {P::greater_equal,        2, {},        comparison,  none,                                     infix<std::greater_equal<>>},
      {P::bitwise_and,          2, {},        bitwise,     none,                                     infix<std::bit_and<>>},
      {P::bitwise_or,           2, {},        bitwise,     none,                                     infix<std::bit_or<>>},
      {P::bitwise_xor,          2, {},        bitwise,     none,                                     infix<std::bit_xor<>>},
      {P::bitwise_not,          1, {},        bitwise,     none,                                     prefix<std::bit_not<>>},
  };
}

}  // namespace

// numpy broadcasting: dimensions aligned from the right, each pair equal or one of them 1.
std::vector<std::int64_t> broadcast_shapes(const std::vector<ValueType>& ins) {
  std::size_t rank = 0;
  for (const ValueType& in : ins) rank = std::max(rank, in.shape.size());
  std::vector<std::int64_t> out(rank, 1);
  for (const ValueType& in : ins) {
    const std::size_t offset = rank - in.shape.size();
    for (std::size_t i = 0; i < in.shape.size(); ++i) {
      std::int64_t& o = out[offset + i];
      const std::int64_t d = in.shape[i];
      if (d == o || d == 1) continue;
      if (o != 1) {
        std::string shapes;
        for (const ValueType& each : ins) shapes += (shapes.empty() ? "" : " and ") + shape_text(each.shape);
        throw RuleError("shapes " + shapes + " do not broadcast");
      }
      o = d;
    }
  }
  return out;
}

void register_elementwise_ops(std::vector<OpInfo>& ops) {
  for (const Row& row : family()) {
    ops.push_back({.id = row.id, .min_inputs = row.arity, .max_inputs = row.arity, .params = row.params,
                   .elementwise = true, .infer = row.infer, .kernel = row.kernel, .vjp = row.rules.vjp,
                   .jvp = row.rules.jvp, .batch = elementwise_batch});
  }
}

}  // namespace weft::program
