"""popxl.transforms.autodiff: the gradient graph of a subgraph, built on weft's program VJP.

    graph = ir.create_graph(linear, x, w)
    grad_info = popxl.transforms.autodiff(graph)              # GradGraphInfo
    with ir.main_graph:
        fwd_info = ops.call_with_info(graph, x, w)
        dx, dw = ops.call(grad_info.graph, dy, inputs_dict=grad_info.inputs_dict(fwd_info))

The forward subgraph is lowered to a program (_lower.subgraph_program) and transposed by
weft._weft.vjp_program, whose rules are the program layer's (docs/autodiff.md), PopXL's collectives
included: all_reduce_identical_inputs <-> all_reduce_identical_grad_inputs (Megatron's f/g),
replicated_reduce_scatter -> gather_shards, replica_sharded_slice -> the chunk placed in zeros, and
replicated_all_gather -> this replica's slice of the cotangent (a custom_vjp_call the lowering adds).

As PopXL's, the gradient graph takes first the cotangents of the forward outputs in `grads_provided` (each an
ExpectedConnection of type FwdGrad) and then forward tensors (type Fwd), and its outputs are the gradients of
`grads_required` (FwdGrad). Unlike PopXL, which makes the forward graph output the activations the gradient
graph needs, weft's gradient graph recomputes the forward pass from the forward graph's inputs: its Fwd
inputs are all the forward graph's inputs, and the forward graph is left unchanged. The recomputation costs
the forward equations the gradients need again (those they do not need are dropped as dead code).
"""
from enum import Enum

import numpy as _np

from weft import _weft as _ext

from .._graph import _STACK, Graph, Tensor
from .._lower import EFFECTS, all_equations, subgraph_program

_OP = "popxl.transforms.autodiff"


class ExpectedConnectionType(Enum):
    """What a gradient graph's input or output stands for: a forward tensor (Fwd) or its gradient (FwdGrad)."""
    Fwd = "Fwd"
    FwdGrad = "FwdGrad"


class ExpectedConnection:
    """One input or output of a gradient graph: `fwd_tensor` (a tensor of the forward graph) and whether it
    is that tensor itself or its gradient (`connection_type`)."""

    def __init__(self, fwd_tensor, connection_type):
        self.fwd_tensor, self.connection_type = fwd_tensor, connection_type

    def __repr__(self):
        return f"ExpectedConnection({self.fwd_tensor.name!r}, {self.connection_type.name})"


class GradGraphInfo:
    """autodiff's result: the gradient graph (`graph`), the graph it differentiates (`forward_graph`), and
    what its inputs and outputs stand for (`expected_inputs`, `expected_outputs`, in order)."""

    def __init__(self, graph, forward_graph, expected_inputs, expected_outputs):
        self.graph, self.forward_graph = graph, forward_graph
        self.expected_inputs, self.expected_outputs = tuple(expected_inputs), tuple(expected_outputs)

    def _check_call(self, call_info, graph, what, method):
        if call_info.called_graph is not graph:
            raise ValueError(f"GradGraphInfo.{method}: the call given calls {call_info.called_graph.name!r}, not the "
                             f"{what} graph {graph.name!r}")

    def inputs_dict(self, fwd_call_info):
        """{gradient graph input: the forward call's tensor} for every Fwd input: ops.call's inputs_dict."""
        self._check_call(fwd_call_info, self.forward_graph, "forward", "inputs_dict")
        return {inner: fwd_call_info.graph_to_parent(c.fwd_tensor)
                for inner, c in zip(self.graph._inputs, self.expected_inputs)
                if c.connection_type is ExpectedConnectionType.Fwd}

    def fwd_graph_ins_to_grad_parent_outs(self, grad_call_info):
        """{forward graph input: its gradient in the gradient graph's caller}."""
        self._check_call(grad_call_info, self.graph, "gradient", "fwd_graph_ins_to_grad_parent_outs")
        return {c.fwd_tensor: out for c, out in zip(self.expected_outputs, grad_call_info.outputs)}

    def fwd_parent_ins_to_grad_parent_outs(self, fwd_call_info, grad_call_info):
        """{the forward call's input tensor: its gradient in the gradient graph's caller}."""
        self._check_call(fwd_call_info, self.forward_graph, "forward", "fwd_parent_ins_to_grad_parent_outs")
        return {fwd_call_info.graph_to_parent(t): g for t, g in self.fwd_graph_ins_to_grad_parent_outs(
            grad_call_info).items()}

    def __repr__(self):
        return (f"GradGraphInfo({self.graph.name!r} of {self.forward_graph.name!r}, "
                f"inputs={list(self.expected_inputs)}, outputs={list(self.expected_outputs)})")


def _check_graph(graph):
    if not isinstance(graph, Graph):
        raise TypeError(f"{_OP}: {graph!r} is not a popxl.Graph (ir.create_graph makes the subgraphs it "
                        "differentiates)")
    if not graph.is_subgraph:
        raise ValueError(f"{_OP}: graph {graph.name!r} is the main graph; autodiff differentiates a subgraph "
                         "(ir.create_graph), whose inputs and outputs say what to differentiate")
    if graph in _STACK:
        raise ValueError(f"{_OP}: graph {graph.name!r} is still being recorded; differentiate it after create_graph")
    if not graph._outputs:
        raise ValueError(f"{_OP}: graph {graph.name!r} has no outputs, so nothing to differentiate")
    for eq in all_equations(graph):
        if eq.op in EFFECTS:
            raise ValueError(f"{_OP}: graph {graph.name!r} has {eq.op} (recorded at {eq.where}); an effect has no "
                             "gradient: differentiate a subgraph of computations and collectives only")


def _find(graph, t, tensors, what, argument):
    """The index of `t` among `tensors` (graph's inputs or outputs), else an error saying why not."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{_OP}: {argument} has {t!r}, not a popxl.Tensor")
    for k, known in enumerate(tensors):
        if known is t or known._value is t._value:
            return k
    if t.graph is not graph:
        raise ValueError(f"{_OP}: {argument} names tensor {t.name!r}, which is not a tensor of graph {graph.name!r} "
                         f"(it belongs to {t.graph.name!r})")
    raise ValueError(f"{_OP}: {argument} names tensor {t.name!r}, which is not {what} of graph {graph.name!r} "
                     "(weft.popxl differentiates the graph's outputs with respect to its inputs)")


def _float(t, argument):
    if t._value.dtype.kind != "f":
        raise ValueError(f"{_OP}: {argument} names tensor {t.name!r} of dtype {t._value.dtype}; only floating-point "
                         "tensors have gradients")
    return t


def _grad_program(graph, provided, required):
    """The program (cotangents of `provided` outputs..., forward inputs...) -> grads of `required` inputs."""
    replicas = graph.ir.replication_factor
    vjp = _ext.vjp_program(subgraph_program(graph, replicas), required)
    b = _ext.ProgramBuilder([("replica", int(replicas))])
    outs = [t._value for t in graph._outputs]
    cts = {k: b.input(outs[k].dtype, list(outs[k].shape), []) for k in provided}
    fwd = [b.input(t._value.dtype, list(t._value.shape), []) for t in graph._inputs]
    seeds = [cts[k] if k in cts else b.constant(_np.zeros(v.shape, v.dtype))[0] for k, v in enumerate(outs)]
    results = b.inline(vjp, fwd + seeds)
    b.set_outputs([ident for ident, _ in results[len(outs):]])
    return b.build()


def _grad_graph(graph, provided, required):
    """The gradient graph: one `program` equation over its inputs (see _grad_program)."""
    grad = Graph(graph.ir, f"{graph.name}_grad", subgraph=True)
    fwd_outs, fwd_ins = graph._outputs, graph._inputs
    for k in provided:
        grad._inputs.append(Tensor(grad, grad._new_value(fwd_outs[k].shape, fwd_outs[k]._value.dtype),
                                   f"{fwd_outs[k].name}_grad"))
    for t in fwd_ins:
        grad._inputs.append(Tensor(grad, grad._new_value(t.shape, t._value.dtype), t.name, t.meta_shape))
    out_types = [(fwd_ins[k].shape, fwd_ins[k]._value.dtype) for k in required]
    outs = grad._record("program", {"program": _grad_program(graph, provided, required), "forward": graph},
                        [t._value for t in grad._inputs], out_types)
    grad._outputs = [Tensor(grad, v, f"{fwd_ins[k].name}_grad", fwd_ins[k].meta_shape) for v, k in zip(outs, required)]
    return grad


def autodiff(graph, grads_provided=None, grads_required=None, called_graphs_grad_info=None,
             return_all_grad_graphs=False):
    """popxl.transforms.autodiff: the GradGraphInfo of `graph`'s gradient graph.

    grads_provided: the forward outputs whose cotangents the gradient graph takes (default: all; the others'
    are zeros). grads_required: the forward inputs whose gradients it returns (default: all the floating-point
    ones). Graphs `graph` calls are differentiated with it (their calls are part of its program), so
    called_graphs_grad_info is not needed and is ignored; return_all_grad_graphs=True returns [info]."""
    del called_graphs_grad_info
    _check_graph(graph)
    outs, ins = graph._outputs, graph._inputs
    if grads_provided is None:
        provided = [k for k, t in enumerate(outs) if t._value.dtype.kind == "f"]
    else:
        provided = sorted({_find(graph, t, outs, "an output", "grads_provided") for t in grads_provided})
    for k in provided:
        _float(outs[k], "grads_provided")
    if grads_required is None:
        required = [k for k, t in enumerate(ins) if t._value.dtype.kind == "f"]
    else:
        required = [_find(graph, t, ins, "an input", "grads_required") for t in grads_required]
    for k in required:
        _float(ins[k], "grads_required")
    grad = _grad_graph(graph, provided, required)
    expected_inputs = ([ExpectedConnection(outs[k], ExpectedConnectionType.FwdGrad) for k in provided]
                       + [ExpectedConnection(t, ExpectedConnectionType.Fwd) for t in ins])
    expected_outputs = [ExpectedConnection(ins[k], ExpectedConnectionType.FwdGrad) for k in required]
    info = GradGraphInfo(grad, graph, expected_inputs, expected_outputs)
    return [info] if return_all_grad_graphs else info
