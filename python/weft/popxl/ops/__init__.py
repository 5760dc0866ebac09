"""weft.popxl.ops: PopXL's ops, recorded into the current graph (`with ir.main_graph:`).

    host_load(h2d, name)  host_store(d2h, t)          -> host_load / host_store
    remote_load(buffer, offset, name)                 -> remote_load (offset: an int or an integer scalar tensor)
    remote_store(buffer, offset, t)                   -> remote_store
    add sub mul div (and add_ sub_ mul_ div_, in place), negate, matmul
    call(graph, *inputs, inputs_dict=None), call_with_info(...)   (a subgraph's outputs / its CallSiteInfo)
    collectives.*                                     (ops/collectives.py)

Each call checks its arguments as PopXL does (errors name the op and the rule) and appends one equation
whose op is the C++ program layer's name (_graph.py). PopXL ops weft does not provide raise an
AttributeError naming the op and listing what is here.
"""
import numpy as _np

from .._graph import Tensor, gcg
from .. import _graph
from .._subgraph import CallSiteInfo, call, call_with_info  # noqa: F401  (popxl.ops.call, ...)
from . import collectives  # noqa: F401  (popxl.ops.collectives)


def _tensor(x, op, like=None):
    """x as a Tensor of the current graph: a Python number or array becomes a constant (in `like`'s dtype for
    a number, as PopXL does)."""
    if isinstance(x, Tensor):
        return x
    graph = gcg(op)
    if like is not None and _np.ndim(x) == 0:
        data = _np.asarray(x, dtype=like._current(op).dtype)  # a number takes the tensor's dtype
    else:
        data = _np.array(x)
        if data.dtype in (_np.dtype(_np.float64), _np.dtype(_np.int64)):  # PopXL's downcast
            data = data.astype(_np.float32 if data.dtype.kind == "f" else _np.int32)
    data.setflags(write=False)
    return _graph.Constant(graph, graph._constant(data))


def _broadcast(op, a, b):
    try:
        return _np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast (numpy's rule: dimensions aligned "
                         "from the right, each pair equal or one of them 1)") from None


def _binary(op, popxl_name, a, b):
    a = _tensor(a, popxl_name, like=b if isinstance(b, Tensor) else None)
    b = _tensor(b, popxl_name, like=a)
    va, vb = a._current(popxl_name), b._current(popxl_name)
    if va.dtype != vb.dtype:
        raise TypeError(f"{popxl_name}: the inputs are {va.dtype} and {vb.dtype}; PopXL's elementwise ops take "
                        "inputs of one dtype (cast one with ops.cast)")
    shape = _broadcast(popxl_name, va, vb)
    (out,) = gcg(popxl_name)._record(op, {}, [va, vb], [(shape, va.dtype)])
    return a, out


def _out_of_place(op, popxl_name, a, b):
    _, out = _binary(op, popxl_name, a, b)
    return Tensor(gcg(popxl_name), out)


def _in_place(op, popxl_name, a, b):
    if not isinstance(a, Tensor):
        raise TypeError(f"{popxl_name}: the first input is updated in place, so it must be a tensor, not "
                        f"{type(a).__name__}")
    a, out = _binary(op, popxl_name, a, b)
    if out.shape != a.shape:
        raise ValueError(f"{popxl_name}: the result's shape {out.shape} is not the shape {a.shape} of the tensor "
                         f"updated in place ({a.name!r}): only the second input may broadcast")
    a._rebind(out)
    return a


def add(lhs, rhs):
    return _out_of_place("add", "popxl.ops.add", lhs, rhs)


def add_(lhs, rhs):
    """lhs += rhs in place (rhs broadcast); returns lhs. On a variable the new value is written back."""
    return _in_place("add", "popxl.ops.add_", lhs, rhs)


def sub(lhs, rhs):
    return _out_of_place("subtract", "popxl.ops.sub", lhs, rhs)


def sub_(lhs, rhs):
    return _in_place("subtract", "popxl.ops.sub_", lhs, rhs)


def mul(lhs, rhs):
    return _out_of_place("multiply", "popxl.ops.mul", lhs, rhs)


def mul_(lhs, rhs):
    return _in_place("multiply", "popxl.ops.mul_", lhs, rhs)


def div(lhs, rhs):
    return _out_of_place("divide", "popxl.ops.div", lhs, rhs)


def div_(lhs, rhs):
    return _in_place("divide", "popxl.ops.div_", lhs, rhs)


def negate(t):
    v = t._current("popxl.ops.negate")
    (out,) = gcg("popxl.ops.negate")._record("negative", {}, [v], [(v.shape, v.dtype)])
    return Tensor(gcg("popxl.ops.negate"), out)


def matmul(lhs, rhs):
    """2-d (or batched) matrix product, numpy's matmul shapes."""
    name = "popxl.ops.matmul"
    va, vb = lhs._current(name), rhs._current(name)
    if va.dtype != vb.dtype:
        raise TypeError(f"{name}: the inputs are {va.dtype} and {vb.dtype}; matmul takes inputs of one dtype")
    try:
        shape = _np.matmul(_np.empty(va.shape, va.dtype), _np.empty(vb.shape, vb.dtype)).shape
    except ValueError:
        raise ValueError(f"{name}: shapes {va.shape} and {vb.shape} do not multiply (the last dimension of the first "
                         "must equal the second-to-last of the second)") from None
    (out,) = gcg(name)._record("matmul", {}, [va, vb], [(shape, va.dtype)])
    return Tensor(gcg(name), out)


# ---- transfers ---------------------------------------------------------------------------------------------
def host_load(h2d_stream, name=None):
    """The next transfer of `h2d_stream` on this replica."""
    from .._state import HostToDeviceStream
    op = "popxl.ops.host_load"
    if not isinstance(h2d_stream, HostToDeviceStream):
        raise TypeError(f"{op}: {h2d_stream!r} is not a popxl.h2d_stream")
    graph = gcg(op)
    shape, dtype = h2d_stream.shape, _np.dtype(h2d_stream._weft.dtype)
    (out,) = graph._record("host_load", {"stream": h2d_stream, "shape": shape, "dtype": dtype}, [], [(shape, dtype)])
    return Tensor(graph, out, name)


def host_store(d2h_stream, t):
    """Sends t to the host as the next transfer of `d2h_stream` (same shape and dtype as the stream)."""
    from .._state import DeviceToHostStream
    op = "popxl.ops.host_store"
    if not isinstance(d2h_stream, DeviceToHostStream):
        raise TypeError(f"{op}: {d2h_stream!r} is not a popxl.d2h_stream")
    v = t._current(op)
    want_shape, want_dtype = d2h_stream.shape, _np.dtype(d2h_stream._weft.dtype)
    if v.shape != want_shape or v.dtype != want_dtype:
        raise ValueError(f"{op}: tensor {t.name!r} is {v.dtype}{list(v.shape)} but the stream {d2h_stream.name!r} "
                         f"is {want_dtype}{list(want_shape)}; they must be the same")
    gcg(op)._record("host_store", {"stream": d2h_stream}, [v])


def _offset(offset, op):
    if isinstance(offset, Tensor):
        v = offset._current(op)
        if v.shape != () or v.dtype.kind not in "iu":
            raise ValueError(f"{op}: the offset tensor {offset.name!r} is {v.dtype}{list(v.shape)}, not an integer "
                             "scalar")
        return v
    if isinstance(offset, bool) or not isinstance(offset, (int, _np.integer)):
        raise TypeError(f"{op}: offset {offset!r} is neither an int nor an integer scalar tensor")
    data = _np.asarray(offset, dtype=_np.int32)  # PopXL makes an int offset a uint32 constant; weft has int32
    data.setflags(write=False)
    return gcg(op)._constant(data)


def _check_entry(buffer, offset, op):
    if isinstance(offset, (int, _np.integer)) and not 0 <= int(offset) < buffer.entries:
        raise ValueError(f"{op}: offset {int(offset)} is outside the {buffer.entries} entries of {buffer!r}")


def remote_load(remote_buffer, offset, name=None):
    """Entry `offset` of `remote_buffer` on this replica; with a replica-sharded buffer, this replica's shard
    (the tensor's meta_shape is the buffer's)."""
    op = "popxl.ops.remote_load"
    _check_entry(remote_buffer, offset, op)
    graph = gcg(op)
    shape, dtype = remote_buffer.tensor_shape, _np.dtype(remote_buffer._weft.dtype)
    (out,) = graph._record("remote_load", {"buffer": remote_buffer, "shape": shape, "dtype": dtype},
                           [_offset(offset, op)], [(shape, dtype)])
    return Tensor(graph, out, name, meta_shape=remote_buffer.meta_shape)


def remote_store(remote_buffer, offset, t):
    """Writes t into entry `offset` of `remote_buffer` on this replica (t: the buffer's entry shape and dtype)."""
    op = "popxl.ops.remote_store"
    _check_entry(remote_buffer, offset, op)
    v = t._current(op)
    shape, dtype = remote_buffer.tensor_shape, _np.dtype(remote_buffer._weft.dtype)
    if v.shape != shape or v.dtype != dtype:
        raise ValueError(f"{op}: tensor {t.name!r} is {v.dtype}{list(v.shape)} but {remote_buffer!r} holds "
                         f"{dtype}{list(shape)} entries; they must be the same")
    gcg(op)._record("remote_store", {"buffer": remote_buffer}, [v, _offset(offset, op)])


# PopXL's other ops: named in the error, not silently missing.
_POPXL_OPS = frozenset("""abs argmax argmin average_pool batch_norm_inference cast concat concat_ conditional
conv cos cumsum detach dropout dynamic_slice dynamic_update dynamic_update_ equal exp exp_ flatten flatten_ fmod
gather gelu gelu_ greater group_norm histogram host_store_ increment_mod increment_mod_ init interleave
ipu_copy l1 l2 layer_norm lamb_square log log_softmax logical_and logical_not logical_or lstm matmul_ max
max_pool maximum mean median min negate_ onehot pow print_tensor random_normal random_uniform relu relu_
remote_load_ repeat reshape reshape_ roi_align scaled_add scaled_add_ scatter shaped_dropout sin slice slice_
softmax split split_random_seed sqrt squeeze sum swish swish_ tanh tied_gather topk transpose transpose_ where
""".split())


def __getattr__(name):
    if name in _POPXL_OPS:
        raise AttributeError(f"popxl.ops.{name} is not supported by weft.popxl; weft.popxl.ops provides host_load, "
                             "host_store, remote_load, remote_store, add(_), sub(_), mul(_), div(_), negate, matmul, "
                             "call, call_with_info and collectives.replicated_all_reduce(_), replicated_all_gather, "
                             "replicated_reduce_scatter, replica_sharded_slice, all_reduce_identical_inputs, "
                             "all_reduce_identical_grad_inputs")
    raise AttributeError(f"module 'weft.popxl.ops' has no attribute {name!r}")
