// The VJP transform: the forward program re-emitted, then its equations walked backwards, each one's rule
// emitting the cotangents of its inputs from its outputs' (summed where a value has several uses). Every
// rule is written with the registry's own ops, so the backward program is verified, printed, fused and run
// like any other.
#include "autodiff.hpp"

#include <algorithm>
#include <map>
#include <numeric>
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

  // A reduced cotangent (the result of reducing `in_shape` over `axes`, keepdims or not) broadcast back.
  ValueId unreduce(ValueId g, const std::vector<std::int64_t>& in_shape, const std::vector<bool>& reduced) {
    std::vector<std::int64_t> kept;
    for (std::size_t d = 0; d < in_shape.size(); ++d) kept.push_back(reduced[d] ? 1 : in_shape[d]);
    ValueId r = type(g).shape == kept ? g : emit("reshape", {g}, {{"shape", ints_param(kept)}});
    return emit("broadcast_to", {r}, {{"shape", ints_param(in_shape)}});
  }

  std::vector<bool> reduced_axes(const ValueType& in, const Params& params) const {
    std::vector<bool> reduced(in.shape.size(), !params.contains("axes"));
    if (!params.contains("axes")) return reduced;
    for (std::int64_t a : std::get<std::vector<std::int64_t>>(params.at("axes"))) {
      reduced[static_cast<std::size_t>(a < 0 ? a + static_cast<std::int64_t>(in.shape.size()) : a)] = true;
    }
    return reduced;
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
    if (layer_norm_rule(r) || shape_rule(r)) return;
    if (is_floating(r.dt) && !info->effectful) {
      throw RuleError("no VJP rule for " + op + (info->no_rule.empty() ? " yet" : ": " + info->no_rule));
    }
    if (info->effectful) throw RuleError(op + " is a session effect: it has no VJP");
    // Ops with integer or boolean results (comparisons, argmax, one_hot, axis_index, bitwise): no cotangent.
  }

  // layer_norm's rule (the nn family's, still here until that family has its file; the elementwise family's
  // rules are beside their primitives, ops/elementwise.cc). Returns whether `r`'s op is layer_norm.
  bool layer_norm_rule(const Rule& r) {
    const Equation& eq = r.eq;
    if (eq.op != "layer_norm") return false;
    const auto in = [&](std::size_t k) { return map_.at(eq.inputs[k]); };
    // One fused equation for the three cotangents (it recomputes the rows' statistics from x).
    const std::vector<ValueId> grads =
        b_.emit("layer_norm_vjp", {in(0), in(1), r.g, in(3)}, {}, p_.equations[index_].source);
    give(eq, 0, grads[0]);
    give(eq, 1, grads[1]);
    give(eq, 2, grads[2]);
    return true;
  }

  // Reductions, shape changes, matmul, the softmax family, slices and concatenation. Returns whether `r`'s op is one of them.
  bool shape_rule(const Rule& r) {
    const Equation& eq = r.eq;
    const std::string& op = eq.op;
    const Params& p = eq.params;
    const auto in = [&](std::size_t k) { return map_.at(eq.inputs[k]); };
    const ValueId out = r.out;
    const ValueId g = r.g;
    const DType dt = r.dt;

    if (op == "sum" || op == "mean") {
      const ValueType& x = p_.types[eq.inputs[0]];
      const std::vector<bool> reduced = reduced_axes(x, p);
      ValueId back = unreduce(g, x.shape, reduced);
      if (op == "mean") {
        std::int64_t n = 1;
        for (std::size_t d = 0; d < x.shape.size(); ++d) n *= reduced[d] ? x.shape[d] : 1;
        back = emit("divide", {back, scalar(static_cast<double>(n), type(back).dtype)});
      }
      give(eq, 0, back);
    } else if (op == "max" || op == "min") {
      // The cotangent goes to the elements equal to the result, shared equally between ties (JAX's rule).
      const ValueType& x = p_.types[eq.inputs[0]];
      const std::vector<bool> reduced = reduced_axes(x, p);
      const ValueId hit = emit("astype", {emit("equal", {in(0), unreduce(out, x.shape, reduced)})}, {{"dtype", Param{dt}}});
      Params keep = p;
      keep["keepdims"] = bool_param(true);
      const ValueId count = emit("broadcast_to", {emit("sum", {hit}, keep)}, {{"shape", ints_param(x.shape)}});
      give(eq, 0, emit("divide", {emit("multiply", {unreduce(g, x.shape, reduced), hit}), count}));
    } else if (op == "reshape") {
      give(eq, 0, emit("reshape", {g}, {{"shape", ints_param(p_.types[eq.inputs[0]].shape)}}));
    } else if (op == "transpose") {
      const std::size_t rank = p_.types[eq.inputs[0]].shape.size();
      std::vector<std::int64_t> perm(rank);
      std::iota(perm.rbegin(), perm.rend(), std::int64_t{0});
      if (p.contains("perm")) perm = std::get<std::vector<std::int64_t>>(p.at("perm"));
      std::vector<std::int64_t> inverse(rank);
      for (std::size_t i = 0; i < rank; ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
      give(eq, 0, emit("transpose", {g}, {{"perm", ints_param(inverse)}}));
    } else if (op == "broadcast_to") {
      give(eq, 0, g);  // give() sums the broadcast axes back
    } else if (op == "matmul") {
      transpose_matmul(eq, g);
    } else if (op == "softmax") {
      const Params axis = {{"axes", ints_param({axis_of(eq)})}, {"keepdims", bool_param(true)}};
      const ValueId dot = emit("sum", {emit("multiply", {g, out})}, axis);
      give(eq, 0, emit("multiply", {out, emit("subtract", {g, dot})}));
    } else if (op == "log_softmax") {
      const Params axis = {{"axes", ints_param({axis_of(eq)})}, {"keepdims", bool_param(true)}};
      give(eq, 0, emit("subtract", {g, emit("multiply", {emit("exp", {out}), emit("sum", {g}, axis)})}));
    } else if (op == "logsumexp") {
      const ValueType& x = p_.types[eq.inputs[0]];
      std::vector<bool> reduced(x.shape.size(), false);
      reduced[static_cast<std::size_t>(axis_of(eq))] = true;
      const ValueId soft = emit("exp", {emit("subtract", {in(0), unreduce(out, x.shape, reduced)})});
      give(eq, 0, emit("multiply", {unreduce(g, x.shape, reduced), soft}));
    } else if (op == "concatenate") {
      const std::int64_t axis = std::get<std::int64_t>(p.at("axis"));
      const std::vector<std::int64_t> shape = type(g).shape;
      std::int64_t at = 0;
      for (std::size_t k = 0; k < eq.inputs.size(); ++k) {
        const std::int64_t n = p_.types[eq.inputs[k]].shape[static_cast<std::size_t>(axis)];
        std::vector<std::int64_t> start(shape.size(), 0), limit = shape, step(shape.size(), 1);
        start[static_cast<std::size_t>(axis)] = at;
        limit[static_cast<std::size_t>(axis)] = at + n;
        give(eq, k, emit("slice", {g}, {{"start", ints_param(start)}, {"limit", ints_param(limit)},
                                        {"step", ints_param(step)}}));
        at += n;
      }
    } else if (op == "slice") {
      transpose_slice(eq, g);
    } else if (op == "take") {
      transpose_take(eq, g);
    } else {
      return false;
    }
    return true;
  }

  std::int64_t axis_of(const Equation& eq) const {
    const std::int64_t rank = static_cast<std::int64_t>(p_.types[eq.inputs[0]].shape.size());
    std::int64_t axis = eq.params.contains("axis") ? std::get<std::int64_t>(eq.params.at("axis")) : -1;
    return axis < 0 ? axis + rank : axis;
  }

  // numpy matmul, batched: a (..., m, k) @ b (..., k, n); a 1-D operand is a row / column vector; with
  // transpose_a / transpose_b the operand enters with its last two axes swapped (so its cotangent leaves so).
  void transpose_matmul(const Equation& eq, ValueId g) {
    ValueId a = map_.at(eq.inputs[0]);
    ValueId b = map_.at(eq.inputs[1]);
    const bool ta = eq.params.contains("transpose_a") && std::get<bool>(eq.params.at("transpose_a"));
    const bool tb = eq.params.contains("transpose_b") && std::get<bool>(eq.params.at("transpose_b"));
    if (ta) a = swap_last_two(a);
    if (tb) b = swap_last_two(b);
    const std::vector<std::int64_t> as = type(a).shape, bs = type(b).shape, gs = type(g).shape;
    const bool a_vector = as.size() == 1, b_vector = bs.size() == 1;
    auto reshaped = [&](ValueId v, std::vector<std::int64_t> s) { return emit("reshape", {v}, {{"shape", ints_param(s)}}); };
    if (a_vector) a = reshaped(a, {1, as[0]});
    if (b_vector) b = reshaped(b, {bs[0], 1});
    std::vector<std::int64_t> g2 = gs;
    if (a_vector) g2.insert(g2.end() - (b_vector ? 0 : 1), 1);
    if (b_vector) g2.push_back(1);
    if (g2 != gs) g = reshaped(g, g2);
    // ga = g @ b^T and gb = a^T @ g, the transposes folded into the products.
    ValueId ga = emit("matmul", {g, b}, {{"transpose_b", bool_param(true)}});
    ValueId gb = emit("matmul", {a, g}, {{"transpose_a", bool_param(true)}});
    // Back to the operands' shapes: batch axes broadcast (summed back by give), vectors lose their unit axis.
    if (a_vector) ga = reshaped(emit("sum", {ga}, {{"axes", ints_param(lead_axes(type(ga).shape.size() - 1))}}), as);
    if (b_vector) gb = reshaped(emit("sum", {gb}, {{"axes", ints_param(lead_axes(type(gb).shape.size() - 2))}}), bs);
    if (ta) ga = swap_last_two(ga);
    if (tb) gb = swap_last_two(gb);
    give(eq, 0, ga);
    give(eq, 1, gb);
  }

  // A slice's cotangent is g scattered back to the positions it read, zeros elsewhere: axis by axis, g's
  // elements spread `step` apart (each followed by step - 1 zeros), then padded with zeros before the first
  // position read and after the last. A negative step reads the same positions in reverse order, so g is
  // reversed first (a step -1 slice) and placed as for the positive step from the lowest position read.
  void transpose_slice(const Equation& eq, ValueId g) {
    const auto& start = std::get<std::vector<std::int64_t>>(eq.params.at("start"));
    const auto& step = std::get<std::vector<std::int64_t>>(eq.params.at("step"));
    const ValueType& x = p_.types[eq.inputs[0]];
    const std::vector<std::int64_t> out_shape = type(g).shape;
    if (std::count(out_shape.begin(), out_shape.end(), std::int64_t{0}) > 0) {
      give(eq, 0, zeros(ValueType{type(g).dtype, x.shape, {}}));  // an empty slice read nothing
      return;
    }
    ValueId placed = g;
    for (std::size_t d = 0; d < x.shape.size(); ++d) {
      const std::int64_t m = out_shape[d];
      const std::int64_t s = step[d] > 0 ? step[d] : -step[d];
      const std::int64_t first = step[d] > 0 ? start[d] : start[d] - (m - 1) * s;  // the lowest position read
      if (step[d] < 0) placed = reverse_axis(placed, d);
      placed = spread_axis(placed, d, s, x.shape[d] - first);
      placed = pad_axis(placed, d, first, x.shape[d] - first - type(placed).shape[d]);
    }
    give(eq, 0, placed);
  }

  // v with axis d reversed (the registry's slice with step -1).
  ValueId reverse_axis(ValueId v, std::size_t d) {
    const std::vector<std::int64_t> shape = type(v).shape;
    std::vector<std::int64_t> start(shape.size(), 0), limit = shape, step(shape.size(), 1);
    start[d] = shape[d] - 1;
    limit[d] = -1;
    step[d] = -1;
    return emit("slice", {v}, {{"start", ints_param(start)}, {"limit", ints_param(limit)}, {"step", ints_param(step)}});
  }

  // v's m elements along axis d moved to positions 0, s, 2s, ... with zeros between them, the result cut to
  // at most `room` (the input's length from the first position read: the last element always fits).
  ValueId spread_axis(ValueId v, std::size_t d, std::int64_t s, std::int64_t room) {
    if (s == 1) return v;
    std::vector<std::int64_t> shape = type(v).shape;
    const std::int64_t m = shape[d];
    std::vector<std::int64_t> split = shape;
    split.insert(split.begin() + static_cast<std::ptrdiff_t>(d) + 1, 1);
    ValueType gap{type(v).dtype, split, {}};
    gap.shape[d + 1] = s - 1;
    const ValueId unit = emit("reshape", {v}, {{"shape", ints_param(split)}});
    const ValueId spread = emit("concatenate", {unit, zeros(gap)}, {{"axis", int_param(static_cast<std::int64_t>(d) + 1)}});
    shape[d] = m * s;
    ValueId flat = emit("reshape", {spread}, {{"shape", ints_param(shape)}});
    if (m * s <= room) return flat;
    std::vector<std::int64_t> start(shape.size(), 0), limit = shape, step(shape.size(), 1);
    limit[d] = room;
    return emit("slice", {flat}, {{"start", ints_param(start)}, {"limit", ints_param(limit)}, {"step", ints_param(step)}});
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

  // take's cotangent for x is the scatter-add of g into zeros at the indices (repeated ones summed):
  // one_hot(indices) [K, n] contracted with g [A, K, B] over K, A and B being x's axes before and after the
  // taken one (x flattened without an axis). The indices get none (integers).
  void transpose_take(const Equation& eq, ValueId g) {
    const ValueType& x = p_.types[eq.inputs[0]];
    const ValueType& idx = p_.types[eq.inputs[1]];
    const bool has_axis = eq.params.contains("axis");
    std::int64_t axis = has_axis ? std::get<std::int64_t>(eq.params.at("axis")) : 0;
    if (axis < 0) axis += static_cast<std::int64_t>(x.shape.size());
    const std::vector<std::int64_t> src = has_axis ? x.shape : std::vector<std::int64_t>{x.num_elements()};
    const auto product = [](auto from, auto to) { return std::accumulate(from, to, std::int64_t{1}, std::multiplies<>()); };
    const std::int64_t n = src[static_cast<std::size_t>(axis)];
    const std::int64_t before = product(src.begin(), src.begin() + axis);
    const std::int64_t after = product(src.begin() + axis + 1, src.end());
    const std::int64_t k = idx.num_elements();
    // take counts negative indices from the end; one_hot gives them a zero row, so they are made positive.
    // (In int32 at least: n may not fit an int8 index.)
    ValueId i = map_.at(eq.inputs[1]);
    const DType it = idx.dtype == DType::i64 ? DType::i64 : DType::i32;
    if (idx.dtype != it) i = emit("astype", {i}, {{"dtype", Param{it}}});
    i = emit("where", {emit("less", {i, scalar(0, it)}), emit("add", {i, scalar(static_cast<double>(n), it)}), i});
    const DType dt = type(g).dtype;
    const ValueId hot = emit("reshape", {emit("one_hot", {i}, {{"num_classes", int_param(n)}, {"dtype", Param{dt}}})},
                             {{"shape", ints_param({k, n})}});
    const std::vector<std::int64_t> rows = before == 1 ? std::vector<std::int64_t>{k, after} : std::vector<std::int64_t>{before, k, after};
    const ValueId ct = emit("matmul", {hot, emit("reshape", {g}, {{"shape", ints_param(rows)}})},
                            {{"transpose_a", bool_param(true)}});  // [before,] n, after
    give(eq, 0, emit("reshape", {ct}, {{"shape", ints_param(x.shape)}}));
  }

  ValueId swap_last_two(ValueId v) {
    const std::size_t rank = type(v).shape.size();
    std::vector<std::int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), std::int64_t{0});
    std::swap(perm[rank - 1], perm[rank - 2]);
    return emit("transpose", {v}, {{"perm", ints_param(perm)}});
  }

  static std::vector<std::int64_t> lead_axes(std::size_t n) {
    std::vector<std::int64_t> axes(n);
    std::iota(axes.begin(), axes.end(), std::int64_t{0});
    return axes;
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
