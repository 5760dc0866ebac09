// An equation's parameters: how the program layer makes them and reads them. One accessor set for the
// inference rules, the kernels, the passes and the executor, so a parameter is read the same way (and refused
// with the same words) everywhere: a missing required parameter or one of the wrong kind is a RuleError naming
// it, which the verifier and builder prefix with the equation.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "weft/dtype.hpp"
#include "weft/groups.hpp"
#include "weft/program_params.hpp"

namespace weft::program {

// Collective groups as JAX's axis_index_groups: lists of indices along the collective's axes.
using Groups = std::vector<std::vector<int>>;
// One parameter of an equation, ordered by name (the order jaxprs print them in): weft/program_params.hpp's.
using Param = ProgramParam;
using Params = ProgramParams;

// Thrown by an inference rule with the rule's own words (and by the accessors below); the verifier and builder
// prefix the equation.
class RuleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline Param int_param(std::int64_t v) { return Param{v}; }
inline Param bool_param(bool v) { return Param{v}; }
inline Param ints_param(std::vector<std::int64_t> v) { return Param{std::move(v)}; }
inline Param axes_param(std::vector<std::string> v) { return Param{std::move(v)}; }
inline Param string_param(std::string v) { return Param{std::move(v)}; }

// How a refusal names each kind of parameter ("parameter 'axis' must be an int").
template <class T>
constexpr const char* param_kind() {
  if constexpr (std::is_same_v<T, bool>) return "a bool";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "an int";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (std::is_same_v<T, DType>) return "a dtype";
  else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return "a tuple of ints";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "a tuple of axis names";
  else if constexpr (std::is_same_v<T, Permutation>) return "a tuple of (source, destination) pairs";
  else if constexpr (std::is_same_v<T, Groups>) return "a tuple of index tuples";
  else if constexpr (std::is_same_v<T, SubPrograms>) return "a tuple of programs";
  else static_assert(!sizeof(T), "not a kind of program parameter");
}

// The parameter `name` as a T, nullptr when the equation does not set it; RuleError when it is another kind.
template <class T>
const T* param_if(const Params& params, const std::string& name) {
  const auto it = params.find(name);
  if (it == params.end()) return nullptr;
  const T* value = std::get_if<T>(&it->second);
  if (value == nullptr) throw RuleError("parameter '" + name + "' must be " + param_kind<T>());
  return value;
}
// A required parameter: RuleError "missing parameter 'shape'" when absent.
template <class T>
const T& param(const Params& params, const std::string& name) {
  const T* value = param_if<T>(params, name);
  if (value == nullptr) throw RuleError("missing parameter '" + name + "'");
  return *value;
}

inline bool has_param(const Params& params, const std::string& name) { return params.contains(name); }
inline std::int64_t param_int(const Params& params, const std::string& name) {
  return param<std::int64_t>(params, name);
}
// An optional int: `otherwise` when the equation does not set it.
inline std::int64_t param_int(const Params& params, const std::string& name, std::int64_t otherwise) {
  const std::int64_t* value = param_if<std::int64_t>(params, name);
  return value != nullptr ? *value : otherwise;
}
// An optional axis as the array functions take one (argmax, softmax, take): nullopt when the equation does not
// set it.
inline std::optional<int> param_axis_if(const Params& params, const std::string& name = "axis") {
  const std::int64_t* value = param_if<std::int64_t>(params, name);
  if (value == nullptr) return std::nullopt;
  return static_cast<int>(*value);
}
inline const std::vector<std::int64_t>& param_ints(const Params& params, const std::string& name) {
  return param<std::vector<std::int64_t>>(params, name);
}
// A bool parameter (transpose_a, keepdims, tiled, ...): false when the equation does not set it.
inline bool param_flag(const Params& params, const std::string& name) {
  const bool* value = param_if<bool>(params, name);
  return value != nullptr && *value;
}
// The mesh axes a collective names.
inline const std::vector<std::string>& param_axes(const Params& params, const std::string& name = "axes") {
  return param<std::vector<std::string>>(params, name);
}
inline DType param_dtype(const Params& params, const std::string& name = "dtype") {
  return param<DType>(params, name);
}
inline const std::string& param_string(const Params& params, const std::string& name) {
  return param<std::string>(params, name);
}

}  // namespace weft::program
