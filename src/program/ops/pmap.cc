// The pmap primitive (JAX's xla_pmap): a per-replica program run on every device of a pmap axis, as one equation
// of a program that runs outside any replica, so weft.jit, weft.grad and the other transformations compose
// around a pmapped function (jit(pmap(f)), grad(lambda x: sum(pmap(f)(x)))). The body is the program weft.pmap
// traces per replica (a mesh of one axis, its collectives over that axis); the executor runs it through the
// runtime's pmap engine (SubProgramRunner::run_mapped), every replica in C++.
//
//   pmap[body in_axes out_axes]  ins: the operands; in_axes[k] the axis operand k is split along, -1 for an
//                                operand every replica gets whole (JAX's None); out_axes[k] where output k's
//                                replica axis goes (-1: the output is replica 0's, JAX's None, for a value the
//                                body makes equal on every replica).
// Its rules follow JAX's pmap: the JVP is the pmap of the body's JVP, the VJP the pmap of the body's VJP (with
// pmap's collective transposes), an unmapped operand's cotangent summed over the replicas; batching is the pmap
// of the batched body, the batch axis moved past the replica axis.
#include <algorithm>
#include <string>

#include "program/autodiff.hpp"
#include "program/program_impl.hpp"
#include "program/rule_kit.hpp"
#include "program/transforms.hpp"

namespace weft::program {
namespace {

struct PmapLayout {
  const weft::Program* body;
  std::int64_t size;  // the replicas along the pmap axis
  std::vector<std::int64_t> in_axes, out_axes;
};

PmapLayout layout_of(const Params& params, std::size_t inputs, const Mesh& outer) {
  const SubPrograms& subs = param<SubPrograms>(params, "body");
  if (subs.size() != 1 || subs[0] == nullptr) throw RuleError("pmap: parameter 'body' must hold one program");
  const program::Program& body = subs[0]->impl().program;
  if (outer.num_axes() > 0) {
    throw RuleError("pmap: a pmap equation runs outside any replica; inside a pmap or shard_map, nest the axes "
                    "instead (pmap(pmap(f)), a mesh of several axes)");
  }
  if (body.mesh.num_axes() != 1) {
    throw RuleError("pmap: the body's mesh must have one axis (nested pmaps as one equation are not supported "
                    "yet), not " + std::to_string(body.mesh.num_axes()));
  }
  PmapLayout l{subs[0].get(), body.mesh.axes()[0].size, param<std::vector<std::int64_t>>(params, "in_axes"),
               param<std::vector<std::int64_t>>(params, "out_axes")};
  if (l.in_axes.size() != inputs) {
    throw RuleError("pmap: in_axes has " + std::to_string(l.in_axes.size()) + " entries for " +
                    std::to_string(inputs) + " operands");
  }
  if (l.out_axes.size() != body.outputs.size()) {
    throw RuleError("pmap: out_axes has " + std::to_string(l.out_axes.size()) + " entries for the body's " +
                    std::to_string(body.outputs.size()) + " outputs");
  }
  return l;
}

std::vector<ValueType> infer_pmap(const std::vector<ValueType>& ins, const Params& params, const Mesh& mesh) {
  const PmapLayout l = layout_of(params, ins.size(), mesh);
  const program::Program& body = l.body->impl().program;
  if (body.inputs.size() != ins.size()) {
    throw RuleError("pmap: the body takes " + std::to_string(body.inputs.size()) + " inputs, the equation gives " +
                    std::to_string(ins.size()));
  }
  for (std::size_t k = 0; k < ins.size(); ++k) {
    std::vector<std::int64_t> shape = ins[k].shape;
    const std::int64_t axis = l.in_axes[k];
    if (axis >= 0) {
      if (static_cast<std::size_t>(axis) >= shape.size() || shape[static_cast<std::size_t>(axis)] != l.size) {
        throw RuleError("pmap: operand " + std::to_string(k) + " is " + type_text(ins[k]) + ", which has no axis " +
                        std::to_string(axis) + " of the " + std::to_string(l.size) + " replicas");
      }
      shape.erase(shape.begin() + axis);
    } else if (axis != -1) {
      throw RuleError("pmap: in_axes[" + std::to_string(k) + "] = " + std::to_string(axis) + " (an axis, or -1)");
    }
    const ValueType& want = body.types[body.inputs[k]];
    if (want.dtype != ins[k].dtype || want.shape != shape) {
      throw RuleError("pmap: the body takes " + type_text(want) + " as input " + std::to_string(k) +
                      ", the equation gives each replica " + std::string(dtype_name(ins[k].dtype)) + shape_str(shape));
    }
  }
  std::vector<ValueType> outs;
  for (std::size_t k = 0; k < body.outputs.size(); ++k) {
    ValueType t{body.types[body.outputs[k]].dtype, body.types[body.outputs[k]].shape, {}};
    const std::int64_t axis = l.out_axes[k];
    if (axis >= 0) {
      if (static_cast<std::size_t>(axis) > t.shape.size()) {
        throw RuleError("pmap: out_axes[" + std::to_string(k) + "] = " + std::to_string(axis) + " is out of range for " +
                        "an output of rank " + std::to_string(t.shape.size()));
      }
      t.shape.insert(t.shape.begin() + axis, l.size);
    } else if (axis != -1) {
      throw RuleError("pmap: out_axes[" + std::to_string(k) + "] = " + std::to_string(axis) + " (an axis, or -1)");
    }
    outs.push_back(std::move(t));
  }
  return outs;
}

std::vector<Array> run_pmap(const std::vector<Array>& ins, const Params& params, SubProgramRunner& runner) {
  const SubPrograms& subs = param<SubPrograms>(params, "body");
  return runner.run_mapped(*subs[0], ins, param<std::vector<std::int64_t>>(params, "in_axes"),
                           param<std::vector<std::int64_t>>(params, "out_axes"));
}

// ---- rules -----------------------------------------------------------------------------------------------------

Params with_body(const Params& params, weft::Program body, std::vector<std::int64_t> in_axes,
                 std::vector<std::int64_t> out_axes) {
  Params p = params;
  p["body"] = SubPrograms{std::make_shared<const weft::Program>(std::move(body))};
  p["in_axes"] = std::move(in_axes);
  p["out_axes"] = std::move(out_axes);
  return p;
}

const program::Program& body_of(const Params& params) { return param<SubPrograms>(params, "body")[0]->impl().program; }

// The pmap of the body's JVP: tangents mapped as their primals.
std::vector<ValueId> pmap_jvp(JvpContext& c) {
  const program::Program& body = body_of(c.params);
  const auto in_axes = param<std::vector<std::int64_t>>(c.params, "in_axes");
  const auto out_axes = param<std::vector<std::int64_t>>(c.params, "out_axes");
  std::vector<ValueId> ins = c.ins;
  for (std::size_t k = 0; k < c.ins.size(); ++k) ins.push_back(c.tangent(k));
  std::vector<std::int64_t> tin = in_axes, tout = out_axes;
  tin.insert(tin.end(), in_axes.begin(), in_axes.end());
  tout.insert(tout.end(), out_axes.begin(), out_axes.end());
  const std::vector<ValueId> outs =
      c.e.emit_many(Prim::pmap, ins, with_body(c.params, runnable(jvp_program(body)), tin, tout));
  return {outs.begin() + static_cast<std::ptrdiff_t>(c.outs.size()), outs.end()};
}

// The pmap of the body's VJP on (primals, cotangents): a mapped operand's cotangent comes back mapped along its
// axis; an unmapped one's is each replica's own, stacked, then summed over the replicas (JAX's transpose of a
// broadcast operand).
void pmap_vjp(VjpContext& c) {
  const program::Program& body = body_of(c.params);
  const auto in_axes = param<std::vector<std::int64_t>>(c.params, "in_axes");
  const auto out_axes = param<std::vector<std::int64_t>>(c.params, "out_axes");
  std::vector<int> wrt;
  for (std::size_t k = 0; k < c.ins.size(); ++k) {
    if (is_floating(c.in_types[k].dtype)) wrt.push_back(static_cast<int>(k));
  }
  if (wrt.empty()) return;
  for (std::size_t k = 0; k < out_axes.size(); ++k) {
    if (out_axes[k] < 0 && is_floating(c.out_types[k].dtype)) {
      throw RuleError("pmap: no VJP for an output with out_axes None (replica 0's value) yet: map it (out_axes=0) "
                      "and take element 0");
    }
  }
  std::vector<ValueId> ins = c.ins;
  ins.insert(ins.end(), c.cts.begin(), c.cts.end());
  std::vector<std::int64_t> vin = in_axes;
  vin.insert(vin.end(), out_axes.begin(), out_axes.end());
  std::vector<std::int64_t> vout(body.outputs.size(), 0);  // the primal outputs (unused: dead code)
  for (const int k : wrt) vout.push_back(in_axes[static_cast<std::size_t>(k)] >= 0 ? in_axes[static_cast<std::size_t>(k)] : 0);
  const std::vector<ValueId> outs =
      c.e.emit_many(Prim::pmap, ins, with_body(c.params, runnable(vjp_program(body, wrt)), vin, vout));
  for (std::size_t j = 0; j < wrt.size(); ++j) {
    const auto k = static_cast<std::size_t>(wrt[j]);
    ValueId ct = outs[body.outputs.size() + j];
    if (in_axes[k] < 0) ct = c.e.emit(Prim::sum, {ct}, {{"axes", ints_param({0})}});
    c.give(k, ct);
  }
}

// The pmap of the batched body: a batched operand's batch axis (in front) stays in front of each replica's
// slice, the replica axis one further in; batched outputs keep the batch axis in front.
Batched pmap_batch(BatchContext& c) {
  const program::Program& body = body_of(c.params);
  const auto in_axes = param<std::vector<std::int64_t>>(c.params, "in_axes");
  const auto out_axes = param<std::vector<std::int64_t>>(c.params, "out_axes");
  BatchedProgram batched = batch_program(body, c.batched, c.size, c.axis_name);
  std::vector<std::int64_t> bin = in_axes, bout = out_axes;
  // (an operand every replica gets whole keeps -1: each replica gets the whole batch)
  for (std::size_t k = 0; k < bin.size(); ++k) {
    if (c.batched[k] && bin[k] >= 0) ++bin[k];
  }
  for (std::size_t k = 0; k < bout.size(); ++k) {
    if (batched.out_batched[k] && bout[k] >= 0) ++bout[k];
  }
  const std::vector<ValueId> outs =
      c.e.emit_many(Prim::pmap, c.ins, with_body(c.params, runnable(std::move(batched.program)), bin, bout));
  return {outs, batched.out_batched};
}

}  // namespace

void register_pmap_ops(std::vector<OpInfo>& ops) {
  ops.push_back({.id = Prim::pmap,
                 .min_inputs = 0,
                 .max_inputs = -1,
                 .params = {{"body", ParamKind::programs}, {"in_axes", ParamKind::ints}, {"out_axes", ParamKind::ints}},
                 .infer = infer_pmap,
                 .control = run_pmap,
                 .vjp = pmap_vjp,
                 .jvp = pmap_jvp,
                 .batch = pmap_batch});
}

}  // namespace weft::program
