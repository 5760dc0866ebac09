"""weft.collectives: PopXL's ops.collectives over replica groupings, inside a Session's program.

group=None means every replica (PopXL's default grouping); op is PopXL's name: "add", "mean", "mul", "min",
"max".
"""
from . import _weft


def _group(group):
    return _weft.ReplicaGroups.strided(_weft.num_replicas(), 1, 0) if group is None else group


def replicated_all_reduce(t, op="add", group=None):
    return _weft.all_reduce(t, _group(group), op)


def replicated_all_gather(t, group=None, output_shape=None):
    """The group's tensors, member order. With output_shape (e.g. a replica-sharded buffer's meta_shape), t
    is a shard: the zero padding is dropped and the result reshaped, as PopXL's output_shape='auto' does for
    replica-sharded tensors; without it, the tensors are concatenated along axis 0."""
    if output_shape is not None and output_shape != "auto":
        return _weft.gather_shards(t, _group(group), list(output_shape))
    return _weft.all_gather_groups(t, _group(group), 0, True)


def replicated_reduce_scatter(t, op="add", group=None, configure_output_for_replicated_tensor_sharding=False):
    """Flattens t, pads it to a multiple of the group size and reduces it; member k gets chunk k (1-d)."""
    return _weft.replicated_reduce_scatter(t, _group(group), op)


def replica_sharded_slice(t, group=None):
    """Member k of the group takes chunk k of its own (flattened, padded) t."""
    return _weft.replica_sharded_slice(t, _group(group))
