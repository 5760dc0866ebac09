"""popxl's state creators: variable, constant, remote_buffer, replica_sharded_buffer, remote_variable,
remote_replica_sharded_variable, replica_sharded_variable, h2d_stream, d2h_stream.

Each one creates the state on the current graph's Ir, i.e. on its weft.Session (its groupings, retrieval
modes, host data shapes, remote buffers and shard layouts are weft.Session's, docs/popxl.md), and returns a
PopXL-style handle that ops record and a popxl.Session resolves (`handle._weft`). Arguments keep PopXL's
names, order and defaults.
"""
import numpy as _np

from . import dtypes as _dtypes
from ._graph import Constant, Tensor, gcg


def _host_data(data, dtype, downcast):
    """PopXL's host data: `dtype` (a popxl or numpy dtype) if given, else the data's own dtype with 64-bit
    types made 32-bit when `downcast` (popxl.variable's default)."""
    if dtype is not None:
        return _np.asarray(data, dtype=_dtypes.as_numpy(dtype))
    array = _np.asarray(data)
    if downcast and array.dtype in (_np.dtype(_np.float64), _np.dtype(_np.int64)):
        array = array.astype(_np.float32 if array.dtype.kind == "f" else _np.int32)
    _dtypes.dtype.as_dtype(array.dtype).as_numpy()  # a dtype weft holds, else an error naming it
    return array


class Variable(Tensor):
    """popxl.Variable: a tensor whose value lives in the session between runs. Reading it in the graph
    records `variable_read`; an in-place op on it records `variable_update`. A remote variable lives in a
    remote buffer (use ops.remote_load); the first element of replica_sharded_variable's pair is a handle for
    get/set only (compute with the shard)."""

    def __init__(self, graph, name, shape, dtype, kind="onchip", retrieval_mode="one_per_group",
                 replica_grouping=None, shape_on_host=None, meta_shape=()):
        super().__init__(graph, None, name, meta_shape)
        self._shape, self._dtype = tuple(shape), _np.dtype(dtype)
        self._kind, self._retrieval_mode, self._grouping = kind, retrieval_mode, replica_grouping
        self._shape_on_host = tuple(shape_on_host if shape_on_host is not None else shape)
        self._variable = self  # the variable whose value this handle reads (a shard: the sharded variable)

    shape = property(lambda self: self._shape)
    dtype = property(lambda self: _dtypes.dtype.as_dtype(self._dtype))
    shape_on_host = property(lambda self: self._shape_on_host)
    retrieval_mode = property(lambda self: self._retrieval_mode)
    replica_grouping = property(lambda self: self._grouping)

    def _current(self, op):
        if self._kind == "remote":
            raise ValueError(f"{op}: {self._name!r} is a remote variable: it lives in its remote buffer; use "
                             "ops.remote_load(buffer, offset) for its value on the replica")
        if self._kind == "sharded_handle":
            raise ValueError(f"{op}: {self._name!r} is the whole replica-sharded variable, a handle for "
                             "get_tensor_data/write_variable_data only; compute with its shard (the second element "
                             "of popxl.replica_sharded_variable's result)")
        graph = gcg(op)
        if graph.is_subgraph:
            raise ValueError(f"{op}: variable {self._name!r} is used inside subgraph {graph.name!r}; as in PopXL, a "
                             "subgraph reads no variable of the main graph: make it a popxl.graph_input and pass the "
                             "variable in the call (ops.call(graph, ..., inputs_dict={input: variable}))")
        if self._value is None or self._graph is not graph:
            if graph.ir is not self._graph.ir:
                raise ValueError(f"{op}: variable {self._name!r} belongs to another popxl.Ir")
            (self._value,) = graph._record("variable_read", {"variable": self._variable, "shape": self._shape,
                                                             "dtype": self._dtype}, [], [(self._shape, self._dtype)])
            self._graph = graph
        return self._value

    def _rebind(self, value):
        super()._rebind(value)
        self._graph._record("variable_update", {"variable": self._variable}, [value])

    def _graph_name(self):
        return f"variable {self._name!r}"

    def __repr__(self):
        return f"Variable[{self._name} {self.dtype.name} {self.shape}]"


class RemoteBuffer:
    """popxl.RemoteBuffer: `entries` slots of `tensor_shape` per replica; `meta_shape` is the whole tensor's
    shape when the slots hold shards."""

    def __init__(self, name):
        self._name = name

    tensor_shape = property(lambda self: tuple(self._weft.shape))
    shape = tensor_shape
    tensor_dtype = property(lambda self: _dtypes.dtype.as_dtype(self._weft.dtype))
    dtype = tensor_dtype
    entries = property(lambda self: self._weft.entries)
    meta_shape = property(lambda self: tuple(self._weft.meta_shape))

    def _graph_name(self):
        return f"buffer {self._name!r}"

    def __repr__(self):
        return f"RemoteBuffer({self._name}, shape={self.tensor_shape}, dtype={self.tensor_dtype.name}, " \
               f"entries={self.entries})"


class _Stream:
    def __init__(self, name):
        self._name = name

    shape = property(lambda self: tuple(self._weft.shape))
    dtype = property(lambda self: _dtypes.dtype.as_dtype(self._weft.dtype))
    name = property(lambda self: self._name)

    def _graph_name(self):
        return f"stream {self._name!r}"

    def __repr__(self):
        return f"{type(self).__name__}({self._name}, shape={self.shape}, dtype={self.dtype.name})"


class HostToDeviceStream(_Stream):
    """popxl.HostToDeviceStream: ops.host_load reads it; session.run's inputs fill it."""


class DeviceToHostStream(_Stream):
    """popxl.DeviceToHostStream: ops.host_store writes it; session.run's outputs are keyed by it."""


def _name(name, kind, graph):
    return name or f"{kind}{len(graph.ir._log)}"


# ---- creators ------------------------------------------------------------------------------------------
def variable(data, dtype=None, name=None, downcast=True, replica_grouping=None, retrieval_mode=None,
             log2_scale=None, nan_on_overflow=None):
    """popxl.variable: an on-device variable, its host data grouped as `replica_grouping` says."""
    _no_fp8("popxl.variable", log2_scale, nan_on_overflow)
    graph = gcg("popxl.variable")
    host = _host_data(data, dtype, downcast)
    name = _name(name, "variable", graph)
    mode = retrieval_mode or "one_per_group"
    handle = Variable(graph, name, (), host.dtype, "onchip", mode, replica_grouping)
    graph.ir._make(handle, lambda s: s.variable(host, None, name, False, replica_grouping=replica_grouping,
                                                retrieval_mode=mode))
    handle._shape, handle._shape_on_host = tuple(handle._weft.shape), tuple(handle._weft.shape_on_host)
    return handle


def constant(data, dtype=None, name=None, downcast=True, log2_scale=None, nan_on_overflow=None):
    """popxl.constant: data that is part of the graph (the same on every replica)."""
    _no_fp8("popxl.constant", log2_scale, nan_on_overflow)
    graph = gcg("popxl.constant")
    host = _host_data(data, dtype, downcast).copy()
    host.setflags(write=False)
    return Constant(graph, graph._constant(host), name)


def remote_buffer(tensor_shape, tensor_dtype, entries=1):
    """popxl.remote_buffer: `entries` slots of `tensor_shape` on every replica."""
    graph = gcg("popxl.remote_buffer")
    if not isinstance(entries, int) or entries < 1:
        raise ValueError(f"popxl.remote_buffer: entries={entries!r}: a remote buffer needs at least 1 entry")
    handle = RemoteBuffer(_name(None, "buffer", graph))
    shape, dtype = tuple(tensor_shape), _dtypes.as_numpy(tensor_dtype)
    return graph.ir._make(handle, lambda s: s.remote_buffer(shape, dtype, entries))


def replica_sharded_buffer(shape, dtype, replica_grouping=None, shard_over=None, entries=1):
    """popxl.replica_sharded_buffer: `shape` includes the group dimension when there are several groups;
    each slot holds one replica's shard (1-d, ceil(elements / shard_over))."""
    graph = gcg("popxl.replica_sharded_buffer")
    handle = RemoteBuffer(_name(None, "buffer", graph))
    shape, dtype = tuple(shape), _dtypes.as_numpy(dtype)
    return graph.ir._make(handle, lambda s: s.replica_sharded_buffer(shape, dtype, replica_grouping, shard_over,
                                                                     entries))


def remote_variable(data, remote_buffer, offset=0, dtype=None, name=None, downcast=True, replica_grouping=None,
                    retrieval_mode="one_per_group", log2_scale=None, nan_on_overflow=None):
    """popxl.remote_variable: a variable stored in entry `offset` of `remote_buffer`."""
    _no_fp8("popxl.remote_variable", log2_scale, nan_on_overflow)
    graph = gcg("popxl.remote_variable")
    host = _host_data(data, dtype, downcast)
    name = _name(name, "remote_variable", graph)
    mode = retrieval_mode or "one_per_group"
    handle = Variable(graph, name, (), host.dtype, "remote", mode, replica_grouping)
    graph.ir._make(handle, lambda s: s.remote_variable(host, remote_buffer._weft, int(offset), None, name, False,
                                                       replica_grouping=replica_grouping, retrieval_mode=mode))
    handle._shape, handle._shape_on_host = tuple(handle._weft.shape), tuple(handle._weft.shape_on_host)
    return handle


def remote_replica_sharded_variable(data, remote_buffer, offset=0, dtype=None, name=None, downcast=True,
                                    replica_grouping=None, retrieval_mode="one_per_group", log2_scale=None,
                                    nan_on_overflow=None):
    """popxl.remote_replica_sharded_variable: a variable whose replicas' shards are stored in entry `offset`
    of a replica-sharded buffer."""
    _no_fp8("popxl.remote_replica_sharded_variable", log2_scale, nan_on_overflow)
    graph = gcg("popxl.remote_replica_sharded_variable")
    host = _host_data(data, dtype, downcast)
    name = _name(name, "remote_variable", graph)
    mode = retrieval_mode or "one_per_group"
    handle = Variable(graph, name, (), host.dtype, "remote", mode, replica_grouping)
    graph.ir._make(handle, lambda s: s.remote_replica_sharded_variable(
        host, remote_buffer._weft, int(offset), None, name, False, replica_grouping=replica_grouping,
        retrieval_mode=mode))
    handle._shape, handle._shape_on_host = tuple(handle._weft.shape), tuple(handle._weft.shape_on_host)
    return handle


def replica_sharded_variable(data, dtype=None, name=None, downcast=True, replica_grouping=None, shard_over=None,
                             retrieval_mode="one_per_group", log2_scale=None, nan_on_overflow=None):
    """popxl.replica_sharded_variable: (the whole variable, a handle for get/set; this replica's shard, to
    compute with: 1-d, ceil(elements / shard_over), meta_shape the whole shape)."""
    _no_fp8("popxl.replica_sharded_variable", log2_scale, nan_on_overflow)
    graph = gcg("popxl.replica_sharded_variable")
    host = _host_data(data, dtype, downcast)
    name = _name(name, "sharded_variable", graph)
    mode = retrieval_mode or "one_per_group"
    full = Variable(graph, name, (), host.dtype, "sharded_handle", mode, replica_grouping)
    graph.ir._make(full, lambda s: s.replica_sharded_variable(host, None, name, False,
                                                              replica_grouping=replica_grouping,
                                                              shard_over=shard_over, retrieval_mode=mode))
    full._shape, full._shape_on_host = tuple(full._weft.shape), tuple(full._weft.shape_on_host)
    group_size = graph.ir.replication_factor if replica_grouping is None else replica_grouping.group_size
    over = group_size if shard_over is None else int(shard_over)
    elements = int(_np.prod(full._shape, dtype=_np.int64))
    shard = Variable(graph, name + "_shard", (-(-elements // over),), host.dtype, "onchip", mode, replica_grouping,
                     meta_shape=full._shape)
    shard._variable = full
    return full, shard


def h2d_stream(shape, dtype, name=None):
    """popxl.h2d_stream: host data to the replicas (ops.host_load)."""
    graph = gcg("popxl.h2d_stream")
    handle = HostToDeviceStream(_name(name, "h2d_stream", graph))
    shape, np_dtype = tuple(shape), _dtypes.as_numpy(dtype)
    return graph.ir._make(handle, lambda s: s.h2d_stream(shape, np_dtype, handle._name))


def d2h_stream(shape, dtype, name=None):
    """popxl.d2h_stream: replica data to the host (ops.host_store); session.run's outputs."""
    graph = gcg("popxl.d2h_stream")
    handle = DeviceToHostStream(_name(name, "d2h_stream", graph))
    shape, np_dtype = tuple(shape), _dtypes.as_numpy(dtype)
    return graph.ir._make(handle, lambda s: s.d2h_stream(shape, np_dtype, handle._name))


def _no_fp8(op, log2_scale, nan_on_overflow):
    if log2_scale is not None or nan_on_overflow is not None:
        raise NotImplementedError(f"{op}: log2_scale / nan_on_overflow (PopXL's float8 options) are not supported "
                                  "by weft, which has no float8 dtypes")
