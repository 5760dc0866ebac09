// The parameters of a program equation (`outs = op[params](ins)`, weft/program.hpp). A core-level header: the
// array library records its ops into a trace with them (an Array is symbolic while a function is traced,
// docs/programs.md), below the program layer that defines what a program is.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "weft/dtype.hpp"
#include "weft/groups.hpp"

namespace weft {

class Program;  // weft/program.hpp
// The programs a control-flow equation runs (cond's branches, a loop's body), as JAX's jaxpr-valued parameters:
// built programs, shared (an equation copied by a pass shares them).
using SubPrograms = std::vector<std::shared_ptr<const Program>>;

// One parameter of an equation. No plain `int` alternative: callers say which (std::int64_t), so a literal
// never lands in `bool` by accident. Then JAX's axis_index_groups, then sub-programs.
using ProgramParam = std::variant<bool, std::int64_t, std::string, DType, std::vector<std::int64_t>,
                                  std::vector<std::string>, Permutation, std::vector<std::vector<int>>, SubPrograms>;
// The kind of value a parameter holds: one per ProgramParam alternative, in its order, so a value's kind is
// its variant index. An op's schema (op_schema, weft/program.hpp) gives each of its parameters a kind.
enum class ProgramParamKind : std::uint8_t {
  boolean,      // bool
  integer,      // std::int64_t
  string,       // std::string
  dtype,        // DType
  ints,         // std::vector<std::int64_t>: shapes, axes of an array
  axes,         // std::vector<std::string>: mesh axis names
  permutation,  // Permutation: ppermute's (source, destination) pairs
  groups,       // std::vector<std::vector<int>>: JAX's axis_index_groups
  programs,     // SubPrograms: a control-flow equation's branches or body
};
static_assert(std::variant_size_v<ProgramParam> == static_cast<std::size_t>(ProgramParamKind::programs) + 1,
              "one ProgramParamKind per ProgramParam alternative");

// One parameter of an op's schema: its name, the kind of its value, and whether every equation sets it.
struct ProgramParamSpec {
  std::string name;
  ProgramParamKind kind;
  bool required = true;
};

// Ordered by name: the order jaxprs print them in.
using ProgramParams = std::map<std::string, ProgramParam>;

}  // namespace weft
