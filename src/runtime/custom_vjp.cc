// C++'s weft::custom_vjp (weft/custom_vjp.hpp): bwd traced and registered per signature, and the
// custom_vjp_call equation recorded into the trace around the call.
#include "weft/custom_vjp.hpp"

#include "runtime/custom_call_recording.hpp"
#include "weft/error.hpp"
#include "weft/program.hpp"

namespace weft::detail {
namespace {

std::string signature(const std::vector<Array>& residuals, const Array& out) {
  std::string key;
  for (const Array* a : {&out}) key += std::string(dtype_name(a->dtype())) + shape_str(a->shape()) + ";";
  for (const Array& a : residuals) key += std::string(dtype_name(a.dtype())) + shape_str(a.shape()) + ",";
  return key;
}

}  // namespace

std::int64_t CustomVjpRules::rule(const std::vector<Array>& residuals, const Array& out, std::size_t primals,
                                  const CustomBwd& bwd, const std::string& name) {
  const std::string key = signature(residuals, out);
  const std::lock_guard lock(mutex_);
  if (const auto it = rules_.find(key); it != rules_.end()) return it->second;
  ProgramTrace trace(Mesh(), name + " bwd");
  std::vector<Array> res;
  for (const Array& r : residuals) res.push_back(trace.input({r.dtype(), r.shape(), {}}));
  const Array g = trace.input({out.dtype(), out.shape(), {}});
  const std::vector<Array> cotangents = bwd(res, g);
  if (cotangents.size() != primals) {
    throw InvalidArgument(name + ": bwd returned " + std::to_string(cotangents.size()) + " cotangents for " +
                          std::to_string(primals) + " arguments (one per argument)");
  }
  const std::int64_t rule = register_custom_vjp(trace.finish(cotangents), name);
  rules_.emplace(key, rule);
  return rule;
}

Array record_custom_call(const char* op, std::span<const Array> primals, const Array& out,
                         std::span<const Array> residuals, std::int64_t rule, const std::string& name) {
  ProgramBuilder b;
  std::vector<int> ins;
  std::vector<Array> operands;
  for (const Array& a : primals) operands.push_back(a);
  operands.push_back(out);
  for (const Array& a : residuals) operands.push_back(a);
  for (const Array& a : operands) ins.push_back(b.input({a.dtype(), a.shape(), {}}));
  b.set_outputs(b.emit(op, ins,
                       {{"rule", rule},
                        {"primals", static_cast<std::int64_t>(primals.size())},
                        {"outputs", std::int64_t{1}},
                        {"name", name}}));
  return inline_into_trace(b.build(), operands).at(0);
}

Array record_custom_vjp_call(std::span<const Array> primals, const Array& out, const std::vector<Array>& residuals,
                             std::int64_t rule, const std::string& name) {
  return record_custom_call("custom_vjp_call", primals, out, residuals, rule, name);
}

}  // namespace weft::detail
