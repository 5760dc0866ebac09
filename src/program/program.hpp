// The program data model: typed SSA values and equations `outs = op[params](ins)` (a jaxpr). One concern:
// the plain data every pass of the program layer reads; building, checking and printing live beside it.
#pragma once
#include <cstdint>
#include <map>
#include <string_view>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "params.hpp"
#include "primitives.hpp"
#include "weft/dtype.hpp"
#include "weft/groups.hpp"
#include "weft/program.hpp"

namespace weft::program {

// "f32[4,8]", "bool[]" (jaxpr's spelling; varying axes are not printed).
std::string type_text(const ValueType& type);
// jaxpr's short dtype names: f32 f64 f16 bf16 i8 i32 i64 u8 bool.
std::string short_dtype_name(DType dtype);

// An equation holds its primitive resolved (its registry row), so the passes compare ids and read the row's
// properties instead of looking a name up: resolved once, where the equation is made.
struct Equation {
  Equation() = default;
  Equation(const OpInfo& op, Params parameters, std::vector<ValueId> ins, std::vector<ValueId> outs,
           std::string where = {})
      : op_(&op), params(std::move(parameters)), inputs(std::move(ins)), outputs(std::move(outs)),
        source(std::move(where)) {}
  Equation(Prim op, Params parameters, std::vector<ValueId> ins, std::vector<ValueId> outs, std::string where = {});
  // By name (hand-written programs, tests): RuleError "unknown op 'frobnicate'" for an unknown one.
  Equation(std::string_view op, Params parameters, std::vector<ValueId> ins, std::vector<ValueId> outs,
           std::string where = {});

  const OpInfo& info() const { return *op_; }
  Prim prim() const { return op_->id; }
  const std::string& name() const { return op_->name(); }

 private:
  const OpInfo* op_ = nullptr;

 public:
  Params params;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  // Where the trace recorded it ("train.py:42"; empty if unknown): named by its errors.
  std::string source;
};

// A whole program. `types[id]` is the declared type of value `id`; `inputs` and `constants` are defined on
// entry, every other value by exactly one equation. Constants (jaxpr's constvars) are values the trace knew:
// `constant_values[k]` is the value of `constants[k]`. The mesh names the axes collectives and `varying` may use.
struct Program {
  Mesh mesh;
  // The collectives' rule set (weft/program.hpp): what the builder inserts, how types and transposes go.
  CollectiveRules rules = CollectiveRules::pmap;
  std::vector<ValueType> types;
  std::vector<ValueId> inputs;
  std::vector<ValueId> constants;
  std::vector<Array> constant_values;
  std::vector<Equation> equations;
  std::vector<ValueId> outputs;
};

}  // namespace weft::program
