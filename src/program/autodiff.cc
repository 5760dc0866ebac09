// The VJP transform: the forward program re-emitted, then its equations walked backwards, each one's primitive's rule
// emitting the cotangents of its inputs from its outputs' (summed where a value has several uses). Every
// rule is written with the registry's own ops, so the backward program is verified, printed, fused and run
// like any other.
#include "autodiff.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "builder.hpp"
#include "op_registry.hpp"
#include "printer.hpp"
#include "rule_kit.hpp"
#include "verifier.hpp"
#include "weft/error.hpp"

namespace weft::program {
namespace {

bool differentiable(const ValueType& t) { return is_floating(t.dtype); }

class Transposer {
 public:
  Transposer(const Program& p, Builder& b) : p_(p), b_(b), e_(b) {}

  // The forward pass: inputs, constants and every equation, in the new builder. Notes which equations each
  // checkpoint region holds, for recompute().
  void forward() {
    for (ValueId id : p_.inputs) map_[id] = b_.input(p_.types[id]);
    for (std::size_t k = 0; k < p_.constants.size(); ++k) map_[p_.constants[k]] = b_.constant(p_.constant_values[k]);
    for (std::size_t i = 0; i < p_.equations.size(); ++i) {
      if (const auto region = region_of(p_.equations[i])) regions_[*region].push_back(i);
      reemit(i);
    }
  }

  void seed(ValueId old, ValueId cotangent) { accumulate(old, cotangent); }

  void backward() {
    for (std::size_t i = p_.equations.size(); i-- > 0;) {
      const Equation& eq = p_.equations[i];
      bool any = false;
      for (ValueId out : eq.outputs) any = any || ct_.count(out) > 0;
      if (!any) continue;
      recompute(eq);
      index_ = i;
      // The rules see the equation without its region marker, so what they emit from its params (a psum's
      // axes, a max's keepdims) is unmarked too.
      Equation plain = eq;
      plain.params.erase(kCheckpointParam);
      try {
        transpose(plain);
      } catch (const RuleError& e) {
        throw InvalidArgument(equation_error_prefix(p_, i) + e.what());
      }
    }
  }

  // The cotangent of old value `id` (zeros of its type when nothing flowed into it).
  ValueId cotangent(ValueId id) {
    auto it = ct_.find(id);
    if (it != ct_.end()) return it->second;
    return zeros(p_.types[id]);
  }

  ValueId mapped(ValueId id) const { return map_.at(id); }

 private:
  // ---- checkpoint regions --------------------------------------------------------------------------------
  static std::optional<std::int64_t> region_of(const Equation& eq) {
    const auto it = eq.params.find(kCheckpointParam);
    if (it == eq.params.end()) return std::nullopt;
    return std::get<std::int64_t>(it->second);
  }

  // Equation i emitted again on the current values of its inputs; its outputs now map to the new results. The
  // region marker is dropped: the VJP's result is a plain program (its regions are spent). A primitive with a
  // forward rule (OpInfo::vjp_forward) emits itself and leaves residuals for its VJP rule.
  void reemit(std::size_t i) {
    const Equation& eq = p_.equations[i];
    std::vector<ValueId> ins;
    for (ValueId id : eq.inputs) ins.push_back(map_.at(id));
    Params params = eq.params;
    params.erase(kCheckpointParam);
    std::vector<ValueId> outs;
    if (eq.info().vjp_forward != nullptr) {
      e_.set_source(eq.source);
      VjpForwardContext c{e_, eq.info(), params, {}, ins};
      for (ValueId id : eq.inputs) c.in_types.push_back(p_.types[id]);
      try {
        WithResiduals made = eq.info().vjp_forward(c);
        outs = std::move(made.outs);
        residuals_[i] = std::move(made.residuals);
      } catch (const RuleError& e) {
        throw InvalidArgument(equation_error_prefix(p_, i) + e.what());
      }
    } else {
      outs = b_.emit(eq.info(), ins, std::move(params), eq.source);
    }
    for (std::size_t k = 0; k < outs.size(); ++k) map_[eq.outputs[k]] = outs[k];
  }

  // Right before the first rule of `eq`'s checkpoint region runs (the backward walk meets the region's last
  // equation with a cotangent first), the region's forward equations are emitted again from the current
  // values of its inputs, and every value the region defines maps to its recomputed copy. So the rules read
  // the copies, nothing after this point reads the forward pass's values, and liveness frees those at their
  // last forward use: between the passes only the region's inputs and the outputs used after it stay live.
  // Once per region; effects are not run twice (their results stay the forward pass's). Recomputed values no
  // rule reads are dead code, removed when the program is built.
  void recompute(const Equation& eq) {
    const std::optional<std::int64_t> region = region_of(eq);
    if (!region || !recomputed_.insert(*region).second) return;
    for (const std::size_t k : regions_.at(*region)) {
      if (p_.equations[k].info().effectful) continue;
      reemit(k);
    }
  }

  // ---- cotangents ----------------------------------------------------------------------------------------
  ValueId zeros(const ValueType& t) { return e_.zeros(t); }

  void accumulate(ValueId old, ValueId cotangent) {
    if (!differentiable(p_.types[old])) return;
    auto it = ct_.find(old);
    if (it == ct_.end()) {
      ct_[old] = cotangent;
    } else {
      it->second = b_.emit1(op_info(Prim::add), {it->second, cotangent});
    }
  }

  // A rule's cotangent for input k, summed back over the axes the input was broadcast along and cast to its
  // dtype, added to what the input has.
  void give(const Equation& eq, std::size_t k, ValueId cotangent) {
    const ValueId in = eq.inputs[k];
    if (!differentiable(p_.types[in])) return;
    accumulate(in, e_.astype(e_.unbroadcast(cotangent, p_.types[in].shape), p_.types[in].dtype));
  }

  // ---- the rules -----------------------------------------------------------------------------------------
  // The equation's primitive's VJP rule (ops/*.cc) on a context of its forward values and its outputs'
  // cotangents; what it gives each input is summed back to the input's shape and dtype by give().
  void transpose(const Equation& eq) {
    // Nothing to give when no input carries a cotangent (one_hot of labels, axis_index, constants only).
    if (std::none_of(eq.inputs.begin(), eq.inputs.end(), [&](ValueId id) { return differentiable(p_.types[id]); })) {
      return;
    }
    const OpInfo* info = &eq.info();
    if (info->vjp == nullptr) {
      if (info->effectful) throw RuleError(eq.name() + " is a session effect: it has no VJP");
      for (ValueId id : eq.outputs) {
        if (is_floating(p_.types[id].dtype)) {
          throw RuleError("no VJP rule for " + eq.name() + (info->no_rule.empty() ? " yet" : ": " + info->no_rule));
        }
      }
      return;  // integer or boolean results (comparisons, argmax, one_hot, axis_index, bitwise): no cotangent
    }
    e_.set_source(p_.equations[index_].source);
    VjpContext c{e_, eq.info(), eq.params, {}, {}, {}, {}, {}, {}, {}};
    if (const auto it = residuals_.find(index_); it != residuals_.end()) c.residuals = it->second;
    for (ValueId id : eq.inputs) {
      c.in_types.push_back(p_.types[id]);
      c.ins.push_back(map_.at(id));
    }
    for (ValueId id : eq.outputs) {
      c.out_types.push_back(p_.types[id]);
      c.outs.push_back(map_.at(id));
      c.cts.push_back(cotangent(id));
    }
    c.given.assign(eq.inputs.size(), kNoValue);
    info->vjp(c);
    for (std::size_t k = 0; k < c.given.size(); ++k) {
      if (c.given[k] != kNoValue) give(eq, k, c.given[k]);
    }
  }

  const Program& p_;
  Builder& b_;
  Emitter e_;
  std::map<ValueId, ValueId> map_;  // old value -> its forward value in the new program
  std::map<ValueId, ValueId> ct_;   // old value -> its cotangent so far, in the new program
  std::size_t index_ = 0;           // the equation being transposed (its source is the backward's)
  std::map<std::int64_t, std::vector<std::size_t>> regions_;  // checkpoint region -> its equations, in order
  std::set<std::int64_t> recomputed_;                         // the regions recompute() has emitted again
  std::map<std::size_t, std::vector<ValueId>> residuals_;     // equation -> what its forward rule left
};

}  // namespace

namespace {

void check_wrt(const Program& program, const std::vector<int>& wrt) {
  for (int k : wrt) {
    if (k < 0 || static_cast<std::size_t>(k) >= program.inputs.size()) {
      throw InvalidArgument("vjp: input " + std::to_string(k) + " does not exist (the program has " +
                            std::to_string(program.inputs.size()) + ")");
    }
  }
}

// The VJP as vjp_program builds it, which of its equations the backward pass emitted, and the first value the
// backward pass defines (its first cotangent input): every value numbered below it is the forward pass's.
Program build_vjp(const Program& program, const std::vector<int>& wrt, std::vector<bool>& backward,
                  ValueId* backward_start) {
  check_wrt(program, wrt);
  Builder b(program.mesh, program.rules);
  Transposer t(program, b);
  t.forward();
  const std::size_t forward_equations = b.num_equations();
  std::vector<ValueId> outputs;
  for (ValueId id : program.outputs) outputs.push_back(t.mapped(id));
  for (ValueId id : program.outputs) {
    const ValueId seed = b.input(program.types[id]);
    if (backward_start != nullptr && *backward_start < 0) *backward_start = seed;
    t.seed(id, seed);
  }
  t.backward();
  for (int k : wrt) outputs.push_back(t.cotangent(program.inputs[static_cast<std::size_t>(k)]));
  b.set_outputs(outputs);
  backward.assign(b.num_equations(), true);
  std::fill(backward.begin(), backward.begin() + static_cast<std::ptrdiff_t>(forward_equations), false);
  return b.build();
}

}  // namespace

Program vjp_program(const Program& program, const std::vector<int>& wrt) {
  std::vector<bool> backward;
  return build_vjp(program, wrt, backward, nullptr);
}

Program vjp_program(const Program& program, const std::vector<int>& wrt, std::vector<bool>& backward) {
  return build_vjp(program, wrt, backward, nullptr);
}

std::vector<SavedResidual> saved_residuals(const Program& program, const std::vector<int>& wrt) {
  ValueId start = -1;
  std::vector<bool> backward_equations;
  const Program p = build_vjp(program, wrt, backward_equations, &start);
  if (start < 0) return {};
  // What the cotangent outputs need, walking back (the primal outputs are the forward pass's own).
  std::vector<bool> needed(p.types.size(), false), live(p.equations.size(), false);
  for (std::size_t j = program.outputs.size(); j < p.outputs.size(); ++j) needed[p.outputs[j]] = true;
  std::vector<int> defined_by(p.types.size(), -1);
  for (std::size_t i = p.equations.size(); i-- > 0;) {
    const Equation& eq = p.equations[i];
    for (ValueId id : eq.outputs) defined_by[id] = static_cast<int>(i);
    live[i] = std::any_of(eq.outputs.begin(), eq.outputs.end(), [&](ValueId id) { return needed[id]; });
    if (live[i]) {
      for (ValueId id : eq.inputs) needed[id] = true;
    }
  }
  std::vector<SavedResidual> saved;
  std::set<ValueId> seen;
  const auto note = [&](ValueId id) {
    if (id >= start || !seen.insert(id).second) return;
    if (std::find(p.constants.begin(), p.constants.end(), id) != p.constants.end()) return;  // the program holds it
    SavedResidual r{p.types[id], -1, {}, {}};
    if (const auto in = std::find(p.inputs.begin(), p.inputs.end(), id); in != p.inputs.end()) {
      r.input = static_cast<int>(in - p.inputs.begin());
    } else if (defined_by[id] >= 0) {
      r.op = p.equations[defined_by[id]].name();
      r.source = p.equations[defined_by[id]].source;
    }
    saved.push_back(std::move(r));
  };
  for (std::size_t i = 0; i < p.equations.size(); ++i) {
    const Equation& eq = p.equations[i];
    const bool backward = std::any_of(eq.outputs.begin(), eq.outputs.end(), [&](ValueId id) { return id >= start; });
    if (!live[i] || !backward) continue;
    for (ValueId id : eq.inputs) note(id);
  }
  // A cotangent output that is a forward value itself (a product's cotangent read straight from the forward).
  for (std::size_t j = program.outputs.size(); j < p.outputs.size(); ++j) note(p.outputs[j]);
  return saved;
}

std::vector<ValueId> inline_program(Builder& into, const Program& inlined, const std::vector<ValueId>& inputs) {
  if (inputs.size() != inlined.inputs.size()) {
    throw InvalidArgument("inline: the program takes " + std::to_string(inlined.inputs.size()) + " inputs, given " +
                          std::to_string(inputs.size()));
  }
  std::map<ValueId, ValueId> map;
  for (std::size_t k = 0; k < inputs.size(); ++k) map[inlined.inputs[k]] = inputs[k];
  for (std::size_t k = 0; k < inlined.constants.size(); ++k) {
    map[inlined.constants[k]] = into.constant(inlined.constant_values[k]);
  }
  for (const Equation& eq : inlined.equations) {
    std::vector<ValueId> ins;
    for (ValueId id : eq.inputs) ins.push_back(map.at(id));
    const std::vector<ValueId> outs = into.emit(eq.info(), ins, eq.params, eq.source);
    for (std::size_t k = 0; k < outs.size(); ++k) map[eq.outputs[k]] = outs[k];
  }
  std::vector<ValueId> outputs;
  for (ValueId id : inlined.outputs) outputs.push_back(map.at(id));
  return outputs;
}

}  // namespace weft::program
