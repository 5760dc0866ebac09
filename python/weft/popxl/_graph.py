"""What `with ir.main_graph:` records: a graph of typed values and equations `outs = op[params](ins)`.

PopXL builds a graph that the device runs; weft.popxl records the same program as a list of equations, in
program order (PopXL's `popxl.in_sequence()` order, which weft always keeps), over SSA values with a shape
and a dtype. The op names are the C++ program layer's (src/program: host_load, host_store, remote_load,
remote_store, variable_read, variable_update, add, psum, ...) where one applies, so that the graph can be
lowered to a C++ program; the few PopXL collectives that layer has no op for keep weft's Replica names
(gather_shards, replicated_reduce_scatter, replica_sharded_slice). A Session runs the equations on every
replica (_session.py).

A `Tensor` is the user's handle: it names the value it holds now. In-place ops (`ops.add_`) record a new
value and move the handle to it; a variable's handle reads the variable on first use (`variable_read`) and
writes it back after each in-place op (`variable_update`).
"""
import traceback as _traceback

import numpy as _np

from . import dtypes as _dtypes

_PACKAGE_DIR = __file__.rsplit("/", 1)[0]


def _user_line():
    """'file:line' of the innermost caller outside weft.popxl (where the user recorded the op)."""
    for frame in reversed(_traceback.extract_stack()):
        if not frame.filename.startswith(_PACKAGE_DIR):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


class Value:
    """One SSA value of a graph: its id, shape and dtype (numpy)."""

    __slots__ = ("id", "shape", "dtype")

    def __init__(self, id, shape, dtype):
        self.id, self.shape, self.dtype = id, tuple(int(d) for d in shape), _np.dtype(dtype)

    def type_text(self):
        return f"{_SHORT.get(self.dtype.name, self.dtype.name)}[{','.join(str(d) for d in self.shape)}]"

    def __repr__(self):
        return f"%{self.id}"


_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "int8": "i8", "int32": "i32", "int64": "i64",
          "uint8": "u8", "bool": "bool"}


class Equation:
    """`outputs = op[params](inputs)`, recorded at `where` (the user's file:line)."""

    __slots__ = ("op", "params", "inputs", "outputs", "where")

    def __init__(self, op, params, inputs, outputs, where):
        self.op, self.params, self.inputs, self.outputs, self.where = op, params, inputs, outputs, where

    def text(self):
        params = ", ".join(f"{k}={_param_text(v)}" for k, v in sorted(self.params.items()))
        outs = " ".join(f"{v}:{v.type_text()}" for v in self.outputs)
        call = f"{self.op}[{params}]" if params else self.op
        ins = " ".join(repr(v) for v in self.inputs)
        return f"{outs + ' = ' if outs else ''}{call} {ins}".rstrip()


def _param_text(value):
    if hasattr(value, "num_equations") and hasattr(value, "input_types"):  # a weft program (a grad graph's)
        return f"<program of {value.num_equations} equations>"
    if hasattr(value, "_graph_name"):
        return value._graph_name()
    if isinstance(value, _np.dtype):
        return _SHORT.get(value.name, value.name)
    if hasattr(value, "groups") and hasattr(value, "assignment"):  # weft ReplicaGroups
        return repr(tuple(tuple(g) for g in value.groups))
    return repr(value)


class Graph:
    """A graph of an Ir: its constants (value -> data, JAX's constvars) and equations in program order. A
    subgraph (ir.create_graph, _subgraph.py) also has inputs (popxl.graph_input) and outputs
    (popxl.graph_output): Tensors of it, which ops.call binds to the caller's tensors."""

    def __init__(self, ir, name, subgraph=False):
        self.ir, self.name = ir, name
        self.constants = {}  # Value -> numpy data
        self.equations = []
        self.is_subgraph = subgraph
        self._inputs, self._outputs = [], []  # Tensors (a subgraph's)
        self._values = 0

    inputs = property(lambda self: tuple(self._inputs), doc="The graph's inputs (Tensors), in call order.")
    outputs = property(lambda self: tuple(self._outputs), doc="The graph's outputs (Tensors), in call order.")

    # ---- recording ---------------------------------------------------------------------------------------
    def _new_value(self, shape, dtype):
        value = Value(self._values, shape, dtype)
        self._values += 1
        return value

    def _record(self, op, params, inputs, out_types=()):
        """Appends `op[params](inputs)`; returns its output Values (one per (shape, dtype) in out_types)."""
        outputs = [self._new_value(shape, dtype) for shape, dtype in out_types]
        self.equations.append(Equation(op, dict(params), list(inputs), outputs, _user_line()))
        return outputs

    def _constant(self, data):
        value = self._new_value(data.shape, data.dtype)
        self.constants[value] = data
        return value

    # ---- `with graph:` -----------------------------------------------------------------------------------
    def __enter__(self):
        _STACK.append(self)
        return self

    def __exit__(self, *exc):
        _STACK.pop()
        return False

    def _graph_name(self):
        return f"graph {self.name!r}"

    def __str__(self):
        """The graph as text, one equation a line (the program layer's jaxpr-like spelling); a subgraph's
        header lists its inputs and outputs."""
        header = f"graph {self.name}"
        if self.is_subgraph:
            ins = ", ".join(f"{t._value}:{t._value.type_text()}" for t in self._inputs)
            header += f"({ins}) -> ({', '.join(repr(t._value) for t in self._outputs)})"
        lines = [header + " {"]
        for value, data in self.constants.items():
            lines.append(f"  {value}:{value.type_text()} = constant {_np.array2string(data.ravel(), threshold=8)}")
        lines += [f"  {eq.text()}" for eq in self.equations]
        return "\n".join(lines + ["}"])

    def __repr__(self):
        return f"Graph({self.name!r}, {len(self.equations)} equations)"


_STACK = []  # the graphs entered with `with graph:`, innermost last


def gcg(op="popxl"):
    """The current graph (popxl.gcg()); `op` names the caller in the error when there is none."""
    if not _STACK:
        raise RuntimeError(f"{op}: no current graph: record inside `with ir.main_graph:` (weft.popxl records ops "
                           "and creates variables in the graph being built)")
    return _STACK[-1]


class in_sequence:
    """popxl.in_sequence(): ops run in the order they are recorded. weft's graphs always run in program order,
    so this only checks that it is used as a context manager (or decorator) inside a graph."""

    def __init__(self, enabled=True):
        self.enabled = enabled

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapped


class Tensor:
    """A tensor of a graph (popxl.Tensor): shape, dtype (a popxl dtype), name, and the value it holds now.
    `meta_shape` is the whole tensor's shape when this is one replica's shard of it (PopXL's meta-shape)."""

    def __init__(self, graph, value, name=None, meta_shape=()):
        self._graph, self._value = graph, value
        self._name = name or f"t{value.id}"
        self._meta_shape = tuple(meta_shape)

    # ---- PopXL's properties ------------------------------------------------------------------------------
    shape = property(lambda self: self._value.shape)
    dtype = property(lambda self: _dtypes.dtype.as_dtype(self._value.dtype))
    name = property(lambda self: self._name)
    id = property(lambda self: self._name)
    meta_shape = property(lambda self: self._meta_shape)
    rank = property(lambda self: len(self.shape))
    nelms = property(lambda self: int(_np.prod(self.shape, dtype=_np.int64)))
    ir = property(lambda self: self._graph.ir)
    graph = property(lambda self: self._graph)

    def _current(self, op):
        """The value this handle holds, for use as an input of `op` in the current graph."""
        graph = gcg(op)
        if graph is not self._graph:
            raise ValueError(f"{op}: tensor {self._name!r} belongs to graph {self._graph.name!r}, not to the graph "
                             f"being built ({graph.name!r})")
        return self._value

    def _rebind(self, value):
        """After an in-place op: the handle holds `value` from now on."""
        self._value = value

    # ---- operators (popxl.Tensor's: + - * / @ and their in-place forms) -----------------------------------
    def __add__(self, other):
        from . import ops
        return ops.add(self, other)

    def __radd__(self, other):
        from . import ops
        return ops.add(other, self)

    def __iadd__(self, other):
        from . import ops
        return ops.add_(self, other)

    def __sub__(self, other):
        from . import ops
        return ops.sub(self, other)

    def __rsub__(self, other):
        from . import ops
        return ops.sub(other, self)

    def __isub__(self, other):
        from . import ops
        return ops.sub_(self, other)

    def __mul__(self, other):
        from . import ops
        return ops.mul(self, other)

    def __rmul__(self, other):
        from . import ops
        return ops.mul(other, self)

    def __imul__(self, other):
        from . import ops
        return ops.mul_(self, other)

    def __truediv__(self, other):
        from . import ops
        return ops.div(self, other)

    def __matmul__(self, other):
        from . import ops
        return ops.matmul(self, other)

    def __neg__(self):
        from . import ops
        return ops.negate(self)

    def __repr__(self):
        return f"Tensor[{self._name} {self.dtype.name} {self.shape}]"

    __hash__ = object.__hash__


class Constant(Tensor):
    """popxl.constant: a tensor whose data is part of the graph."""

