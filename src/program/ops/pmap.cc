// The pmap primitive (JAX's xla_pmap): a per-replica program run on every device of a pmap axis, as one equation
// of a program that runs outside any replica, so weft.jit, weft.grad and the other transformations compose
// around a pmapped function (jit(pmap(f)), grad(lambda x: sum(pmap(f)(x)))). The body is the program weft.pmap
// traces per replica (a mesh of one axis, its collectives over that axis); the executor runs it through the
// runtime's pmap engine (SubProgramRunner::run_mapped), every replica in C++.
//
//   pmap[body in_axes out_axes]  ins: the operands; in_axes[k] the axis operand k is split along, -1 for an
//                                operand every replica gets whole (JAX's None); out_axes[k] where output k's
//                                replica axis goes (-1: the output is replica 0's, JAX's None, for a value the
//                                body makes equal on every replica). Over a body mesh of several axes (a
//                                shard_map's, whose blocks the caller's program cuts and joins), a mapped
//                                operand's and result's leading axes are the mesh's (in_axes / out_axes 0).
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
  std::int64_t size;                // the replicas: the product of the body mesh's axis sizes
  std::vector<std::int64_t> sizes;  // the body mesh's axis sizes, outermost first
  std::vector<std::int64_t> in_axes, out_axes;
  std::size_t rank() const { return sizes.size(); }
};

PmapLayout layout_of(const Params& params, std::size_t inputs, const Mesh& outer) {
  const SubPrograms& subs = param<SubPrograms>(params, "body");
  if (subs.size() != 1 || subs[0] == nullptr) throw RuleError("pmap: parameter 'body' must hold one program");
  const program::Program& body = subs[0]->impl().program;
  if (outer.num_axes() > 0) {
    throw RuleError("pmap: a pmap equation runs outside any replica; inside a pmap or shard_map, nest the axes "
                    "instead (pmap(pmap(f)), a mesh of several axes)");
  }
  if (body.mesh.num_axes() < 1) throw RuleError("pmap: the body's mesh has no axis to map over");
  PmapLayout l{subs[0].get(), 1, {}, param<std::vector<std::int64_t>>(params, "in_axes"),
               param<std::vector<std::int64_t>>(params, "out_axes")};
  for (const MeshAxis& a : body.mesh.axes()) l.sizes.push_back(a.size);
  for (const std::int64_t n : l.sizes) l.size *= n;
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
    if (axis >= 0 && l.rank() > 1) {
      // A mesh of several axes (shard_map's, nested pmaps'): the operand's leading axes are the mesh's.
      const bool fits = axis == 0 && shape.size() >= l.rank() &&
                        std::equal(l.sizes.begin(), l.sizes.end(), shape.begin());
      if (!fits) {
        throw RuleError("pmap: operand " + std::to_string(k) + " is " + type_text(ins[k]) + "; over a mesh of " +
                        shape_str(l.sizes) + " a mapped operand's leading axes are the mesh's (in_axes 0)");
      }
      shape.erase(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(l.rank()));
    } else if (axis >= 0) {
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
    if (axis >= 0 && l.rank() > 1) {
      if (axis != 0) throw RuleError("pmap: over a mesh of several axes, out_axes are 0 (the mesh's axes lead)");
      t.shape.insert(t.shape.begin(), l.sizes.begin(), l.sizes.end());
    } else if (axis >= 0) {
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
  const std::vector<MeshAxis>& mesh = body.mesh.axes();
  const bool shard_map = body.rules == CollectiveRules::shard_map;
  // Positions (in the mesh, hence in a stacked value's leading axes) of the axes a type does not vary over.
  const auto invariant_axes = [&](const ValueType& t) {
    std::vector<std::int64_t> axes;
    for (std::size_t a = 0; a < mesh.size(); ++a) {
      if (std::find(t.varying.begin(), t.varying.end(), mesh[a].name) == t.varying.end()) {
        axes.push_back(static_cast<std::int64_t>(a));
      }
    }
    return axes;
  };
  std::vector<ValueId> ins = c.ins;
  for (std::size_t k = 0; k < c.cts.size(); ++k) {
    ValueId ct = c.cts[k];
    // Under shard_map's rules an output that does not vary over some mesh axes is one value there (its caller
    // took one device's copy): its cotangent is the sum of its copies' cotangents, the same on each device.
    if (const auto axes = invariant_axes(body.types[body.outputs[k]]); shard_map && !axes.empty() && out_axes[k] >= 0) {
      const std::vector<std::int64_t> shape = c.e.type(ct).shape;
      ct = c.e.broadcast_to(c.e.emit(Prim::sum, {ct}, {{"axes", ints_param(axes)}, {"keepdims", bool_param(true)}}),
                            shape);
    }
    ins.push_back(ct);
  }
  std::vector<std::int64_t> vin = in_axes;
  vin.insert(vin.end(), out_axes.begin(), out_axes.end());
  std::vector<std::int64_t> vout(body.outputs.size(), 0);  // the primal outputs (unused: dead code)
  for (const int k : wrt) vout.push_back(in_axes[static_cast<std::size_t>(k)] >= 0 ? in_axes[static_cast<std::size_t>(k)] : 0);
  const weft::Program backward = runnable(vjp_program(body, wrt));
  const std::vector<ValueType> backward_types = backward.output_types();
  const std::vector<ValueId> outs = c.e.emit_many(Prim::pmap, ins, with_body(c.params, backward, vin, vout));
  for (std::size_t j = 0; j < wrt.size(); ++j) {
    const auto k = static_cast<std::size_t>(wrt[j]);
    ValueId ct = outs[body.outputs.size() + j];
    if (in_axes[k] < 0) {
      // An operand every replica got whole: its cotangent is the sum of the replicas' (pmap's rules); under
      // shard_map's, a cotangent typed invariant over an axis is already that sum on every device (the
      // transpose of the pvary that met the operand psums it): one device's copy along those axes.
      const std::vector<std::int64_t> same =
          shard_map ? invariant_axes(backward_types[body.outputs.size() + j]) : std::vector<std::int64_t>{};
      std::vector<std::int64_t> summed;
      for (std::int64_t a = 0; a < static_cast<std::int64_t>(mesh.size()); ++a) {
        if (std::find(same.begin(), same.end(), a) == same.end()) summed.push_back(a);
      }
      std::vector<std::int64_t> shape = c.e.type(ct).shape;
      if (!same.empty()) {
        std::vector<std::int64_t> start(shape.size(), 0), limit = shape, step(shape.size(), 1);
        for (const std::int64_t a : same) limit[static_cast<std::size_t>(a)] = 1;
        ct = c.e.emit(Prim::slice, {ct}, {{"start", ints_param(start)}, {"limit", ints_param(limit)},
                                          {"step", ints_param(step)}});
      }
      ct = c.e.emit(Prim::sum, {ct}, {{"axes", ints_param(iota_axes(mesh.size()))}});
    }
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
  const auto rank = static_cast<std::int64_t>(body.mesh.axes().size());
  std::vector<std::int64_t> bin = in_axes, bout = out_axes;
  std::vector<ValueId> ins = c.ins;
  // (an operand every replica gets whole keeps -1: each replica gets the whole batch)
  for (std::size_t k = 0; k < bin.size(); ++k) {
    if (!c.batched[k] || bin[k] < 0) continue;
    if (rank == 1) {
      ++bin[k];
    } else {
      ins[k] = c.e.moveaxis(ins[k], 0, rank);  // the mesh's axes lead: the batch axis goes behind them
    }
  }
  for (std::size_t k = 0; k < bout.size(); ++k) {
    if (batched.out_batched[k] && bout[k] >= 0 && rank == 1) ++bout[k];
  }
  std::vector<ValueId> outs =
      c.e.emit_many(Prim::pmap, ins, with_body(c.params, runnable(std::move(batched.program)), bin, bout));
  for (std::size_t k = 0; k < outs.size(); ++k) {
    if (batched.out_batched[k] && bout[k] >= 0 && rank > 1) outs[k] = c.e.moveaxis(outs[k], rank, 0);
  }
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
