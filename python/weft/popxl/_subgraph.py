"""PopXL's subgraphs: ir.create_graph, popxl.graph_input / graph_output, ops.call / ops.call_with_info.

    def linear(x, w, b):
        return x @ w + b
    graph = ir.create_graph(linear, x, w_spec, b)   # x: a Tensor, w_spec: a popxl.TensorSpec: graph inputs
    with ir.main_graph:
        (y,) = ops.call(graph, x, w, b)             # the subgraph's outputs, in the caller's graph

`create_graph` records `fn` into a Graph of its own (subgraph=True): each Tensor or TensorSpec argument
becomes a graph input of its shape and dtype (named after fn's parameter), other arguments are passed as they
are, and fn's returned tensors become the graph's outputs (after any popxl.graph_output fn marked). As in
PopXL, a subgraph sees only its own tensors: a tensor or variable of the main graph used inside it is an
error naming it (pass it in as an input). `ops.call` records one `call[graph=...]` equation; lowering
(_lower.py) emits the subgraph's equations in its place, so a call costs what its ops cost.
"""
import inspect as _inspect

import numpy as _np

from . import dtypes as _dtypes
from ._graph import _STACK, Graph, Tensor, gcg


class TensorSpec:
    """popxl.TensorSpec(shape, dtype, meta_shape=()): the type of a graph input create_graph makes."""

    def __init__(self, shape, dtype, meta_shape=()):
        self.shape, self.dtype, self.meta_shape = tuple(shape), _dtypes.dtype.as_dtype(dtype), tuple(meta_shape)

    def __repr__(self):
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype.name}, meta_shape={self.meta_shape})"


def _subgraph(op):
    graph = gcg(op)
    if not graph.is_subgraph:
        raise ValueError(f"{op}: the current graph is {graph.name!r}, the main graph; graph inputs and outputs belong "
                         "to subgraphs (record them inside the function given to ir.create_graph)")
    return graph


def graph_input(shape, dtype, name=None, by_ref=False, meta_shape=None):
    """popxl.graph_input: a new input of the subgraph being created (the next one in call order)."""
    op = "popxl.graph_input"
    graph = _subgraph(op)
    if by_ref:
        raise NotImplementedError(f"{op}: by_ref=True (an input the subgraph modifies in the caller) is not "
                                  "supported by weft.popxl: return the new value as an output instead")
    value = graph._new_value(tuple(shape), _dtypes.as_numpy(dtype))
    tensor = Tensor(graph, value, name or f"input{len(graph._inputs)}", meta_shape or ())
    graph._inputs.append(tensor)
    return tensor


def graph_output(t):
    """popxl.graph_output: t (a tensor of the subgraph being created) becomes its next output."""
    op = "popxl.graph_output"
    graph = _subgraph(op)
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {t!r} is not a popxl.Tensor")
    value = t._current(op)
    graph._outputs.append(Tensor(graph, value, t.name, t.meta_shape))  # the value it holds now


def _as_input(arg, name):
    """A graph input for a Tensor or TensorSpec argument of create_graph; anything else as it is."""
    if isinstance(arg, (Tensor, TensorSpec)):
        return graph_input(arg.shape, arg.dtype, name, meta_shape=arg.meta_shape)
    return arg


_POSITIONAL = (_inspect.Parameter.POSITIONAL_ONLY, _inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _parameter_names(fn, args, kwargs):
    """fn's parameter name for each positional argument (PopXL names the inputs after them), else None."""
    try:
        signature = _inspect.signature(fn)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [None] * len(args)
    names = []
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is _inspect.Parameter.VAR_POSITIONAL:
            names += [f"{name}{k}" for k in range(len(value))]
        elif kind in _POSITIONAL and name not in kwargs:
            names.append(name)
    return (names + [None] * len(args))[:len(args)]


def _returned_tensors(out, op):
    if out is None:
        return []
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    for item in items:
        if not isinstance(item, Tensor):
            raise TypeError(f"{op}: the function returned {type(item).__name__}; a subgraph's function returns a "
                            "popxl.Tensor, a tuple of them, or None (outputs marked with popxl.graph_output)")
    return items


def create_graph(ir, fn, *args, **kwargs):
    """ir.create_graph(fn, *args, **kwargs): fn recorded into a new subgraph of `ir` (see the module's text)."""
    op = "popxl.Ir.create_graph"
    if not callable(fn):
        raise TypeError(f"{op}: {fn!r} is not callable (the function whose ops make the subgraph)")
    base = getattr(fn, "__name__", type(fn).__name__)
    ir._graph_count += 1
    graph = Graph(ir, f"{base}_subgraph({ir._graph_count})", subgraph=True)
    names = _parameter_names(fn, args, kwargs)
    with graph:
        call_args = [_as_input(a, n) for a, n in zip(args, names)]
        call_kwargs = {k: _as_input(v, k) for k, v in kwargs.items()}
        for t in _returned_tensors(fn(*call_args, **call_kwargs), op):
            graph_output(t)
    return graph


class CallSiteInfo:
    """popxl.ops.call_with_info's result: one call of `called_graph` from `graph` (the caller), with the
    caller's tensors bound to the called graph's inputs (`inputs`) and made from its outputs (`outputs`)."""

    def __init__(self, graph, called_graph, inputs, outputs):
        self.graph, self.called_graph = graph, called_graph
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)

    def graph_to_parent(self, t):
        """The caller's tensor for `t`, an input or output of the called graph."""
        for inner, outer in zip(self.called_graph._inputs, self.inputs):
            if inner is t or inner._value is t._value:
                return outer
        for inner, outer in zip(self.called_graph._outputs, self.outputs):
            if inner is t or inner._value is t._value:
                return outer
        raise ValueError(f"CallSiteInfo.graph_to_parent: {t!r} is neither an input nor an output of the called graph "
                         f"{self.called_graph.name!r}")

    def parent_to_graph(self, t):
        """The called graph's input bound to `t`, a tensor of the caller."""
        for inner, outer in zip(self.called_graph._inputs, self.inputs):
            if outer is t:
                return inner
        raise ValueError(f"CallSiteInfo.parent_to_graph: {t!r} is not an input of this call of "
                         f"{self.called_graph.name!r}")

    def parent_input(self, index):
        return self.inputs[index]

    def parent_output(self, index):
        return self.outputs[index]

    def __repr__(self):
        return f"CallSiteInfo({self.called_graph.name!r} called from {self.graph.name!r})"


def _bind_inputs(graph, inputs, inputs_dict, op):
    """The caller's tensor for each input of `graph`, in order: positional ones first, then inputs_dict's."""
    if len(inputs) > len(graph._inputs):
        raise ValueError(f"{op}: {len(inputs)} inputs given, graph {graph.name!r} has {len(graph._inputs)}")
    bound = list(inputs) + [None] * (len(graph._inputs) - len(inputs))
    for inner, outer in dict(inputs_dict or {}).items():
        index = next((k for k, t in enumerate(graph._inputs) if t is inner), None)
        if index is None:
            raise ValueError(f"{op}: inputs_dict key {inner!r} is not an input of graph {graph.name!r}")
        if bound[index] is not None:
            raise ValueError(f"{op}: input {inner.name!r} of graph {graph.name!r} is given twice (positionally and "
                             "in inputs_dict)")
        bound[index] = outer
    missing = [t.name for t, b in zip(graph._inputs, bound) if b is None]
    if missing:
        raise ValueError(f"{op}: graph {graph.name!r} needs inputs {missing} too (every graph input is bound, "
                         "positionally or in inputs_dict)")
    return bound


def _caller_tensor(x, inner, op):
    """x (a tensor of the caller, or data for a constant) for graph input `inner`: its shape and dtype checked."""
    from .ops import _tensor
    if not isinstance(x, Tensor):
        x = _tensor(_np.asarray(x, dtype=inner._value.dtype), op)
    value = x._current(op)
    if value.shape != inner._value.shape or value.dtype != inner._value.dtype:
        raise ValueError(f"{op}: input {inner.name!r} of graph {inner.graph.name!r} is "
                         f"{inner._value.dtype}{list(inner._value.shape)} but the tensor given, {x.name!r}, is "
                         f"{value.dtype}{list(value.shape)}; they must be the same")
    return x, value


def call_with_info(graph, *inputs, inputs_dict=None):
    """popxl.ops.call_with_info: calls `graph` from the current graph; its CallSiteInfo."""
    op = "popxl.ops.call"
    if not isinstance(graph, Graph):
        raise TypeError(f"{op}: {graph!r} is not a popxl.Graph (ir.create_graph makes one)")
    parent = gcg(op)
    if not graph.is_subgraph:
        raise ValueError(f"{op}: graph {graph.name!r} is the main graph; only subgraphs (ir.create_graph) are called")
    if graph.ir is not parent.ir:
        raise ValueError(f"{op}: graph {graph.name!r} belongs to another popxl.Ir")
    if graph in _STACK:
        raise ValueError(f"{op}: graph {graph.name!r} is still being recorded; a graph cannot call itself")
    tensors, values = [], []
    for inner, outer in zip(graph._inputs, _bind_inputs(graph, inputs, inputs_dict, op)):
        tensor, value = _caller_tensor(outer, inner, op)
        tensors.append(tensor)
        values.append(value)
    outs = parent._record("call", {"graph": graph}, values, [(t._value.shape, t._value.dtype) for t in graph._outputs])
    outputs = [Tensor(parent, v, meta_shape=t.meta_shape) for v, t in zip(outs, graph._outputs)]
    return CallSiteInfo(parent, graph, tensors, outputs)


def call(graph, *inputs, inputs_dict=None):
    """popxl.ops.call: calls `graph`; the tuple of its outputs in the current graph."""
    return call_with_info(graph, *inputs, inputs_dict=inputs_dict).outputs
