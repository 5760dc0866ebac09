// The session effects as opaque effectful ops: transfers to and from the host (streams) and remote buffers,
// variable reads and in-place updates. Their results' types are declared in their parameters (shape, dtype),
// because what they produce comes from outside the program. The executor (next step) gives them meaning.
#include "program/op_registry.hpp"

namespace weft::program {
namespace {

std::vector<ValueType> declared_result(const std::vector<ValueType>&, const Params& params, const Mesh&) {
  ValueType out;
  out.dtype = param<DType>(params, "dtype");
  out.shape = param<std::vector<std::int64_t>>(params, "shape");
  for (std::int64_t d : out.shape) {
    if (d < 0) throw RuleError("shape has a negative dimension");
  }
  return {out};
}

std::vector<ValueType> no_result(const std::vector<ValueType>&, const Params&, const Mesh&) { return {}; }

// remote_load / remote_store take an optional offset (an integer scalar) after the data.
std::vector<ValueType> check_offset(const std::vector<ValueType>& ins, std::size_t at) {
  if (ins.size() > at && (!is_integer(ins[at].dtype) || !ins[at].shape.empty())) {
    throw RuleError("the offset must be an integer scalar, not " + type_text(ins[at]));
  }
  return {};
}

}  // namespace

void register_effect_ops(std::vector<OpInfo>& ops) {
  using K = ParamKind;
  ops.push_back({.id = Prim::host_load, .min_inputs = 0, .max_inputs = 0,
                 .params = {{"stream", K::string}, {"shape", K::ints}, {"dtype", K::dtype}}, .effectful = true,
                 .infer = declared_result});
  ops.push_back({.id = Prim::host_store, .min_inputs = 1, .max_inputs = 1, .params = {{"stream", K::string}},
                 .effectful = true, .infer = no_result});
  ops.push_back({.id = Prim::remote_load, .min_inputs = 0, .max_inputs = 1,
                 .params = {{"buffer", K::string}, {"shape", K::ints}, {"dtype", K::dtype}}, .effectful = true,
                 .infer = [](const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
                   check_offset(ins, 0);
                   return declared_result(ins, params, mesh);
                 }});
  ops.push_back({.id = Prim::remote_store, .min_inputs = 1, .max_inputs = 2, .params = {{"buffer", K::string}},
                 .effectful = true,
                 .infer = [](const std::vector<ValueType>& ins, const Params&, const Mesh&) {
                   return check_offset(ins, 1);
                 }});
  ops.push_back({.id = Prim::variable_read, .min_inputs = 0, .max_inputs = 0,
                 .params = {{"variable", K::string}, {"shape", K::ints}, {"dtype", K::dtype}}, .effectful = true,
                 .infer = declared_result});
  ops.push_back({.id = Prim::variable_update, .min_inputs = 1, .max_inputs = 1, .params = {{"variable", K::string}},
                 .effectful = true, .infer = no_result});
}

}  // namespace weft::program
