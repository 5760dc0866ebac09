// The VJP transform: the forward program re-emitted, then its equations walked backwards, each one's rule
// emitting the cotangents of its inputs from its outputs' (summed where a value has several uses). Every
// rule is written with the registry's own ops, so the backward program is verified, printed, fused and run
// like any other.
#include "autodiff.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "builder.hpp"
#include "custom_vjp.hpp"
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
  Transposer(const Program& p, Builder& b) : p_(p), b_(b) {}

  // The forward pass: inputs, constants and every equation, in the new builder. Notes which equations each
  // checkpoint region holds, for recompute().
  void forward() {
    for (ValueId id : p_.inputs) map_[id] = b_.input(p_.types[id]);
    for (std::size_t k = 0; k < p_.constants.size(); ++k) map_[p_.constants[k]] = b_.constant(p_.constant_values[k]);
    for (std::size_t i = 0; i < p_.equations.size(); ++i) {
      if (const auto region = region_of(p_.equations[i])) regions_[*region].push_back(i);
      reemit(p_.equations[i]);
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

  // `eq` emitted again on the current values of its inputs; its outputs now map to the new results. The
  // region marker is dropped: the VJP's result is a plain program (its regions are spent).
  void reemit(const Equation& eq) {
    std::vector<ValueId> ins;
    for (ValueId id : eq.inputs) ins.push_back(map_.at(id));
    Params params = eq.params;
    params.erase(kCheckpointParam);
    const std::vector<ValueId> outs = b_.emit(eq.op, ins, std::move(params), eq.source);
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
      const Equation& member = p_.equations[k];
      if (find_op(member.op)->effectful) continue;
      reemit(member);
    }
  }

  // ---- emitting ------------------------------------------------------------------------------------------
  ValueId emit(const std::string& op, const std::vector<ValueId>& ins, Params params = {}) {
    return b_.emit1(op, ins, std::move(params), p_.equations[index_].source);
  }
  ValueId scalar(double v, DType dtype) { return b_.constant(Array::scalar(v, dtype)); }
  ValueId zeros(const ValueType& t) {
    return b_.emit1("broadcast_to", {scalar(0, t.dtype)}, {{"shape", ints_param(t.shape)}});
  }
  // A copy: the builder's types move as it grows, so a reference would dangle after the next emit.
  ValueType type(ValueId new_id) const { return b_.type(new_id); }

  void accumulate(ValueId old, ValueId cotangent) {
    if (!differentiable(p_.types[old])) return;
    auto it = ct_.find(old);
    if (it == ct_.end()) {
      ct_[old] = cotangent;
    } else {
      it->second = b_.emit1("add", {it->second, cotangent});
    }
  }

  // `g` (of a broadcast result's shape) summed back to `shape`: over the leading axes the operand lacks and
  // the axes where it has size 1 (numpy broadcasting's transpose).
  ValueId unbroadcast(ValueId g, const std::vector<std::int64_t>& shape) {
    const std::vector<std::int64_t> from = type(g).shape;
    if (from == shape) return g;
    std::vector<std::int64_t> axes;
    const std::size_t lead = from.size() - shape.size();
    for (std::size_t d = 0; d < from.size(); ++d) {
      if (d < lead || (shape[d - lead] == 1 && from[d] != 1)) axes.push_back(static_cast<std::int64_t>(d));
    }
    ValueId summed = axes.empty() ? g : emit("sum", {g}, {{"axes", ints_param(axes)}});
    return type(summed).shape == shape ? summed : emit("reshape", {summed}, {{"shape", ints_param(shape)}});
  }

  void give(const Equation& eq, std::size_t k, ValueId cotangent) {
    const ValueId in = eq.inputs[k];
    if (!differentiable(p_.types[in])) return;
    ValueId g = unbroadcast(cotangent, p_.types[in].shape);
    if (type(g).dtype != p_.types[in].dtype) g = emit("astype", {g}, {{"dtype", Param{p_.types[in].dtype}}});
    accumulate(in, g);
  }

  // ---- the rules -----------------------------------------------------------------------------------------
  // What every rule reads of the equation it transposes: its forward result and that result's cotangent.
  struct Rule {
    const Equation& eq;
    ValueId out;  // the forward value of the (first) output, -1 for none
    ValueId g;    // its cotangent (zeros when nothing flowed into it)
    DType dt;     // its dtype
  };

  void transpose(const Equation& eq) {
    const std::string& op = eq.op;
    // Nothing to give when no input carries a cotangent (one_hot of labels, axis_index, constants only).
    if (std::none_of(eq.inputs.begin(), eq.inputs.end(), [&](ValueId id) { return differentiable(p_.types[id]); })) {
      return;
    }
    if (op == kCustomVjpOp) return transpose_custom_vjp(eq);
    const OpInfo* info = find_op(op);
    if (info->vjp != nullptr) {
      Emitter e(b_);
      e.set_source(p_.equations[index_].source);
      VjpContext c{e, op, eq.params, {}, {}, {}, {}, {}, {}};
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
      return;
    }
    const Rule r{eq, eq.outputs.empty() ? -1 : map_.at(eq.outputs[0]), eq.outputs.empty() ? -1 : cotangent(eq.outputs[0]),
                 eq.outputs.empty() ? DType::f32 : p_.types[eq.outputs[0]].dtype};
    if (elementwise_rule(r) || collective_rule(r)) return;
    if (is_floating(r.dt) && !info->effectful) {
      throw RuleError("no VJP rule for " + op + (info->no_rule.empty() ? " yet" : ": " + info->no_rule));
    }
    if (info->effectful) throw RuleError(op + " is a session effect: it has no VJP");
    // Ops with integer or boolean results (comparisons, argmax, one_hot, axis_index, bitwise): no cotangent.
  }

  // A custom_vjp call (custom_vjp.hpp): the user's bwd program, inlined on the current values of the
  // residual operands and the cotangents of the call's outputs, gives the primal operands their cotangents.
  // The fwd outputs and residual operands get none, so fwd's equations are never transposed. bwd's results
  // were checked against the primals' types when the call was traced (Python's custom_vjp); a hand-built
  // call is checked here, before give() could broadcast a wrong shape away.
  void transpose_custom_vjp(const Equation& eq) {
    const CustomVjpLayout layout = custom_vjp_layout(eq.params, eq.inputs.size());
    const CustomVjpRule& rule = find_custom_vjp(layout.rule);
    const std::string who = "custom_vjp(" + layout.name + "): bwd ";
    std::vector<ValueId> ins;
    for (std::size_t j = 0; j < layout.residuals; ++j) ins.push_back(map_.at(eq.inputs[layout.primals + layout.outputs + j]));
    for (ValueId out : eq.outputs) ins.push_back(cotangent(out));
    if (ins.size() != rule.bwd.inputs.size()) {
      throw RuleError(who + "takes " + std::to_string(rule.bwd.inputs.size()) + " inputs, the call has " +
                      std::to_string(layout.residuals) + " residuals and " + std::to_string(eq.outputs.size()) +
                      " outputs");
    }
    const std::vector<ValueId> cts = inline_program(b_, rule.bwd, ins);
    if (cts.size() != layout.primals) {
      throw RuleError(who + "returned " + std::to_string(cts.size()) + " cotangents for " +
                      std::to_string(layout.primals) + " primal inputs (one per input)");
    }
    for (std::size_t k = 0; k < layout.primals; ++k) {
      const ValueType& primal = p_.types[eq.inputs[k]];
      if (!differentiable(primal)) continue;
      const ValueType ct = type(cts[k]);
      if (ct.shape != primal.shape || ct.dtype != primal.dtype) {
        throw RuleError(who + "returned a " + type_text(ct) + " cotangent for primal input " + std::to_string(k) +
                        ", a " + type_text(primal) + " (a cotangent has its primal's shape and dtype)");
      }
      give(eq, k, cts[k]);
    }
  }

  // The elementwise family's rules (broadcasting is summed back by give()). Returns whether `r`'s op is one of them.
  bool elementwise_rule(const Rule& r) {
    const Equation& eq = r.eq;
    const std::string& op = eq.op;
    const Params& p = eq.params;
    const auto in = [&](std::size_t k) { return map_.at(eq.inputs[k]); };
    const ValueId out = r.out;
    const ValueId g = r.g;
    const DType dt = r.dt;
    const auto one = [&] { return scalar(1, dt); };

    if (op == "subtract") {
      give(eq, 0, g);
      give(eq, 1, emit("negative", {g}));
    } else if (op == "multiply") {
      give(eq, 0, emit("multiply", {g, in(1)}));
      give(eq, 1, emit("multiply", {g, in(0)}));
    } else if (op == "divide") {
      give(eq, 0, emit("divide", {g, in(1)}));
      give(eq, 1, emit("negative", {emit("divide", {emit("multiply", {g, out}), in(1)})}));
    } else if (op == "negative") {
      give(eq, 0, emit("negative", {g}));
    } else if (op == "copy") {
      give(eq, 0, g);
    } else if (op == "stop_gradient") {
      // no cotangent
    } else if (op == "exp") {
      give(eq, 0, emit("multiply", {g, out}));
    } else if (op == "log") {
      give(eq, 0, emit("divide", {g, in(0)}));
    } else if (op == "log1p") {
      give(eq, 0, emit("divide", {g, emit("add", {in(0), one()})}));
    } else if (op == "tanh") {
      give(eq, 0, emit("multiply", {g, emit("subtract", {one(), emit("multiply", {out, out})})}));
    } else if (op == "sqrt") {
      give(eq, 0, emit("divide", {g, emit("multiply", {out, scalar(2, dt)})}));
    } else if (op == "rsqrt") {
      // d/dx x^-1/2 = -1/2 x^-3/2 = -0.5 * out / x
      give(eq, 0, emit("multiply", {g, emit("divide", {emit("multiply", {out, scalar(-0.5, dt)}), in(0)})}));
    } else if (op == "sigmoid") {
      give(eq, 0, emit("multiply", {g, emit("multiply", {out, emit("subtract", {one(), out})})}));
    } else if (op == "gelu_tanh") {
      give(eq, 0, emit("multiply", {g, emit("gelu_tanh_derivative", {in(0)})}));
    } else if (op == "abs") {
      // JAX's rule: g where x >= 0, -g elsewhere (so 1 at 0, where sign(x) would give 0).
      give(eq, 0, emit("where", {emit("greater_equal", {in(0), scalar(0, dt)}), g, emit("negative", {g})}));
    } else if (op == "sign") {
      // zero almost everywhere
    } else if (op == "relu") {
      give(eq, 0, emit("where", {emit("greater", {in(0), scalar(0, dt)}), g, scalar(0, dt)}));
    } else if (op == "integer_pow") {
      const std::int64_t y = std::get<std::int64_t>(p.at("y"));
      // JAX's rule: x ** 0 is a constant, so x gets no cotangent (0 * x ** -1 was nan at 0).
      if (y != 0) {
        ValueId d = scalar(static_cast<double>(y), dt);
        if (y != 1) {
          const ValueId power = y - 1 == 1 ? in(0) : emit("integer_pow", {in(0)}, {{"y", int_param(y - 1)}});
          d = emit("multiply", {d, power});
        }
        give(eq, 0, emit("multiply", {g, d}));
      }
    } else if (op == "power") {
      // JAX's pow rules, which keep their values at a == 0 (b * out / a and log(a) * out gave nan there):
      // d/da = b a^(b-1), with a^(b-1) computed rather than out / a (0 for b = 2, inf for b = 0.5), and 0 where
      // an integer b is 0; d/db = log(a) out with a == 0 read as 1 (0 for b >= 0, where log(0) * 0 was nan).
      const ValueId zero = scalar(0, dt);
      ValueId jac = emit("multiply", {in(1), emit("power", {in(0), emit("subtract", {in(1), one()})})});
      if (!is_floating(p_.types[eq.inputs[1]].dtype)) jac = emit("where", {emit("equal", {in(1), zero}), zero, jac});
      give(eq, 0, emit("multiply", {g, jac}));
      const ValueId base = emit("where", {emit("equal", {in(0), zero}), one(), in(0)});
      give(eq, 1, emit("multiply", {g, emit("multiply", {emit("log", {base}), out})}));
    } else if (op == "maximum" || op == "minimum") {
      // JAX's rule: the winner takes the cotangent, ties share it equally.
      const char* wins = op == "maximum" ? "greater" : "less";
      const ValueId half = scalar(0.5, dt);
      const ValueId zero = scalar(0, dt);
      const ValueId tie = emit("equal", {in(0), in(1)});
      const ValueId a = emit("where", {emit(wins, {in(0), in(1)}), one(), emit("where", {tie, half, zero})});
      const ValueId b = emit("where", {emit(wins, {in(1), in(0)}), one(), emit("where", {tie, half, zero})});
      give(eq, 0, emit("multiply", {g, a}));
      give(eq, 1, emit("multiply", {g, b}));
    } else if (op == "where") {
      const ValueId zero = scalar(0, dt);
      give(eq, 1, emit("where", {in(0), g, zero}));
      give(eq, 2, emit("where", {in(0), zero, g}));
    } else if (op == "astype") {
      give(eq, 0, g);  // give() casts back to the input's dtype
    } else {
      return false;
    }
    return true;
  }

  // The collectives, by JAX's pmap rules. Returns whether `r`'s op is one of them.
  bool collective_rule(const Rule& r) {
    const Equation& eq = r.eq;
    const std::string& op = eq.op;
    const Params& p = eq.params;
    const ValueId g = r.g;

    if ((op == "psum" || op == "pmean") && p_.rules == CollectiveRules::shard_map) {
      // shard_map's rule: the cotangent of an invariant sum goes back to every member unchanged (pvary), a
      // mean's divided by the participants.
      const ValueId spread = pvary_to(g, std::get<std::vector<std::string>>(p.at("axes")));
      give(eq, 0, op == "psum" ? spread
                                : emit("divide", {spread, scalar(static_cast<double>(group_size(p)), type(g).dtype)}));
    } else if (op == "pvary") {
      give(eq, 0, emit("psum", {g}, p));  // shard_map's: the varying cotangents summed back to the invariant value
    } else if (op == "psum" || op == "pmean") {
      give(eq, 0, emit(op, {g}, p));  // JAX's pmap rule: psum transposes to psum (pmean = psum / n likewise)
    } else if (op == "all_gather") {
      give(eq, 0, emit("psum_scatter", {g}, p));
    } else if (op == "psum_scatter") {
      give(eq, 0, emit("all_gather", {g}, p));
    } else if (op == "ppermute") {
      Permutation inverse;
      for (const auto& [from, to] : std::get<Permutation>(p.at("perm"))) inverse.emplace_back(to, from);
      Params q = p;
      q["perm"] = Param{inverse};
      give(eq, 0, emit("ppermute", {g}, q));
    } else if (op == "all_to_all") {
      Params q = p;
      q["split_axis"] = p.at("concat_axis");
      q["concat_axis"] = p.at("split_axis");
      give(eq, 0, emit("all_to_all", {g}, q));
    } else if (op == "all_reduce_identical_inputs") {
      give(eq, 0, emit("all_reduce_identical_grad_inputs", {g}, p));  // f: the identity, its transpose a sum
    } else if (op == "all_reduce_identical_grad_inputs") {
      give(eq, 0, emit("all_reduce_identical_inputs", {g}, p));  // g: a sum, its transpose the identity
    } else if (op == "pprod") {
      transpose_pprod(eq, g);
    } else if (op == "replicated_reduce_scatter" || op == "replica_sharded_slice" || op == "gather_shards") {
      transpose_flat_collective(eq, g);
    } else if (op == "pmax" || op == "pmin") {
      throw RuleError(op + " has no transpose rule under " +
                      (p_.rules == CollectiveRules::shard_map ? "shard_map" : "pmap") +
                      " (as in JAX, differentiating it is an error)");
    } else {
      return false;
    }
    return true;
  }


  // `g` typed as varying over `axes` too (a pvary of the axes it lacks; itself when it has them all).
  ValueId pvary_to(ValueId g, const std::vector<std::string>& axes) {
    std::vector<std::string> missing;
    const std::vector<std::string> has = type(g).varying;
    for (const std::string& a : axes) {
      if (std::find(has.begin(), has.end(), a) == has.end()) missing.push_back(a);
    }
    return missing.empty() ? g : emit("pvary", {g}, {{"axes", Param{missing}}});
  }

  // Parameters of a collective's transpose: the same axes and groups.
  static Params axes_and_groups(const Params& p) {
    Params q{{"axes", p.at("axes")}};
    if (p.contains("groups")) q["groups"] = p.at("groups");
    return q;
  }

  // How many replicas one instance of the collective spans (the verifier has checked the groups).
  std::int64_t group_size(const Params& p) const {
    if (p.contains("groups")) return static_cast<std::int64_t>(std::get<Groups>(p.at("groups")).front().size());
    std::int64_t n = 1;
    for (const std::string& a : std::get<std::vector<std::string>>(p.at("axes"))) {
      n *= p_.mesh.axes()[p_.mesh.axis_position(a)].size;
    }
    return n;
  }

  // out = the product of x over the group, so d out / d x_r is the product of the others, times psum(g) (every
  // member's cotangent reads x_r). Without dividing by a zero: with no zero in the group it is P / x_r, P the
  // product; with one zero, P of the nonzeros at that zero and 0 elsewhere; with more, 0 everywhere.
  void transpose_pprod(const Equation& eq, ValueId g) {
    const Params q = axes_and_groups(eq.params);
    const ValueId x = map_.at(eq.inputs[0]);
    const DType dt = type(x).dtype;
    const ValueId zero = scalar(0, dt);
    const ValueId is_zero = emit("equal", {x, zero});
    const ValueId safe = emit("where", {is_zero, scalar(1, dt), x});
    const ValueId nonzero_product = emit("pprod", {safe}, q);
    const ValueId zeros_in_group = emit("psum", {emit("astype", {is_zero}, {{"dtype", Param{dt}}})}, q);
    const ValueId one_zero = emit("where", {is_zero, nonzero_product, zero});
    const ValueId others = emit("where", {emit("equal", {zeros_in_group, zero}), emit("divide", {nonzero_product, safe}),
                                          emit("where", {emit("equal", {zeros_in_group, scalar(1, dt)}), one_zero, zero})});
    give(eq, 0, emit("multiply", {emit("psum", {g}, q), others}));
  }

  // PopXL's collectives on flattened tensors, padded to a multiple of the group size G (chunk k: member k's):
  // replicated_reduce_scatter (add or mean) <-> gather_shards, as psum_scatter <-> all_gather;
  // replica_sharded_slice (no communication) -> the member's chunk placed in zeros of the padded flat tensor.
  void transpose_flat_collective(const Equation& eq, ValueId g) {
    const Params& p = eq.params;
    const std::string& op = eq.op;
    const ValueType& x = p_.types[eq.inputs[0]];
    const std::int64_t n = x.num_elements();
    const std::int64_t size = group_size(p);
    const DType dt = type(g).dtype;
    const auto flat = [&](ValueId v, std::int64_t length) {
      return emit("reshape", {v}, {{"shape", ints_param({length})}});
    };
    if (op == "replicated_reduce_scatter") {
      const std::string reduce = p.contains("op") ? std::get<std::string>(p.at("op")) : "add";
      if (reduce != "add" && reduce != "mean") {
        throw RuleError("replicated_reduce_scatter with op '" + reduce + "' has no VJP rule (add and mean have)");
      }
      Params q = axes_and_groups(p);
      q["shape"] = ints_param(x.shape);
      ValueId back = emit("gather_shards", {g}, q);
      if (reduce == "mean") back = emit("divide", {back, scalar(static_cast<double>(size), dt)});
      give(eq, 0, back);
    } else if (op == "gather_shards") {
      // g is the whole tensor: flattened, padded to the G shards, each member's shard summed over the group.
      const std::int64_t shard = x.shape[0];
      Params q = axes_and_groups(p);
      q["axis"] = int_param(0);
      q["tiled"] = bool_param(true);
      give(eq, 0, emit("psum_scatter", {pad_axis(flat(g, type(g).num_elements()), 0, 0, shard * size - type(g).num_elements())}, q));
    } else {
      // replica_sharded_slice: one_hot(rank in group) [G, 1] times g [1, chunk] is the padded flat tensor.
      const std::int64_t chunk = type(g).shape[0];
      ValueId rank = emit("axis_index", {}, {{"axes", p.at("axes")}});
      if (p.contains("groups")) {
        // The rank of axis index i in its group (groups list their members in rank order).
        std::vector<std::int32_t> rank_of(static_cast<std::size_t>(size * std::get<Groups>(p.at("groups")).size()));
        for (const auto& group : std::get<Groups>(p.at("groups"))) {
          for (std::size_t k = 0; k < group.size(); ++k) rank_of[static_cast<std::size_t>(group[k])] = static_cast<std::int32_t>(k);
        }
        rank = emit("take", {b_.constant(Array::from_vector(rank_of)), rank});
      }
      const ValueId hot = emit("reshape", {emit("one_hot", {rank}, {{"num_classes", int_param(size)}, {"dtype", Param{dt}}})},
                               {{"shape", ints_param({size, 1})}});
      ValueId placed = flat(emit("multiply", {hot, emit("reshape", {g}, {{"shape", ints_param({1, chunk})}})}), size * chunk);
      if (size * chunk != n) {
        placed = emit("slice", {placed}, {{"start", ints_param({0})}, {"limit", ints_param({n})}, {"step", ints_param({1})}});
      }
      give(eq, 0, emit("reshape", {placed}, {{"shape", ints_param(x.shape)}}));
    }
  }

  // v with `before` zeros ahead of it and `after` behind it along axis d (concatenate).
  ValueId pad_axis(ValueId v, std::size_t d, std::int64_t before, std::int64_t after) {
    std::vector<ValueId> parts;
    for (const std::int64_t n : {before, std::int64_t{-1}, after}) {
      if (n == -1) {
        parts.push_back(v);
      } else if (n > 0) {
        ValueType zero = type(v);
        zero.shape[d] = n;
        parts.push_back(zeros(zero));
      }
    }
    return parts.size() == 1 ? v : emit("concatenate", parts, {{"axis", int_param(static_cast<std::int64_t>(d))}});
  }

  const Program& p_;
  Builder& b_;
  std::map<ValueId, ValueId> map_;  // old value -> its forward value in the new program
  std::map<ValueId, ValueId> ct_;   // old value -> its cotangent so far, in the new program
  std::size_t index_ = 0;           // the equation being transposed (its source is the backward's)
  std::map<std::int64_t, std::vector<std::size_t>> regions_;  // checkpoint region -> its equations, in order
  std::set<std::int64_t> recomputed_;                         // the regions recompute() has emitted again
};

}  // namespace

Program vjp_program(const Program& program, const std::vector<int>& wrt) {
  for (int k : wrt) {
    if (k < 0 || static_cast<std::size_t>(k) >= program.inputs.size()) {
      throw InvalidArgument("vjp: input " + std::to_string(k) + " does not exist (the program has " +
                            std::to_string(program.inputs.size()) + ")");
    }
  }
  Builder b(program.mesh, program.rules);
  Transposer t(program, b);
  t.forward();
  std::vector<ValueId> outputs;
  for (ValueId id : program.outputs) outputs.push_back(t.mapped(id));
  for (ValueId id : program.outputs) t.seed(id, b.input(program.types[id]));
  t.backward();
  for (int k : wrt) outputs.push_back(t.cotangent(program.inputs[static_cast<std::size_t>(k)]));
  b.set_outputs(outputs);
  return b.build();
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
    const std::vector<ValueId> outs = into.emit(eq.op, ins, eq.params, eq.source);
    for (std::size_t k = 0; k < outs.size(); ++k) map[eq.outputs[k]] = outs[k];
  }
  std::vector<ValueId> outputs;
  for (ValueId id : inlined.outputs) outputs.push_back(map.at(id));
  return outputs;
}

}  // namespace weft::program
