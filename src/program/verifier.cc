// The verifier's rules, checked in program order so the first error reported is the first one a reader meets.
#include "verifier.hpp"

#include <algorithm>
#include <cstdint>

#include "op_registry.hpp"
#include "printer.hpp"
#include "weft/error.hpp"

namespace weft::program {
namespace {

constexpr int kUndefined = -2;
constexpr int kProgramInput = -1;

class Checker {
 public:
  explicit Checker(const Program& program)
      : program_(program), names_(value_names(program)), defined_by_(program.types.size(), kUndefined) {}

  void run() {
    if (program_.constants.size() != program_.constant_values.size()) {
      fail(std::to_string(program_.constants.size()) + " constants but " +
           std::to_string(program_.constant_values.size()) + " constant values");
    }
    for (std::size_t k = 0; k < program_.constants.size(); ++k) {
      const ValueId id = program_.constants[k];
      check_id(id, "program constant");
      if (defined_by_[id] != kUndefined) fail("value '" + names_[id] + "' is defined twice (a constant)");
      const Array& value = program_.constant_values[k];
      if (program_.types[id].dtype != value.dtype() || program_.types[id].shape != value.shape()) {
        fail("constant '" + names_[id] + "' is declared " + type_text(program_.types[id]) + " but holds " +
             std::string(dtype_name(value.dtype())) + shape_str(value.shape()));
      }
      defined_by_[id] = kProgramInput;
    }
    for (ValueId id : program_.inputs) {
      check_id(id, "program input");
      if (defined_by_[id] != kUndefined) fail("value '" + names_[id] + "' is a program input twice");
      defined_by_[id] = kProgramInput;
    }
    for (std::size_t i = 0; i < program_.equations.size(); ++i) check_equation(i);
    for (ValueId id : program_.outputs) {
      check_id(id, "program output");
      if (defined_by_[id] == kUndefined) fail("program output '" + names_[id] + "' is never defined");
    }
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { throw InvalidArgument("program: " + message); }
  [[noreturn]] void fail_at(std::size_t index, const std::string& message) const {
    throw InvalidArgument(equation_error_prefix(program_, index) + message);
  }

  void check_id(ValueId id, const std::string& role, std::size_t index = SIZE_MAX) const {
    if (id >= 0 && static_cast<std::size_t>(id) < program_.types.size()) return;
    const std::string message = role + " refers to value " + std::to_string(id) + ", which the program does not " +
                                "have (it has " + std::to_string(program_.types.size()) + ")";
    if (index == SIZE_MAX) fail(message);
    fail_at(index, message);
  }

  std::string definer(ValueId id) const {
    return defined_by_[id] == kProgramInput ? "a program input" : "equation " + std::to_string(defined_by_[id]);
  }

  void check_equation(std::size_t index) {
    const Equation& eq = program_.equations[index];
    std::vector<ValueType> ins;
    for (ValueId id : eq.inputs) {
      check_id(id, "an input", index);
      if (defined_by_[id] == kUndefined) fail_at(index, "input '" + names_[id] + "' is not defined before its use");
      ins.push_back(program_.types[id]);
    }
    std::vector<ValueType> inferred;
    try {
      inferred = infer_result_types(eq.info(), ins, eq.params, program_.mesh, program_.rules);
    } catch (const RuleError& e) {
      fail_at(index, e.what());
    }
    if (inferred.size() != eq.outputs.size()) {
      fail_at(index, eq.name() + " has " + std::to_string(inferred.size()) + " result(s), the equation declares " +
                         std::to_string(eq.outputs.size()));
    }
    for (std::size_t k = 0; k < eq.outputs.size(); ++k) check_output(index, eq.outputs[k], inferred[k]);
  }

  void check_output(std::size_t index, ValueId id, const ValueType& inferred) {
    check_id(id, "an output", index);
    if (defined_by_[id] != kUndefined) {
      fail_at(index, "output '" + names_[id] + "' is already defined (by " + definer(id) + ")");
    }
    const ValueType& declared = program_.types[id];
    if (declared.dtype != inferred.dtype || declared.shape != inferred.shape) {
      fail_at(index, "'" + names_[id] + "' is declared " + type_text(declared) + " but " +
                         program_.equations[index].name() + " gives " + type_text(inferred));
    }
    if (declared.varying != inferred.varying) {
      fail_at(index, "'" + names_[id] + "' is declared varying over " + axes_text(declared.varying) + " but " +
                         program_.equations[index].name() + " makes it vary over " + axes_text(inferred.varying));
    }
    defined_by_[id] = static_cast<int>(index);
  }

  const Program& program_;
  std::vector<std::string> names_;
  std::vector<int> defined_by_;
};

}  // namespace

std::string equation_error_prefix(const Program& program, std::size_t index) {
  const std::string& source = program.equations[index].source;
  return "equation " + std::to_string(index) + " `" + equation_text(program, index) + "`" +
         (source.empty() ? "" : " (" + source + ")") + ": ";
}

void verify(const Program& program) { Checker(program).run(); }

}  // namespace weft::program
