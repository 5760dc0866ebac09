"""weft.popxl.ops.collectives: PopXL's replicated collectives over replica groupings, recorded into the graph.

    replicated_all_reduce(t, op="add", group=None)   -> psum / pmean / pmax / pmin (groups = the grouping)
    replicated_all_reduce_(t, op, group)              the same, in place
    replicated_all_gather(t, axis=0, group=None, output_shape="auto")
        a shard (t has a meta_shape; "auto" or "meta_shape") -> gather_shards: the group's whole tensor
        "concat" -> all_gather (tiled), "new_axis" -> all_gather (a new axis of size G)
    replicated_reduce_scatter(t, op="add", group=None, configure_output_for_replicated_tensor_sharding=False)
    replica_sharded_slice(t, group=None)
    all_reduce_identical_inputs(t, group=None)        Megatron's f: the identity forward, a sum backward
    all_reduce_identical_grad_inputs(t, group=None)   Megatron's g: a sum forward, the identity backward
        (popxl_addons' replicated_all_reduce_identical_inputs / _grad_inputs, also under those names)

group=None is every replica (ir.replica_grouping()). Groupings are global: they span instances. The run
goes through weft.collectives (weft/collectives.py), the same path as weft.Session programs. A product
("mul") is a true product, not PopXL's mean (docs/popxl.md, Differences).
"""
import numpy as _np

from .._graph import Tensor, gcg

_AXES = ("replica",)  # a popxl graph's one mesh axis: the replicas
_REDUCE = {"add": "psum", "mean": "pmean", "max": "pmax", "min": "pmin", "mul": "pprod"}


def _group(group, op):
    graph = gcg(op)
    replicas = graph.ir.replication_factor
    if group is None:
        return graph.ir.replica_grouping()
    if not (hasattr(group, "assignment") and hasattr(group, "group_size")):
        raise TypeError(f"{op}: group {group!r} is not a replica grouping (ir.replica_grouping(stride, group_size))")
    if group.num_replicas != replicas:
        raise ValueError(f"{op}: the grouping is over {group.num_replicas} replicas, the Ir has {replicas}")
    if group.stride is None:
        raise NotImplementedError(f"{op}: the grouping {group!r} has no single stride; PopXL's collectives (and "
                                  "weft.popxl's) need a strided grouping")
    return group


def _reduction(op_name, op):
    if op_name not in _REDUCE:
        raise ValueError(f"{op}: op={op_name!r} is not a reduction weft provides ({', '.join(_REDUCE)}; PopXL's "
                         "and, or, square_add are not provided)")
    return _REDUCE[op_name]


def replicated_all_reduce(t, op="add", group=None):
    name = "popxl.ops.collectives.replicated_all_reduce"
    prim, groups = _reduction(op, name), _group(group, name)
    v = t._current(name)
    (out,) = gcg(name)._record(prim, {"axes": _AXES, "groups": groups}, [v], [(v.shape, v.dtype)])
    return Tensor(gcg(name), out)


def replicated_all_reduce_(t, op="add", group=None):
    name = "popxl.ops.collectives.replicated_all_reduce_"
    prim, groups = _reduction(op, name), _group(group, name)
    v = t._current(name)
    (out,) = gcg(name)._record(prim, {"axes": _AXES, "groups": groups}, [v], [(v.shape, v.dtype)])
    t._rebind(out)
    return t


def replicated_all_gather(t, axis=0, group=None, output_shape="auto"):
    name = "popxl.ops.collectives.replicated_all_gather"
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ValueError(f"{name}: axis={axis!r} is not an int")
    if output_shape not in ("auto", "meta_shape", "concat", "new_axis"):
        raise ValueError(f"{name}: output_shape={output_shape!r} is none of 'auto', 'meta_shape', 'concat', "
                         "'new_axis'")
    groups = _group(group, name)
    v = t._current(name)
    size = groups.group_size
    if output_shape == "meta_shape" or (output_shape == "auto" and t.meta_shape):
        if not t.meta_shape:
            raise ValueError(f"{name}: output_shape='meta_shape' but {t.name!r} has no meta_shape (it is not a shard "
                             "of a replica-sharded tensor)")
        if len(v.shape) != 1 or v.shape[0] * size < int(_np.prod(t.meta_shape, dtype=_np.int64)):
            raise ValueError(f"{name}: {size} shards of shape {v.shape} cannot hold the meta_shape {t.meta_shape}: "
                             "gather a shard with the grouping of its shard domain")
        (out,) = gcg(name)._record("gather_shards", {"groups": groups, "shape": t.meta_shape}, [v],
                                   [(t.meta_shape, v.dtype)])
        return Tensor(gcg(name), out)
    rank = len(v.shape)
    tiled = output_shape != "new_axis"
    if not (-rank - (not tiled) <= axis < rank + (not tiled)):
        raise ValueError(f"{name}: axis {axis} is outside the {rank} dimensions of {t.name!r}")
    axis %= rank + (not tiled)
    shape = list(v.shape)
    if tiled:
        shape[axis] *= size
    else:
        shape.insert(axis, size)
    (out,) = gcg(name)._record("all_gather", {"axes": _AXES, "axis": axis, "groups": groups, "tiled": tiled}, [v],
                               [(tuple(shape), v.dtype)])
    return Tensor(gcg(name), out)


def _scatter(prim, name, t, groups, params, meta):
    v = t._current(name)
    elements = int(_np.prod(v.shape, dtype=_np.int64))
    (out,) = gcg(name)._record(prim, {"groups": groups, **params}, [v], [((-(-elements // groups.group_size),),
                                                                          v.dtype)])
    return Tensor(gcg(name), out, meta_shape=v.shape if meta else ())


def replicated_reduce_scatter(t, op="add", group=None, configure_output_for_replicated_tensor_sharding=False):
    """t flattened, zero-padded to a multiple of the group size and reduced; member k gets chunk k (1-d)."""
    name = "popxl.ops.collectives.replicated_reduce_scatter"
    _reduction(op, name)
    return _scatter("replicated_reduce_scatter", name, t, _group(group, name), {"reduce": op},
                    configure_output_for_replicated_tensor_sharding)


def replica_sharded_slice(t, group=None):
    """Member k of the group takes chunk k of its own t (flattened, padded): a shard with t's shape as meta_shape."""
    name = "popxl.ops.collectives.replica_sharded_slice"
    return _scatter("replica_sharded_slice", name, t, _group(group, name), {}, True)


def _identical(prim, name, t, op, group):
    """Megatron's f or g over the replicas of `group` (the C++ program layer's op `prim`)."""
    if isinstance(t, (list, tuple)):
        raise TypeError(f"{name}: weft.popxl reduces one tensor over the replicas of `group` (popxl_addons' "
                        "replicated form); PopXL's list of tensors on several IPUs of one replica has no meaning in "
                        "weft, which gives each replica one device")
    if op != "add":
        raise ValueError(f"{name}: op={op!r}: only 'add' is provided (Megatron's f/g pair is a sum)")
    groups = _group(group, name)
    v = t._current(name)
    (out,) = gcg(name)._record(prim, {"axes": _AXES, "groups": groups}, [v], [(v.shape, v.dtype)])
    return Tensor(gcg(name), out)


def all_reduce_identical_inputs(t, group=None, op="add"):
    """Megatron's f: t, whose replicas of each group hold equal values, unchanged; its gradient is the sum of
    the group's cotangents (an all-reduce in the backward pass only)."""
    return _identical("all_reduce_identical_inputs", "popxl.ops.collectives.all_reduce_identical_inputs", t, op,
                      group)


def all_reduce_identical_grad_inputs(t, group=None, op="add"):
    """Megatron's g: the sum of t over each group; its cotangents are equal over the group, so its gradient is
    the cotangent itself (an all-reduce in the forward pass only)."""
    return _identical("all_reduce_identical_grad_inputs", "popxl.ops.collectives.all_reduce_identical_grad_inputs",
                      t, op, group)


def replicated_all_reduce_identical_inputs(t, op="add", group=None):
    """popxl_addons' name of all_reduce_identical_inputs."""
    return all_reduce_identical_inputs(t, group, op)


def replicated_all_reduce_identical_grad_inputs(t, op="add", group=None):
    """popxl_addons' name of all_reduce_identical_grad_inputs."""
    return all_reduce_identical_grad_inputs(t, group, op)


def __getattr__(name):
    if name in ("replicated_slice", "replicated_reduce_scatter_", "replicated_all_gather_", "replicated_all_to_all"):
        raise AttributeError(f"popxl.ops.collectives.{name} is not supported by weft.popxl; it provides "
                             "replicated_all_reduce(_), replicated_all_gather, replicated_reduce_scatter, "
                             "replica_sharded_slice, all_reduce_identical_inputs, all_reduce_identical_grad_inputs")
    raise AttributeError(f"module 'weft.popxl.ops.collectives' has no attribute {name!r}")
