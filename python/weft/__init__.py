"""weft: SPMD programs over N virtual CPU devices, with JAX's pmap and collectives and PopXL's Session.

    import functools, numpy as np, weft
    from weft import lax

    @functools.partial(weft.pmap, axis_name="i")
    def normalize(x):                                   # one replica per device, on the devices' threads
        return x / lax.psum(x, "i")

The names follow JAX (devices, pmap, lax.psum, device_put_sharded, ...) and PopXL (Session, ReplicaGrouping,
variables, remote buffers, host streams, collectives.replicated_*). docs/python.md has the table, what runs
on which thread, and what is missing.
"""

from ._version import __version__
from . import _interpreter

_interpreter.check()  # the interpreter weft was built for, with numpy; else an ImportError saying which to use
from . import _weft
from ._weft import (Error, InvalidArgument, MismatchError, TimeoutError, AbortedError, PeerLostError,
                    OutOfMemoryError, Device, Runtime)
from . import _tracer_methods  # noqa: F401  (a Tracer's operators and methods: weft.numpy's functions)
from ._arrays import DeviceArray, ShardedArray
from ._pmap import pmap
from ._jit import Compiled, Lowered, Program, jit, make_jaxpr, make_program
from ._autodiff import checkpoint, grad, remat, value_and_grad, vjp
from . import ad_checkpoint
from .ad_checkpoint import checkpoint_policies
from ._transforms import float0, hessian, jacfwd, jacrev, jvp, linearize, vmap
from ._custom_vjp import custom_vjp
from ._custom_jvp import custom_jvp
from ._shard_map import BlockedArray, Mesh, MeshArray, P, PartitionSpec, make_mesh, shard_map
from ._trace import TracerConversionError
from ._dtypes import config
from . import errors, lax, collectives, ops, nn, tree, tree_util
from . import numpy
from ._session import Session, ReplicaGrouping, Variable, RemoteBuffer, HostStream
from ._policy import Policy, get_policy

# bfloat16 for traced values (x.astype(weft.bfloat16) inside weft.jit / pmap / shard_map): numpy has no such
# dtype, so this is a stand-in (a one-field structured dtype); arrays of it come back to numpy as float32.
bfloat16 = _weft.bfloat16

__all__ = [
    "jvp", "linearize", "jacfwd", "jacrev", "hessian", "vmap", "float0",
    "__version__", "Error", "InvalidArgument", "MismatchError", "TimeoutError", "AbortedError", "PeerLostError", "OutOfMemoryError",
    "Device", "Runtime", "DeviceArray", "ShardedArray", "pmap", "lax", "collectives", "ops", "nn", "tree", "tree_util", "Session",
    "ReplicaGrouping", "Variable", "RemoteBuffer", "HostStream", "init", "runtime", "devices", "device_count",
    "local_devices", "local_device_count", "process_index", "process_count", "default_backend", "device_put",
    "device_put_sharded", "device_put_replicated", "jit", "make_program", "make_jaxpr", "Program", "Lowered", "Compiled", "TracerConversionError", "config", "errors", "grad", "value_and_grad", "vjp", "checkpoint", "remat", "checkpoint_policies", "ad_checkpoint", "custom_vjp", "shard_map", "Mesh", "make_mesh", "P", "PartitionSpec", "MeshArray", "BlockedArray",
    "numpy", "bfloat16", "Policy", "get_policy",
    "custom_jvp",
]

_runtime = None  # the runtime made by weft.init (kept alive here; the newest live runtime is the current one)


def init(*, device_count=0, device_memory=-1, collective_warn=-1.0, collective_timeout=-1.0, log_level="",
         shared_products=-1, shared_runs=-1, flush_denormals=-1):
    """Makes a runtime with these settings the current one (JAX's config.FLAGS; 0 / -1 = WEFT_* or default).

    Without it, the first use makes one from the environment (WEFT_DEVICE_COUNT, default 8). Under weftrun the
    device count is the job's and must not be set here.
    """
    global _runtime
    if _weft.calls_in_flight():
        raise InvalidArgument("weft.init: a pmap or session run is in flight in another thread; the runtime it runs "
                              "on cannot be replaced under it")
    _runtime = Runtime(device_count=device_count, device_memory=device_memory, collective_warn=collective_warn,
                       collective_timeout=collective_timeout, log_level=log_level, shared_products=shared_products,
                       shared_runs=shared_runs, flush_denormals=flush_denormals)
    return _runtime


def runtime():
    """The current runtime: the newest live one (weft.init's, or a weft.Runtime made since), else one made from
    the environment on first use. pmap and Session use the same."""
    return _weft.current_runtime()


def default_backend():
    return runtime().platform


def devices(backend=None):
    """Every device of the job, by id (jax.devices()). `backend` may be None or "cpu"."""
    from ._jit import check_backend
    check_backend(backend, "weft.devices")
    return runtime().devices()


def device_count(backend=None):
    return len(devices(backend))


def local_devices(process_index=None, backend=None):
    if process_index is None:
        return runtime().local_devices()
    return [d for d in devices(backend) if d.process_index == process_index]


def local_device_count(backend=None):
    return len(local_devices(backend=backend))


def process_index():
    return runtime().process_index


def process_count():
    return runtime().process_count


def device_put(x, device=None):
    """A copy of `x` committed to `device` (default: the first local device), as a DeviceArray."""
    from ._tree import tree_map
    from ._jit import leaf_value
    if device is None:
        device = local_devices()[0]

    def put(leaf):
        data, _ = _weft.device_put(leaf_value(leaf), device)  # (64-bit narrowed with x64 off, as JAX's)
        return DeviceArray(data, device)

    return tree_map(put, x)


def device_put_sharded(shards, devices):
    """shards[i] on devices[i], stacked on a new leading axis: one ShardedArray per leaf when the shards are
    pytrees of the same structure (jax.device_put_sharded)."""
    from ._tree import flatten, unflatten, describe
    from ._jit import leaf_value
    shards, devices = list(shards), list(devices)
    if not shards:
        raise InvalidArgument("weft.device_put_sharded: `shards` is empty; it needs one shard per device")
    flat = [flatten(s) for s in shards]
    leaves0, treedef = flat[0]
    for index, (_, other) in enumerate(flat):
        if other != treedef:
            raise InvalidArgument(f"weft.device_put_sharded: shard {index} has structure {describe(other)} but "
                                  f"shard 0 has {describe(treedef)}; every shard must be the same pytree")
    out = [ShardedArray(_weft.device_put_sharded([leaf_value(leaves[k]) for leaves, _ in flat], devices))
           for k in range(len(leaves0))]
    return unflatten(treedef, out)


def device_put_replicated(x, devices):
    """One copy of x per device, stacked on a new leading axis; x may be a pytree (one ShardedArray per leaf),
    as jax.device_put_replicated."""
    from ._tree import tree_map
    from ._jit import leaf_value
    devices = list(devices)
    return tree_map(lambda leaf: ShardedArray(_weft.device_put_replicated(leaf_value(leaf), devices)), x)
