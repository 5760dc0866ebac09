// custom_vjp's table of bwd programs and its call op's inference rule (custom_vjp.hpp explains the design).
#include "custom_vjp.hpp"

#include <map>
#include <memory>
#include <mutex>

#include "verifier.hpp"

namespace weft::program {
namespace {

struct Table {
  std::mutex mutex;
  // unique_ptr: find_custom_vjp hands out references that must stay valid while others register.
  std::map<std::int64_t, std::unique_ptr<const CustomVjpRule>> rules;
  std::int64_t next = 0;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: programs may be differentiated during static destruction
  return *t;
}

std::size_t count_param(const Params& params, const char* name) {
  const std::int64_t n = param_as<std::int64_t>(params, name, "an int");
  if (n < 0) throw RuleError(kCustomVjpOp + ": parameter '" + name + "' must not be negative");
  return static_cast<std::size_t>(n);
}

// outs = fwd's outputs, unchanged: their types are those operands' types.
std::vector<ValueType> infer_call(const std::vector<ValueType>& ins, const Params& params, const Mesh&) {
  const CustomVjpLayout layout = custom_vjp_layout(params, ins.size());
  find_custom_vjp(layout.rule);  // a call whose bwd is unknown could never be differentiated
  return {ins.begin() + static_cast<std::ptrdiff_t>(layout.primals),
          ins.begin() + static_cast<std::ptrdiff_t>(layout.primals + layout.outputs)};
}

}  // namespace

std::int64_t register_custom_vjp(Program bwd, std::string name) {
  verify(bwd);
  Table& t = table();
  std::lock_guard lock(t.mutex);
  const std::int64_t rule = t.next++;
  t.rules[rule] = std::make_unique<const CustomVjpRule>(CustomVjpRule{std::move(bwd), std::move(name)});
  return rule;
}

const CustomVjpRule& find_custom_vjp(std::int64_t rule) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  const auto it = t.rules.find(rule);
  if (it == t.rules.end()) {
    throw RuleError(kCustomVjpOp + ": no custom_vjp rule " + std::to_string(rule) +
                    " is registered in this process (a call's bwd is registered when the call is traced)");
  }
  return *it->second;
}

CustomVjpLayout custom_vjp_layout(const Params& params, std::size_t operands) {
  CustomVjpLayout layout;
  layout.rule = param_as<std::int64_t>(params, "rule", "an int");
  layout.primals = count_param(params, "primals");
  layout.outputs = count_param(params, "outputs");
  layout.name = param_as<std::string>(params, "name", "a string");
  if (layout.primals + layout.outputs > operands) {
    throw RuleError(kCustomVjpOp + ": " + std::to_string(layout.primals) + " primal inputs and " +
                    std::to_string(layout.outputs) + " outputs need at least " +
                    std::to_string(layout.primals + layout.outputs) + " operands, got " + std::to_string(operands));
  }
  layout.residuals = operands - layout.primals - layout.outputs;
  return layout;
}

void register_custom_vjp_ops(std::vector<OpInfo>& ops) {
  ops.push_back({kCustomVjpOp, 0, -1, {"rule", "primals", "outputs", "name"}, {}, false, infer_call});
}

}  // namespace weft::program
