// The program data model: typed SSA values and equations `outs = op[params](ins)` (a jaxpr). One concern:
// the plain data every pass of the program layer reads; building, checking and printing live beside it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "weft/dtype.hpp"
#include "weft/groups.hpp"

namespace weft::program {

// A value's type: what a trace knows of an array without its data. `varying` lists the mesh axes along which
// the value may differ between replicas (JAX's varying manual axes); it is sorted and unique.
struct ValueType {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::string> varying;

  std::int64_t num_elements() const;
  std::size_t num_bytes() const;
  bool operator==(const ValueType&) const = default;
};

// "f32[4,8]", "bool[]" (jaxpr's spelling; varying axes are not printed).
std::string type_text(const ValueType& type);
// jaxpr's short dtype names: f32 f64 f16 bf16 i8 i32 i64 u8 bool.
std::string short_dtype_name(DType dtype);

// Collective groups as JAX's axis_index_groups: lists of indices along the collective's axes.
using Groups = std::vector<std::vector<int>>;
// One parameter of an equation. No plain `int` alternative: callers say which (see the helpers below), so a
// literal never lands in `bool` by accident.
using Param = std::variant<bool, std::int64_t, std::string, DType, std::vector<std::int64_t>,
                           std::vector<std::string>, Permutation, Groups>;
// Ordered by name, which is also the order jaxprs print them in.
using Params = std::map<std::string, Param>;

inline Param int_param(std::int64_t v) { return Param{v}; }
inline Param bool_param(bool v) { return Param{v}; }
inline Param ints_param(std::vector<std::int64_t> v) { return Param{std::move(v)}; }
inline Param axes_param(std::vector<std::string> v) { return Param{std::move(v)}; }
inline Param string_param(std::string v) { return Param{std::move(v)}; }

using ValueId = int;

struct Equation {
  std::string op;
  Params params;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
};

// A whole program. `types[id]` is the declared type of value `id`; `inputs` are defined on entry, every other
// value by exactly one equation. The mesh names the axes collectives and `varying` may use.
struct Program {
  Mesh mesh;
  std::vector<ValueType> types;
  std::vector<ValueId> inputs;
  std::vector<Equation> equations;
  std::vector<ValueId> outputs;
};

}  // namespace weft::program
