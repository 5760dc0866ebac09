// The JVP transform (transforms.hpp): each equation emitted on its primal inputs, then, where a tangent
// reaches it, its primitive's JVP rule emits the tangents of its outputs. Tangents are symbolic zeros until
// something differentiable flows into them, so a program's integer paths, constants and stop_gradients cost
// nothing. Rules write registry ops, so the result is verified, fused and run like any program.
#include <map>
#include <set>

#include "custom_calls.hpp"
#include "op_registry.hpp"
#include "rule_kit.hpp"
#include "transforms.hpp"
#include "verifier.hpp"
#include "weft/error.hpp"

namespace weft::program {
namespace {

class ForwardMode {
 public:
  ForwardMode(const Program& p, Builder& b) : p_(p), b_(b), e_(b) {}

  void run(const std::vector<ValueId>& tangent_inputs) {
    mark_needed();
    for (std::size_t k = 0; k < p_.inputs.size(); ++k) {
      const ValueId old = p_.inputs[k];
      if (is_floating(p_.types[old].dtype)) tangent_[old] = tangent_inputs[k];
    }
    for (std::size_t i = 0; i < p_.equations.size(); ++i) {
      try {
        step(p_.equations[i]);
      } catch (const RuleError& e) {
        throw InvalidArgument(equation_error_prefix(p_, i) + e.what());
      }
    }
  }

  ValueId primal(ValueId old) const { return map_.at(old); }
  // The tangent of old value `id`, zeros of its type where it has none.
  ValueId tangent(ValueId old) {
    const auto it = tangent_.find(old);
    return it != tangent_.end() ? it->second : e_.zeros(p_.types[old]);
  }
  void map_input(ValueId old, ValueId now) { map_[old] = now; }
  void map_constants() {
    for (std::size_t k = 0; k < p_.constants.size(); ++k) map_[p_.constants[k]] = b_.constant(p_.constant_values[k]);
  }

 private:
  void step(const Equation& eq) {
    e_.set_source(eq.source);
    Params params = eq.params;
    params.erase(kCheckpointParam);
    JvpContext c{e_, eq.info(), params, {}, {}, {}, {}, {}};
    for (ValueId id : eq.inputs) {
      c.in_types.push_back(p_.types[id]);
      c.ins.push_back(map_.at(id));
      const auto it = tangent_.find(id);
      c.tangents.push_back(it == tangent_.end() ? kNoValue : it->second);
    }
    c.outs = b_.emit(eq.info(), c.ins, params, eq.source);
    for (std::size_t k = 0; k < c.outs.size(); ++k) {
      map_[eq.outputs[k]] = c.outs[k];
      c.out_types.push_back(b_.type(c.outs[k]));
    }
    bool reached = false;
    for (ValueId t : c.tangents) reached = reached || t != kNoValue;
    bool floating_out = false;
    for (const ValueType& t : c.out_types) floating_out = floating_out || is_floating(t.dtype);
    if (!reached || !floating_out || !needed(eq)) return;
    const OpInfo* info = &eq.info();
    if (info->effectful) throw RuleError(eq.name() + " is a session effect: it has no JVP");
    if (info->jvp == nullptr) {
      throw RuleError("no JVP rule for " + eq.name() + (info->no_rule.empty() ? " yet" : ": " + info->no_rule));
    }
    const std::vector<ValueId> tangents = info->jvp(c);
    if (tangents.size() != eq.outputs.size()) {
      throw RuleError("the JVP rule of " + eq.name() + " gave " + std::to_string(tangents.size()) + " tangents for " +
                      std::to_string(eq.outputs.size()) + " outputs");
    }
    // The rule may have replaced the primal results with its own (rule_kit.hpp's JvpContext).
    for (std::size_t k = 0; k < c.outs.size(); ++k) map_[eq.outputs[k]] = c.outs[k];
    for (std::size_t k = 0; k < tangents.size(); ++k) {
      if (tangents[k] == kNoValue || !is_floating(c.out_types[k].dtype)) continue;
      tangent_[eq.outputs[k]] = fitted(tangents[k], c.out_types[k], eq.name());
    }
  }

  // Which values' tangents the outputs' tangents are made from, walking back from the outputs. An equation
  // none of whose outputs is among them is emitted without its JVP rule. That is what keeps a custom_jvp
  // function's own equations out of forward mode, as JAX does (their rules may be missing or wrong where the
  // user's rule is right): its call reads only its primal operands' tangents, not those of f's outputs.
  void mark_needed() {
    needed_.insert(p_.outputs.begin(), p_.outputs.end());
    for (std::size_t i = p_.equations.size(); i-- > 0;) {
      const Equation& eq = p_.equations[i];
      if (!needed(eq)) continue;
      const std::size_t reads =
          eq.prim() == Prim::custom_jvp_call ? custom_call_layout(eq.prim(), eq.params, eq.inputs.size()).primals : eq.inputs.size();
      needed_.insert(eq.inputs.begin(), eq.inputs.begin() + static_cast<std::ptrdiff_t>(reads));
    }
  }
  bool needed(const Equation& eq) const {
    for (ValueId out : eq.outputs) {
      if (needed_.count(out) > 0) return true;
    }
    return false;
  }

  // A rule's tangent with its output's dtype and shape: a rule may leave a scalar factor unbroadcast or
  // compute in a wider type; anything else is the rule's bug, named.
  ValueId fitted(ValueId t, const ValueType& out, const std::string& op) {
    ValueType have = b_.type(t);
    if (have.shape != out.shape) {
      if (have.num_elements() > out.num_elements()) {
        throw RuleError("the JVP rule of " + op + " gave a " + type_text(have) + " tangent for a " + type_text(out));
      }
      t = e_.broadcast_to(t, out.shape);
    }
    return e_.astype(t, out.dtype);
  }

  const Program& p_;
  Builder& b_;
  Emitter e_;
  std::map<ValueId, ValueId> map_;      // old value -> its primal in the new program
  std::map<ValueId, ValueId> tangent_;  // old value -> its tangent (absent: symbolically zero)
  std::set<ValueId> needed_;            // old values whose tangents the outputs' tangents read
};

}  // namespace

Program jvp_program(const Program& program) {
  Builder b(program.mesh, program.rules);
  ForwardMode forward(program, b);
  for (ValueId id : program.inputs) forward.map_input(id, b.input(program.types[id]));
  std::vector<ValueId> tangents;
  for (ValueId id : program.inputs) tangents.push_back(b.input(program.types[id]));
  forward.map_constants();
  forward.run(tangents);
  std::vector<ValueId> outputs;
  for (ValueId id : program.outputs) outputs.push_back(forward.primal(id));
  for (ValueId id : program.outputs) outputs.push_back(forward.tangent(id));
  b.set_outputs(outputs);
  return b.build();
}

}  // namespace weft::program
