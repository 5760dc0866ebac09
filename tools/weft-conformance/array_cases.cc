// Array-op cases: parse (JSON -> ArrayCase, with the op bound by array_ops), run (the op on the host) and
// compare (compare.hpp, under the case's tolerance).
#include "array_cases.hpp"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "array_ops.hpp"
#include "compare.hpp"
#include "json_array.hpp"

namespace conformance {
namespace {

class ArrayCase final : public Case {
 public:
  using Case::Case;

  std::string op;
  ArrayOp apply;
  std::vector<weft::Array> inputs;
  weft::Array expected;
  Tolerance tolerance;

  int devices() const override { return 0; }

  std::optional<std::string> run(weft::Runtime*) const override {
    return compare_arrays(apply(inputs), expected, tolerance);
  }

  std::string describe() const override {
    std::string text = op + " of ";
    for (std::size_t i = 0; i < inputs.size(); ++i)
      text += (i ? ", " : "") + std::string(weft::dtype_name(inputs[i].dtype())) + " " +
              weft::shape_str(inputs[i].shape());
    return text;
  }
};

const json& field(const json& j, const char* key) {
  if (!j.contains(key)) throw std::runtime_error(std::string("has no \"") + key + "\"");
  return j.at(key);
}

double tolerance_field(const json& j, const char* key) {
  if (!j.contains(key)) throw std::runtime_error(std::string("an inexact case needs \"") + key + "\"");
  const json& value = j.at(key);
  if (!value.is_number() || value.get<double>() < 0)
    throw std::runtime_error(std::string("\"") + key + "\" must be a number >= 0, not " + value.dump());
  return value.get<double>();
}

}  // namespace

std::unique_ptr<Case> parse_array_case(const json& j) {
  const json& name = field(j, "name");
  if (!name.is_string()) throw std::runtime_error("\"name\" is not a string");
  auto c = std::make_unique<ArrayCase>(name.get<std::string>());

  const json& op = field(j, "op");
  if (!op.is_string()) throw std::runtime_error("\"op\" is not a string");
  c->op = op.get<std::string>();

  const json& inputs = field(j, "inputs");
  if (!inputs.is_array()) throw std::runtime_error("\"inputs\" is not a list of arrays");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    c->inputs.push_back(parse_array(inputs[i], "inputs[" + std::to_string(i) + "]"));
  c->expected = parse_array(field(j, "expected"), "expected");

  // Strictest when absent, as collective cases.
  if (j.contains("exact") && !j.at("exact").is_boolean())
    throw std::runtime_error("\"exact\" must be true or false, not " + j.at("exact").dump());
  c->tolerance.exact = j.value("exact", true);
  if (!c->tolerance.exact) {
    c->tolerance.rtol = tolerance_field(j, "rtol");
    c->tolerance.atol = tolerance_field(j, "atol");
  }

  c->apply = bind_array_op(c->op, j.contains("params") ? j.at("params") : json(nullptr), c->inputs.size());
  return c;
}

}  // namespace conformance
