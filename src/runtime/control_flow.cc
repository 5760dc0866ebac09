// weft/control_flow.hpp: lax's control flow from C++. A call inside a trace traces its branches or body in
// traces nested in it (ProgramTrace(outer, name): the values they close over are captured as their trailing
// inputs) and records one cond / while_loop / scan equation (src/program/ops/control.cc holds their type
// rules and runs them). Outside any trace the whole call is traced as a function of its arrays and run.
//
// C++ traces follow pmap's rule set (no shard_map from C++), where JAX keeps no varying types: a carry or a
// branch output that varies over a mesh axis on one side only is made to vary on both (pvary, no data moved),
// as weft/_control_flow.py does for Python's pmap.
#include "weft/control_flow.hpp"

#include <algorithm>
#include <span>
#include <memory>
#include <string>
#include <utility>

#include "array/trace_hook.hpp"
#include "weft/error.hpp"
#include "weft/jit.hpp"
#include "weft/program.hpp"

namespace weft {
namespace {

using Arrays = std::vector<Array>;
using Call = std::function<Arrays(const Arrays&)>;

Arrays concat(Arrays a, const Arrays& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The call outside any trace: traced as a function of `inputs` (concrete) into a program, then run.
Arrays run_eagerly(const std::string& name, const Arrays& inputs, const Call& call) {
  std::vector<ValueType> types;
  for (const Array& a : inputs) types.push_back(ValueType{a.dtype(), a.shape(), {}});
  const Program program = detail::trace_program(
      [&](Replica*, std::span<const Array> in) { return call(Arrays(in.begin(), in.end())); }, types, Mesh(), false,
      name);
  return run_program(program, inputs);
}

// `x` made to vary over the axes of `varying` it does not (recorded in x's trace).
Array vary(ProgramTrace& trace, const Array& x, const std::vector<std::string>& varying) {
  const std::vector<std::string>& has = trace.type(x).varying;
  std::vector<std::string> missing;
  for (const std::string& axis : varying) {
    if (std::find(has.begin(), has.end(), axis) == has.end()) missing.push_back(axis);
  }
  if (missing.empty()) return x;
  return trace.record("pvary", {x}, {{"axes", ProgramParam{std::move(missing)}}}).at(0);
}

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

// A function traced in a trace nested in `outer`: its program, the values of the traces around it that it
// closed over (its trailing inputs) and its outputs' types. `targets`, when given, are the varying axes its
// first outputs are made to vary over (a loop's carry).
struct Body {
  Program program;
  Arrays captured;
  std::vector<ValueType> outs;
};

Body trace_body(ProgramTrace& outer, const std::string& name, const std::vector<ValueType>& types, const Call& fn,
                const std::vector<ValueType>* targets = nullptr) {
  ProgramTrace trace(outer, name);
  Arrays ins;
  for (const ValueType& type : types) ins.push_back(trace.input(type));
  Arrays outs = fn(ins);
  if (targets != nullptr) {
    for (std::size_t k = 0; k < std::min(outs.size(), targets->size()); ++k) {
      outs[k] = vary(trace, trace.value(outs[k]), (*targets)[k].varying);
    }
  }
  Body body{trace.finish(outs), trace.captured(), {}};
  body.outs = body.program.output_types();
  return body;
}

ProgramParam programs(std::vector<Program> ps) {
  SubPrograms subs;
  for (Program& p : ps) subs.push_back(std::make_shared<const Program>(std::move(p)));
  return ProgramParam{std::move(subs)};
}

// The carry types a loop body is traced with until they stay put: each init's, varying over the axes its body
// output varies over too. `trace_with(carry types)` traces the body (and a loop's test), returning the body.
template <class TraceWith>
std::vector<ValueType> settle_carry(std::vector<ValueType> carry, const TraceWith& trace_with) {
  for (int pass = 0; pass < 3; ++pass) {
    const Body body = trace_with(carry);
    bool changed = false;
    for (std::size_t k = 0; k < std::min(carry.size(), body.outs.size()); ++k) {
      std::vector<std::string> varying = joined(carry[k].varying, body.outs[k].varying);
      if (varying != carry[k].varying) {
        carry[k].varying = std::move(varying);
        changed = true;
      }
    }
    if (!changed) break;
  }
  return carry;
}

// A captured value's identity: its trace and value id (two Arrays of one value compare equal here).
std::pair<const void*, int> identity(const Array& a) {
  return {detail::TraceAccess::trace(a), detail::TraceAccess::value_id(a)};
}

// `body` (a branch) as a program taking the operands (`num_operands` of `all_types`), then every captured
// value of `captured` (the union over the branches), its outputs made to vary as `outs` says.
Program rewrap(const Body& body, const std::vector<ValueType>& all_types, std::size_t num_operands,
               const Arrays& captured, const std::vector<ValueType>& outs, const Mesh& mesh) {
  ProgramBuilder builder(mesh);
  std::vector<int> ids;
  for (const ValueType& type : all_types) ids.push_back(builder.input(type));
  std::vector<int> takes(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(num_operands));
  for (const Array& c : body.captured) {
    const auto at = std::find_if(captured.begin(), captured.end(),
                                 [&](const Array& u) { return identity(u) == identity(c); });
    takes.push_back(ids[num_operands + static_cast<std::size_t>(at - captured.begin())]);
  }
  std::vector<int> results = builder.inline_program(body.program, takes);
  for (std::size_t k = 0; k < std::min(results.size(), outs.size()); ++k) {
    std::vector<std::string> missing;
    for (const std::string& axis : outs[k].varying) {
      const auto& has = builder.type(results[k]).varying;
      if (std::find(has.begin(), has.end(), axis) == has.end()) missing.push_back(axis);
    }
    if (!missing.empty()) results[k] = builder.emit("pvary", {results[k]}, {{"axes", ProgramParam{missing}}}).at(0);
  }
  builder.set_outputs(results);
  return builder.build();
}

Arrays switch_traced(ProgramTrace& outer, const Array& index, const std::vector<BranchFn>& branches,
                     const Arrays& operands) {
  Arrays values;
  std::vector<ValueType> types;
  for (const Array& a : operands) {
    values.push_back(outer.value(a));
    types.push_back(outer.type(values.back()));
  }
  std::vector<Body> bodies;
  for (std::size_t b = 0; b < branches.size(); ++b) {
    bodies.push_back(trace_body(outer, "branch " + std::to_string(b), types, branches[b]));
  }
  // Every branch's outputs vary over the axes any branch's do (the type rule checks the rest), and every
  // branch takes the operands, then every value any branch closed over.
  std::vector<ValueType> outs = bodies[0].outs;
  Arrays captured;
  for (const Body& body : bodies) {
    for (std::size_t k = 0; k < std::min(outs.size(), body.outs.size()); ++k) {
      outs[k].varying = joined(outs[k].varying, body.outs[k].varying);
    }
    for (const Array& c : body.captured) {
      if (std::none_of(captured.begin(), captured.end(), [&](const Array& u) { return identity(u) == identity(c); })) {
        captured.push_back(c);
      }
    }
  }
  std::vector<ValueType> all_types = types;
  Arrays captured_values;
  for (const Array& c : captured) {
    captured_values.push_back(outer.value(c));
    all_types.push_back(outer.type(captured_values.back()));
  }
  std::vector<Program> wrapped;
  for (const Body& body : bodies) {
    wrapped.push_back(rewrap(body, all_types, values.size(), captured, outs, outer.mesh()));
  }
  Arrays ins{outer.value(index)};
  if (ins[0].dtype() != DType::i32) ins[0] = ins[0].astype(DType::i32);
  ins = concat(concat(ins, values), captured_values);
  return outer.record("cond", ins, {{"branches", programs(std::move(wrapped))}});
}

std::vector<ValueType> concat_types(std::vector<ValueType> a, const std::vector<ValueType>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

std::vector<Array> switch_index(const Array& index, const std::vector<BranchFn>& branches,
                                const std::vector<Array>& operands) {
  if (branches.empty()) throw InvalidArgument("weft::switch_index: no branches (an empty branch sequence)");
  if (!index.shape().empty() || !is_integer(index.dtype())) {
    throw InvalidArgument("weft::switch_index: the branch index must be an integer scalar, not " +
                          std::string(dtype_name(index.dtype())) + " of rank " + std::to_string(index.shape().size()));
  }
  ProgramTrace* outer = detail::current_program_trace();
  if (outer == nullptr) {
    return run_eagerly("switch_index", concat({index}, operands), [&](const Arrays& in) {
      return switch_index(in[0], branches, Arrays(in.begin() + 1, in.end()));
    });
  }
  return switch_traced(*outer, index, branches, operands);
}

std::vector<Array> cond(const Array& pred, const BranchFn& true_fun, const BranchFn& false_fun,
                        const std::vector<Array>& operands) {
  if (!pred.shape().empty()) {
    throw InvalidArgument("weft::cond: the predicate must be a scalar, not of rank " +
                          std::to_string(pred.shape().size()));
  }
  ProgramTrace* outer = detail::current_program_trace();
  if (outer == nullptr) {
    return run_eagerly("cond", concat({pred}, operands), [&](const Arrays& in) {
      return cond(in[0], true_fun, false_fun, Arrays(in.begin() + 1, in.end()));
    });
  }
  // lax.cond: a number predicate is compared with 0; branch 0 runs for false.
  const Array p = outer->value(pred);
  const Array index = (p.dtype() == DType::boolean ? p : not_equal(p, Array::scalar(0, p.dtype()))).astype(DType::i32);
  return switch_traced(*outer, index, {false_fun, true_fun}, operands);
}

ScanResult scan(const ScanFn& f, const std::vector<Array>& init, const std::vector<Array>& xs,
                const ScanOptions& options) {
  std::optional<std::int64_t> length = options.length;
  for (const Array& x : xs) {
    if (x.shape().empty()) throw InvalidArgument("weft::scan: an xs is a scalar, with no leading axis to scan over");
    if (length && *length != x.shape()[0]) {
      throw InvalidArgument("weft::scan: length " + std::to_string(*length) +
                            " disagrees with an xs' leading axis of " + std::to_string(x.shape()[0]));
    }
    length = x.shape()[0];
  }
  if (!length) throw InvalidArgument("weft::scan: no xs to scan over and no length given");
  if (options.unroll < 0) throw InvalidArgument("weft::scan: unroll must be non-negative");
  const std::size_t n = init.size();
  ProgramTrace* outer = detail::current_program_trace();
  if (outer == nullptr) {
    Arrays out = run_eagerly("scan", concat(init, xs), [&](const Arrays& in) {
      ScanResult r = scan(f, Arrays(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n)),
                          Arrays(in.begin() + static_cast<std::ptrdiff_t>(n), in.end()), options);
      return concat(r.carry, r.ys);
    });
    return {Arrays(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n)),
            Arrays(out.begin() + static_cast<std::ptrdiff_t>(n), out.end())};
  }
  Arrays carry, x_values;
  std::vector<ValueType> carry_types, x_types;
  for (const Array& c : init) {
    carry.push_back(outer->value(c));
    carry_types.push_back(outer->type(carry.back()));
  }
  for (const Array& x : xs) {
    x_values.push_back(outer->value(x));
    ValueType t = outer->type(x_values.back());
    t.shape.erase(t.shape.begin());
    x_types.push_back(std::move(t));
  }
  const Call step = [&](const Arrays& in) {
    ScanResult r = f(Arrays(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n)),
                     Arrays(in.begin() + static_cast<std::ptrdiff_t>(n), in.end()));
    if (r.carry.size() != n) {
      throw InvalidArgument("weft::scan: the body returns a carry of " + std::to_string(r.carry.size()) +
                            " value(s) for an init of " + std::to_string(n) + " (the carry keeps its structure)");
    }
    return concat(r.carry, r.ys);
  };
  carry_types = settle_carry(carry_types, [&](const std::vector<ValueType>& types) {
    return trace_body(*outer, "scan body", concat_types(types, x_types), step, &types);
  });
  Body body = trace_body(*outer, "scan body", concat_types(carry_types, x_types), step, &carry_types);
  for (std::size_t k = 0; k < n; ++k) carry[k] = vary(*outer, carry[k], carry_types[k].varying);
  const auto num_consts = static_cast<std::int64_t>(body.captured.size());
  Arrays ins = concat(concat(carry, x_values), body.captured);
  Arrays out = outer->record("scan", ins,
                             {{"body", programs({std::move(body.program)})},
                              {"length", ProgramParam{*length}},
                              {"reverse", ProgramParam{options.reverse}},
                              {"num_carry", ProgramParam{static_cast<std::int64_t>(n)}},
                              {"num_consts", ProgramParam{num_consts}},
                              {"unroll", ProgramParam{options.unroll}}});
  return {Arrays(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n)),
          Arrays(out.begin() + static_cast<std::ptrdiff_t>(n), out.end())};
}

std::vector<Array> while_loop(const std::function<Array(const std::vector<Array>&)>& cond_fun, const BranchFn& body_fun,
                              const std::vector<Array>& init) {
  ProgramTrace* outer = detail::current_program_trace();
  if (outer == nullptr) {
    return run_eagerly("while_loop", init, [&](const Arrays& in) { return while_loop(cond_fun, body_fun, in); });
  }
  Arrays carry;
  std::vector<ValueType> carry_types;
  for (const Array& c : init) {
    carry.push_back(outer->value(c));
    carry_types.push_back(outer->type(carry.back()));
  }
  const Call test = [&](const Arrays& in) { return Arrays{cond_fun(in)}; };
  carry_types = settle_carry(carry_types, [&](const std::vector<ValueType>& types) {
    return trace_body(*outer, "while_loop body", types, body_fun, &types);
  });
  Body body = trace_body(*outer, "while_loop body", carry_types, body_fun, &carry_types);
  Body check = trace_body(*outer, "while_loop cond", carry_types, test);
  for (std::size_t k = 0; k < carry.size(); ++k) carry[k] = vary(*outer, carry[k], carry_types[k].varying);
  const auto cond_nconsts = static_cast<std::int64_t>(check.captured.size());
  const auto body_nconsts = static_cast<std::int64_t>(body.captured.size());
  return outer->record("while_loop", concat(concat(carry, check.captured), body.captured),
                       {{"cond", programs({std::move(check.program)})},
                        {"body", programs({std::move(body.program)})},
                        {"cond_nconsts", ProgramParam{cond_nconsts}},
                        {"body_nconsts", ProgramParam{body_nconsts}}});
}

std::vector<Array> fori_loop(std::int64_t lower, std::int64_t upper, const ForiFn& body_fun,
                             const std::vector<Array>& init) {
  // A scan over no xs whose carry is (i, the carry), as JAX's fori_loop with static bounds.
  ScanResult r = scan(
      [&](const Arrays& carry, const Arrays&) {
        const Array& i = carry[0];
        return ScanResult{concat({i + 1.0}, body_fun(i, Arrays(carry.begin() + 1, carry.end()))), {}};
      },
      concat({Array::scalar(static_cast<double>(lower), DType::i32)}, init), {},
      {.length = std::max<std::int64_t>(upper - lower, 0)});
  return Arrays(r.carry.begin() + 1, r.carry.end());
}

std::vector<Array> fori_loop(const Array& lower, const Array& upper, const ForiFn& body_fun,
                             const std::vector<Array>& init) {
  for (const Array* b : {&lower, &upper}) {
    if (!b->shape().empty() || b->dtype() != DType::i32) {
      throw InvalidArgument("weft::fori_loop: the bounds must be int32 scalars, got " +
                            std::string(dtype_name(b->dtype())) + " of rank " + std::to_string(b->shape().size()));
    }
  }
  if (!lower.traced() && !upper.traced()) {  // concrete: the scan, as JAX chooses for static bounds
    return fori_loop(lower.item<std::int32_t>(), upper.item<std::int32_t>(), body_fun, init);
  }
  Arrays out = while_loop([](const Arrays& c) { return c[0] < c[1]; },
                          [&](const Arrays& c) {
                            return concat({c[0] + 1.0, c[1]}, body_fun(c[0], Arrays(c.begin() + 2, c.end())));
                          },
                          concat({lower, upper}, init));
  return Arrays(out.begin() + 2, out.end());
}

}  // namespace weft
