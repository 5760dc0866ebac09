// The parameters of a program equation (`outs = op[params](ins)`, weft/program.hpp). A core-level header: the
// array library records its ops into a trace with them (an Array is symbolic while a function is traced,
// docs/programs.md), below the program layer that defines what a program is.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "weft/dtype.hpp"
#include "weft/groups.hpp"

namespace weft {

// One parameter of an equation. No plain `int` alternative: callers say which (std::int64_t), so a literal
// never lands in `bool` by accident. The last alternative is JAX's axis_index_groups.
using ProgramParam = std::variant<bool, std::int64_t, std::string, DType, std::vector<std::int64_t>,
                                  std::vector<std::string>, Permutation, std::vector<std::vector<int>>>;
// Ordered by name: the order jaxprs print them in.
using ProgramParams = std::map<std::string, ProgramParam>;

}  // namespace weft
