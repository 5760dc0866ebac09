// Inference for elementwise ops: numpy broadcasting of shapes (as weft::ops broadcasts) and JAX's dtype
// promotion (weft::promote_types, JAX's lattice with int16 absent: uint8 with int8 gives int32).
#include <algorithm>

#include "program/op_registry.hpp"
#include "program/rule_kit.hpp"

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
  const std::int64_t y = param_as<std::int64_t>(params, "y", "an int");
  if (y < 0 && !is_floating(ins[0].dtype)) {
    throw RuleError("integers cannot be raised to the negative power " + std::to_string(y));
  }
  return {ins[0]};
}

std::vector<ValueType> convert(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  ValueType out = ins[0];
  out.dtype = param_as<DType>(params, "dtype", "a dtype");
  return {out};
}

// ---- add: linear, so its JVP is itself on the tangents; its transpose gives the cotangent to both sides
// (broadcast axes summed back by the machinery).
void add_vjp(VjpContext& c) {
  c.give(0, c.ct());
  c.give(1, c.ct());
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
  for (const char* name : {"exp", "log", "log1p", "tanh", "sqrt", "rsqrt", "sigmoid", "gelu_tanh",
                           "gelu_tanh_derivative"}) {
    ops.push_back({name, 1, 1, {}, {}, false, float_unary});
  }
  for (const char* name : {"abs", "relu", "copy", "stop_gradient"}) {
    ops.push_back({name, 1, 1, {}, {}, false, same_unary});
  }
  ops.push_back({"negative", 1, 1, {}, {}, false, negation});
  ops.push_back({"sign", 1, 1, {}, {}, false, signum});
  ops.push_back({"add", 2, 2, {}, {}, false, arithmetic, add_vjp, linear_jvp, elementwise_batch});
  for (const char* name : {"multiply", "power", "maximum", "minimum"}) {
    ops.push_back({name, 2, 2, {}, {}, false, arithmetic});
  }
  ops.push_back({"subtract", 2, 2, {}, {}, false, difference});
  ops.push_back({"divide", 2, 2, {}, {}, false, true_divide});
  for (const char* name : {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}) {
    ops.push_back({name, 2, 2, {}, {}, false, comparison});
  }
  ops.push_back({"where", 3, 3, {}, {}, false, select});
  for (const char* name : {"bitwise_and", "bitwise_or", "bitwise_xor"}) {
    ops.push_back({name, 2, 2, {}, {}, false, bitwise});
  }
  ops.push_back({"bitwise_not", 1, 1, {}, {}, false, bitwise});
  ops.push_back({"integer_pow", 1, 1, {"y"}, {}, false, integer_pow});
  ops.push_back({"astype", 1, 1, {"dtype"}, {}, false, convert});
}

bool is_elementwise_op(const std::string& name) {
  static const std::vector<std::string> names = [] {
    std::vector<OpInfo> ops;
    register_elementwise_ops(ops);
    std::vector<std::string> list;
    for (const OpInfo& info : ops) list.push_back(info.name);
    return list;
  }();
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace weft::program
