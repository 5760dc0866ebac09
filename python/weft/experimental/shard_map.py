"""weft.experimental.shard_map: jax.experimental.shard_map's shard_map(f, mesh, in_specs, out_specs,
check_rep=True, auto=frozenset()), the form programs written before jax.shard_map use. It is weft.shard_map
(python/weft/_shard_map.py) with the experimental signature: check_rep is check_vma's older name."""
from .._shard_map import shard_map as _shard_map


def shard_map(f, mesh, in_specs, out_specs, check_rep=True, auto=frozenset()):
    """jax.experimental.shard_map.shard_map: weft.shard_map(f, mesh, in_specs, out_specs, check_vma=check_rep);
    `auto` (partially automatic axes) is refused, as weft.shard_map refuses it."""
    return _shard_map(f, mesh, in_specs, out_specs, check_rep=check_rep, auto=auto)
