"""Lowering: a recorded popxl graph as a C++ program (weft._weft.ProgramBuilder over the mesh ('replica', R)).

The graph's ops are the program layer's (its names and parameters); what the graph holds as Python objects
(streams, buffers, variables, groupings) becomes names and index lists the program's equations carry. A
`call[graph=g]` equation is lowered by emitting g's equations in its place (its inputs bound to the caller's
values), a `program[...]` equation (a grad graph's, transforms/autodiff.py) by inlining its program.

`subgraph_program(graph, replicas)` lowers a subgraph on its own, for popxl.transforms.autodiff: its inputs
the graph's inputs, its outputs the graph's outputs. There each all-gather is followed by a custom_vjp_call
(weft.custom_vjp's equation) whose rule is PopXL's: replicated_all_gather's gradient is this replica's own
slice of the cotangent (PopART's grad of ReplicatedAllGather is a *local* reduce-scatter), not the program
layer's psum_scatter (JAX's all_gather rule), which sums the group's cotangents first.
"""
import numpy as _np

from weft import _weft as _ext

_EFFECT_HANDLE = {"host_load": ("stream", "streams"), "host_store": ("stream", "streams"),
                  "remote_load": ("buffer", "buffers"), "remote_store": ("buffer", "buffers"),
                  "variable_read": ("variable", "variables"), "variable_update": ("variable", "variables")}
EFFECTS = frozenset(_EFFECT_HANDLE)
_COLLECTIVES = {"psum", "pmean", "pmax", "pmin", "pprod", "all_gather", "gather_shards", "replicated_reduce_scatter",
                "replica_sharded_slice", "all_reduce_identical_inputs", "all_reduce_identical_grad_inputs"}
_ARRAY_OPS = {"add", "subtract", "multiply", "divide", "negative", "matmul"}
_GRAPH_OPS = {"call", "program"}
SUPPORTED = frozenset(_EFFECT_HANDLE) | _COLLECTIVES | _ARRAY_OPS | _GRAPH_OPS


def all_equations(graph):
    """The graph's equations and, in place of each call, the called graph's (recursively)."""
    for eq in graph.equations:
        if eq.op == "call":
            yield from all_equations(eq.params["graph"])
        else:
            yield eq


class Handles:
    """The handles a program names, each under the user's name (made unique) of its popxl object."""

    def __init__(self):
        self.by_kind = {"streams": {}, "buffers": {}, "variables": {}}
        self._names = {}

    def name(self, kind, obj):
        known = self._names.get(id(obj))
        if known is not None:
            return known
        base = getattr(obj, "_name", None) or kind[:-1]
        name, k = base, 1
        while name in self.by_kind[kind]:
            name, k = f"{base}_{k}", k + 1
        self.by_kind[kind][name] = obj._weft
        self._names[id(obj)] = name
        return name


def _groups_param(groups):
    return ("groups", [[int(m) for m in g] for g in groups.groups])


def _params(eq, handles):
    """The program layer's (name, kind, value) parameters of a recorded equation."""
    p, params = eq.params, []
    if eq.op in _EFFECT_HANDLE:
        key, kind = _EFFECT_HANDLE[eq.op]
        params.append((key, handles.name(kind, p[key])))
        if "shape" in p:
            params += [("shape", [int(d) for d in p["shape"]]), ("dtype", _np.dtype(p["dtype"]))]
    elif eq.op in _COLLECTIVES:
        params.append(("axes", ["replica"]))
        if p.get("groups") is not None:
            params.append(_groups_param(p["groups"]))
        if eq.op == "all_gather":
            params += [("axis", int(p["axis"])), ("tiled", bool(p["tiled"]))]
        if eq.op == "gather_shards":
            params.append(("shape", [int(d) for d in p["shape"]]))
        if eq.op == "replicated_reduce_scatter":
            params.append(("op", str(p["reduce"])))
    return params


class _Lowering:
    def __init__(self, replicas, handles, for_vjp):
        self.mesh = [("replica", int(replicas))]
        self.builder = _ext.ProgramBuilder(self.mesh)
        self.handles, self.for_vjp = handles, for_vjp

    def graph(self, graph, ids):
        """Emits `graph`'s constants and equations; `ids` maps its values to the builder's (inputs given)."""
        for value, data in graph.constants.items():
            ids[value] = self.builder.constant(_np.ascontiguousarray(data) if _np.ndim(data) else _np.array(data))[0]
        for eq in graph.equations:
            ins = [ids[v] for v in eq.inputs]
            if eq.op == "call":
                called = eq.params["graph"]
                inner = {t._value: i for t, i in zip(called._inputs, ins)}
                self.graph(called, inner)
                outs = [inner[t._value] for t in called._outputs]
            elif eq.op == "program":
                outs = [ident for ident, _ in self.builder.inline(eq.params["program"], ins)]
            else:
                outs = self._equation(eq, ins)
            ids.update(zip(eq.outputs, outs))

    def _equation(self, eq, ins):
        outs = self.builder.emit(eq.op, ins, _params(eq, self.handles), eq.where)
        if self.for_vjp and eq.op in ("all_gather", "gather_shards"):
            outs = self._local_slice_gradient(eq, ins[0], outs[0])
        idents = []
        for value, (ident, typ) in zip(eq.outputs, outs):
            if _np.dtype(typ[0]) != value.dtype:  # the graph's own dtype rule (popxl's) decides the stored type
                ident = self.builder.emit("astype", [ident], [("dtype", value.dtype)], eq.where)[0][0]
            idents.append(ident)
        return idents

    def _local_slice_gradient(self, eq, x, out):
        """custom_vjp_call on the gather's output: the identity, whose VJP is PopXL's (the local slice)."""
        rule = _local_slice_rule(self.mesh, eq, tuple(out[1]))
        params = [("rule", rule), ("primals", 1), ("outputs", 1),
                  ("name", "popxl.ops.collectives.replicated_all_gather")]
        return self.builder.emit("custom_vjp_call", [x, out[0]], params, eq.where)


_RULES = {}  # (mesh, op, params, output type) -> registered rule number (rules live for the process)


def _local_slice_rule(mesh, eq, out_type):
    """The registered bwd program g -> this replica's slice of g for a gather equation."""
    p = eq.params
    members = tuple(tuple(int(m) for m in g) for g in p["groups"].groups)
    x_shape = eq.inputs[0].shape
    key = (tuple(mesh), eq.op, members, p.get("axis"), p.get("tiled"), x_shape, out_type)
    if key in _RULES:
        return _RULES[key]
    b = _ext.ProgramBuilder(list(mesh))
    dtype, shape, varying = out_type
    g = b.input(dtype, list(shape), list(varying))
    size = len(members[0])
    if eq.op == "all_gather":
        # The group axis first (G, *x.shape): row k of it, flattened, is member k's chunk.
        axis = int(p["axis"])
        split = list(x_shape[:axis]) + [size] + list(x_shape[axis:])  # tiled: axis `axis` split as (G, n)
        g = b.emit("reshape", [g], [("shape", split)], "")[0][0]
        if axis:
            perm = [axis] + [k for k in range(len(split)) if k != axis]
            g = b.emit("transpose", [g], [("perm", perm)], "")[0][0]
    else:
        n = int(_np.prod(shape, dtype=_np.int64))
        g = b.emit("reshape", [g], [("shape", [n])], "")[0][0]
        if x_shape[0] * size != n:  # the shards' padding: zeros
            pad = b.constant(_np.zeros(x_shape[0] * size - n, _np.dtype(dtype)))[0]
            g = b.emit("concatenate", [g, pad], [("axis", 0)], "")[0][0]
    params = [("axes", ["replica"]), ("groups", [list(m) for m in members])]
    g = b.emit("replica_sharded_slice", [g], params, "")[0][0]
    g = b.emit("reshape", [g], [("shape", list(x_shape))], "")[0][0]
    b.set_outputs([g])
    _RULES[key] = _ext.register_custom_vjp(b.build(), "popxl.ops.collectives.replicated_all_gather")
    return _RULES[key]


def lower(graph, replicas):
    """(weft._weft.Program, handles by kind) for the main graph over `replicas` replicas."""
    lowering = _Lowering(replicas, Handles(), for_vjp=False)
    lowering.graph(graph, {})
    lowering.builder.set_outputs([])
    return lowering.builder.build(), lowering.handles.by_kind


def subgraph_program(graph, replicas):
    """A subgraph as a program from its inputs to its outputs, for differentiation (see the module's text)."""
    lowering = _Lowering(replicas, Handles(), for_vjp=True)
    ids = {t._value: lowering.builder.input(t._value.dtype, list(t._value.shape), []) for t in graph._inputs}
    lowering.graph(graph, ids)
    lowering.builder.set_outputs([ids[t._value] for t in graph._outputs])
    return lowering.builder.build()
