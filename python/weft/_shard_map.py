"""weft.shard_map, weft.Mesh, weft.P: JAX's shard_map (jax.experimental.shard_map) over weft's devices.

    mesh = weft.Mesh(np.array(weft.devices()).reshape(4, 2), ("data", "model"))
    step = weft.shard_map(f, mesh, in_specs=(P(), P("data")), out_specs=P())
    loss = step(w, x)          # w whole on every device, x's rows split over 'data'; loss from the mesh

Each argument is split into blocks by its PartitionSpec (dimension d over the mesh axes spec[d] names; the
axes a spec does not name replicate it), `f` is traced once per signature into a program of the mesh's axes
and runs on every device, and the results are put back together by out_specs. Unlike pmap, the program
follows shard_map's rule set (check_vma=True, JAX's "varying manual axes"): every value knows the mesh axes
it varies over (an argument those its spec names), an op mixing values of different axes gets the less
varying one pvary-ed, and under weft.grad psum transposes to pvary and pvary to psum. So the gradient of a
pmean'ed loss with respect to parameters given as P() is the true global gradient, with one all-reduce per
parameter in the backward pass, where pmap's rules give each replica n times its own (docs/autodiff.md).
An output whose spec leaves out an axis it varies over is an error, as in JAX.

The results stay on the devices, as a JAX Array's do: a weft.MeshArray holds each device's block and reads
as the global numpy array when the host asks (once, then kept). Given back to a shard_map over the same mesh
with the same spec, its blocks go in where they are: a trainer's parameters and optimiser state cross no
host copies from step to step. bfloat16 results read as float32 on the host (numpy has no bfloat16) and stay
bfloat16 on the devices. Across processes (weftrun) an output split over mesh axes whose devices are on several
processes cannot be put together on one: it comes back as a BlockedArray (a MeshArray that is not fully
addressable, as JAX says), which goes back into a shard_map the same way but cannot be read whole.
"""
import functools
import math

import numpy as _np

from . import _dtypes, _tree, _weft
from ._jit import LowersItself, Program, leaf_value, leaf_weak, trace_function
from ._pmap import _run_engine
from ._trace import Tracer, current_trace


class Mesh:
    """jax.sharding.Mesh: an n-d array of devices and one name per dimension. The array may hold weft.Device
    objects (`Mesh(np.array(weft.devices()).reshape(2, 4), ('d', 'm'))`, as JAX users write) or device ids
    (`Mesh(np.arange(8), ('i',))`), which stand for the current runtime's devices of those ids."""

    def __init__(self, devices, axis_names):
        devices = _np.asarray(devices, dtype=object)
        if any(not isinstance(d, _weft.Device) for d in devices.flat):
            devices = _devices_of(devices)
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        axis_names = tuple(axis_names)
        if devices.ndim != len(axis_names):
            raise _weft.InvalidArgument(f"weft.Mesh: a {devices.ndim}-d array of devices needs {devices.ndim} axis "
                                        f"names, got {axis_names!r}")
        if len(set(axis_names)) != len(axis_names):
            raise _weft.InvalidArgument(f"weft.Mesh: axis names must be distinct, got {axis_names!r}")
        ids = [d.id for d in devices.flat]
        if len(set(ids)) != len(ids):
            raise _weft.InvalidArgument(f"weft.Mesh: a device appears twice (ids {ids})")
        self.devices = devices
        self.axis_names = axis_names

    @property
    def shape(self):
        """{axis name: size}, in the mesh's order (JAX's Mesh.shape)."""
        return dict(zip(self.axis_names, self.devices.shape))

    @property
    def size(self):
        return int(self.devices.size)

    def __repr__(self):
        return "Mesh(" + ", ".join(f"'{n}': {s}" for n, s in self.shape.items()) + ")"


def _devices_of(entries):
    """`entries` (an object array of devices and device ids) with each id replaced by its device."""
    by_id = {d.id: d for d in _weft.current_runtime().devices()}
    out = _np.empty(entries.shape, dtype=object)
    for index, d in _np.ndenumerate(entries):
        if isinstance(d, _weft.Device):
            out[index] = d
        elif isinstance(d, (int, _np.integer)) and not isinstance(d, (bool, _np.bool_)):
            if int(d) not in by_id:
                raise _weft.InvalidArgument(f"weft.Mesh: device id {int(d)} is not a device of the runtime (ids "
                                            f"{min(by_id)}..{max(by_id)})")
            out[index] = by_id[int(d)]
        else:
            raise _weft.InvalidArgument(f"weft.Mesh: each entry of devices is a weft.Device or a device id (an int), "
                                        f"got {d!r}")
    return out


def make_mesh(axis_shapes, axis_names, *, devices=None):
    """jax.make_mesh: a Mesh of shape `axis_shapes` over `devices` (default: every device of the runtime, by
    id), whose count must be the product of the shape."""
    axis_shapes = tuple(int(n) for n in axis_shapes)
    devices = list(_weft.current_runtime().devices() if devices is None else devices)
    size = math.prod(axis_shapes)
    if size != len(devices):
        raise _weft.InvalidArgument(f"weft.make_mesh: a mesh of shape {axis_shapes} needs {size} devices, got "
                                    f"{len(devices)} (the shape's product must be the number of devices)")
    array = _np.empty(len(devices), dtype=object)
    array[:] = devices
    return Mesh(array.reshape(axis_shapes), axis_names)


class P:
    """jax.sharding.PartitionSpec: per dimension of an array, the mesh axis (a name), axes (a tuple of names,
    major first) or None (not split) it is split over; dimensions past the spec's end are not split."""

    __slots__ = ("_parts",)

    def __init__(self, *partitions):
        parts = []
        for p in partitions:
            if p is None:
                parts.append(())
            elif isinstance(p, str):
                parts.append((p,))
            elif isinstance(p, (tuple, list)) and all(isinstance(a, str) for a in p):
                parts.append(tuple(p))
            else:
                raise _weft.InvalidArgument(f"weft.P: each entry is an axis name, a tuple of names or None, got {p!r}")
        self._parts = tuple(parts)

    def __len__(self):
        return len(self._parts)

    def __iter__(self):
        return iter(self._parts)

    def __getitem__(self, index):
        return self._parts[index]

    def __eq__(self, other):
        return isinstance(other, P) and other._parts == self._parts

    def __hash__(self):
        return hash(self._parts)

    def axes(self):
        """Every mesh axis the spec names."""
        return [a for part in self._parts for a in part]

    def __repr__(self):
        def one(part):
            return "None" if not part else repr(part[0]) if len(part) == 1 else repr(part)
        return "P(" + ", ".join(one(p) for p in self._parts) + ")"


PartitionSpec = P


def _spec_leaves(specs, tree, what, name):
    """One P per leaf of `tree`: `specs` is a tree prefix of it (a P applies to every leaf below it)."""
    try:
        leaves = _tree.broadcast_prefix(specs, tree, f"{name} {what}")
    except ValueError as error:
        raise _weft.InvalidArgument(str(error)) from None
    for spec in leaves:
        if not isinstance(spec, P):
            raise _weft.InvalidArgument(f"{name}: every entry of {what} must be a weft.P, got {spec!r}")
    return leaves


class MeshArray(_np.lib.mixins.NDArrayOperatorsMixin):
    """A shard_map result (JAX: jax.Array): its blocks stay on the mesh's devices, and a shard_map over the
    same mesh that takes it with the same spec hands each device its block where it is, with no copy through
    the host (a trainer's parameters and optimiser state, step after step). Read on the host it is the global
    array, put together once on first use and kept read-only (numpy.asarray, arithmetic, indexing, float(),
    numpy's methods and attributes); like a JAX Array it cannot be written to. `addressable_shards`:
    (device, numpy block) for this process's devices."""

    is_fully_addressable = True
    __array_priority__ = 100

    def __init__(self, sharded, mesh, spec, shape, dtype, read):
        self._sharded = sharded      # the engine's result: one shard per local device
        self.mesh, self.spec = mesh, spec
        self.shape = tuple(shape)
        # The blocks' dtype (as traced: bfloat16 stays bfloat16 on the devices) and the host's, which numpy
        # reads and every other consumer traces with: bfloat16 reads as float32 (numpy has no bfloat16).
        self._block_dtype = _np.dtype(dtype)
        self.dtype = _np.dtype(_np.float32) if self._block_dtype == _np.dtype(_weft.bfloat16) else self._block_dtype
        self._read = read            # () -> the global numpy array
        self._value = None

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(_np.prod(self.shape, dtype=_np.int64))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    @property
    def addressable_shards(self):
        local = [d for d in self.mesh.devices.flat if d.process_index == _weft.current_runtime().process_index]
        return [(device, block) for device, (_, block) in zip(local, self._sharded.shards())]

    def block_until_ready(self):
        return self

    def _host(self):
        if self._value is None:
            value = _np.asarray(self._read())
            value.flags.writeable = False
            self._value = value
        return self._value

    def __array__(self, dtype=None, copy=None):
        value = self._host()
        if dtype is not None and _np.dtype(dtype) != value.dtype:
            return value.astype(dtype)
        return value.copy() if copy else value

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(_np.asarray(x) if isinstance(x, MeshArray) else x for x in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(_np.asarray(x) if isinstance(x, MeshArray) else x for x in kwargs["out"])
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __getitem__(self, index):
        return self._host()[index]

    def __iter__(self):
        return iter(self._host())

    def __getattr__(self, name):
        # numpy's methods and attributes (reshape, astype, sum, T, tolist, ...) on the host value; private
        # names, and names numpy arrays do not have, are not (copy and pickle probe them on a half-built
        # object; hasattr(x, "sharding") must not read the array).
        if name.startswith("_") or not hasattr(_np.ndarray, name):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        return getattr(self._host(), name)

    # Immutable, as a JAX Array: x += y rebinds x to x + y (the mixin's in-place forms would write the
    # read-only host value).
    def __iadd__(self, other):
        return NotImplemented

    __isub__ = __imul__ = __itruediv__ = __ifloordiv__ = __imod__ = __ipow__ = __imatmul__ = __iadd__
    __iand__ = __ior__ = __ixor__ = __ilshift__ = __irshift__ = __iadd__

    # Pickled and deep-copied as the host array (jax.Array pickles to its numpy value too).
    def __reduce__(self):
        return (_np.array, (self._host(),))

    def __deepcopy__(self, memo):
        return _np.array(self._host())

    def __format__(self, spec):
        return self._host().__format__(spec)

    def __round__(self, ndigits=None):
        if self.ndim == 0:
            return round(self._host()[()], ndigits)
        raise TypeError(f"round() of a {self.ndim}-d array: use numpy.round")  # as numpy 1.24's ndarray

    def __complex__(self):
        return complex(self._host())

    def __float__(self):
        return float(self._host())

    def __int__(self):
        return int(self._host())

    def __bool__(self):
        return bool(self._host())

    def __index__(self):
        return self._host().__index__()

    def __str__(self):
        return str(self._host())

    def __repr__(self):
        values = _np.array2string(self._host(), separator=", ")
        return f"MeshArray({values}, dtype={self.dtype.name}, spec={self.spec!r})"


class BlockedArray(MeshArray):
    """A shard_map result split over mesh axes whose blocks are on other processes too (JAX: an Array with
    is_fully_addressable False): this process's blocks stay on their devices. It goes back into a shard_map
    over the same mesh with the same spec as it is; reading it whole (numpy.asarray, arithmetic, indexing) is
    refused, naming what to do. `addressable_shards`: (device, numpy block) for this process's devices."""

    is_fully_addressable = False

    def __init__(self, sharded, mesh, spec, shape, dtype, reason):
        super().__init__(sharded, mesh, spec, shape, dtype, None)
        self._reason = reason

    def _host(self):
        raise _weft.InvalidArgument(self._reason)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"BlockedArray has no '{name}' here: {self._reason}")

    def __reduce__(self):
        raise TypeError(f"a BlockedArray cannot be pickled: {self._reason}")

    def __repr__(self):
        return f"BlockedArray({self.dtype.name}{list(self.shape)}, {self.spec!r}, not fully addressable)"

    __str__ = __repr__


def _trimmed(spec):
    """A spec's parts without its trailing unsplit dimensions: P('data') and P('data', None) split alike."""
    parts = list(spec)
    while parts and not parts[-1]:
        parts.pop()
    return tuple(tuple(p) for p in parts)


def _same_mesh(a, b):
    return a is b or (a.axis_names == b.axis_names and a.devices.shape == b.devices.shape and
                      [d.id for d in a.devices.flat] == [d.id for d in b.devices.flat])


# The placeholder argument of a shard_map called without arrays (the engine needs one to count the devices by).
_NO_ARGUMENTS = _np.zeros((), _np.uint8)


class _Traced:
    """One signature's traced program, its results' structure and specs, and its engines (one per pattern of
    resident arguments: _ShardMapped._engine)."""

    __slots__ = ("program", "out_def", "out_specs", "engines")

    def __init__(self, program, out_def, out_specs):
        self.program, self.out_def, self.out_specs = program, out_def, out_specs
        self.engines = {}


class _ShardMapped(LowersItself):
    """What weft.shard_map returns: call it with global arrays (pytrees of them)."""

    def __init__(self, fun, mesh, in_specs, out_specs, check_vma, name):
        if not isinstance(mesh, Mesh):
            raise _weft.InvalidArgument(f"{name}: mesh must be a weft.Mesh, got {type(mesh).__name__}")
        self._fun = fun
        self._mesh = mesh
        self._in_specs = in_specs
        self._out_specs = out_specs
        self._check_vma = check_vma
        self._name = name
        self._traced = {}
        functools.update_wrapper(self, fun, updated=())

    def __call__(self, *args):
        trace = current_trace()
        if trace is not None and not trace.mesh and not _weft.in_replica():
            return self._call_in_trace(trace, args)
        entry, leaves, arrays, specs, resident = self._entry(args)
        out_def, out_specs, program = entry.out_def, entry.out_specs, entry.program
        engine, mapped = self._engine(entry, specs, resident)
        blocks = [array._sharded if stays else self._blocks_of(array, spec, m)
                  for array, spec, m, stays in zip(arrays, specs, mapped, resident)]
        results = _run_engine(engine, leaves, blocks, [])
        local = self._local_positions()
        outs = []
        for index, (r, spec, typ) in enumerate(zip(results, out_specs, program.output_types)):
            reason = self._unaddressable(spec, local, index)
            shape = [n * int(_np.prod([self._mesh.shape[a] for a in (spec[d] if d < len(spec) else ())],
                                      dtype=_np.int64)) for d, n in enumerate(typ[1])]
            if reason is None:
                read = functools.partial(self._read_result, r, spec, local, index)
                outs.append(MeshArray(r, self._mesh, spec, shape, typ[0], read))
            else:
                outs.append(BlockedArray(r, self._mesh, spec, shape, typ[0], reason))
        return _tree.unflatten(out_def, outs)

    def _call_in_trace(self, trace, args):
        """This shard_map called while a transformation at the top traces its caller (jit(shard_map(f)), grad of
        a function calling it, shard_map between global work inside one jit): the caller's program cuts each
        argument into its blocks stacked by device (_split on tracers), runs the per-device program as one pmap
        equation over the mesh (src/program/ops/pmap.cc), and joins the results' blocks (_assemble). Values of
        the enclosing trace the function closes over reach every device whole (replicated, P())."""
        from . import numpy as jnp
        devices = [d.id for d in self._mesh.devices.flat]
        if devices != list(range(len(devices))):
            raise _weft.InvalidArgument(
                f"{self._name}: inside {trace.name}, a shard_map runs on the runtime's first devices in order "
                f"(ids 0..{len(devices) - 1}); this mesh has ids {devices} (call it outside {trace.name})")
        leaves, treedef, specs = self._leaves_and_specs(args)
        values = [leaf if isinstance(leaf, Tracer) else _np.asarray(leaf_value(leaf)) for leaf in leaves]
        types = []
        for index, (value, spec) in enumerate(zip(values, specs)):
            self._check_spec(spec, len(value.shape), f"argument {index}")
            types.append((value.dtype, self._block_shape(tuple(value.shape), spec, index), leaf_weak(leaves[index])))
        captured = []
        entry = self._trace(tuple(types), specs, treedef, captured)
        sizes = list(self._mesh.devices.shape)
        inputs, axes = [], []
        for value, spec in zip(values, specs):
            if spec.axes():
                inputs.append(self._split(value, spec, jnp))
                axes.append(0)
            else:
                inputs.append(value)
                axes.append(-1)
        if 0 not in axes:  # the engine counts the devices by a mapped operand: the first goes as copies
            first = inputs[0]
            inputs[0] = jnp.broadcast_to(first, tuple(sizes) + tuple(_np.shape(first)))
            axes[0] = 0
        inputs += captured
        axes += [-1] * len(captured)
        n_out = len(entry.program.output_types)
        outs = trace.emit("pmap", inputs, [("body", [entry.program]), ("in_axes", axes), ("out_axes", [0] * n_out)],
                          n_out)
        return _tree.unflatten(entry.out_def, [self._assemble(o, spec, xp=jnp)
                                               for o, spec in zip(outs, entry.out_specs)])

    def _resident(self, array, spec, index):
        """Whether argument `index` is an earlier result whose blocks are already where this call needs them:
        on this mesh, with this spec. A BlockedArray must be (its other blocks are on other processes)."""
        if not isinstance(array, MeshArray):
            return False
        if _same_mesh(array.mesh, self._mesh) and _trimmed(array.spec) == _trimmed(spec):
            return True
        if isinstance(array, BlockedArray):
            raise _weft.InvalidArgument(
                f"{self._name}: argument {index} is a BlockedArray (not fully addressable) with spec "
                f"{array.spec!r} on mesh {array.mesh!r}; it can only go to a shard_map over the same mesh with "
                f"the same spec, not {spec!r} on {self._mesh!r} (its blocks are on other processes)")
        return False

    def _engine(self, entry, specs, resident):
        """The engine for this pattern of arguments from the host and from the devices, made once per pattern
        from the one traced program: a spec naming axes, or a resident argument (one block per device), is
        mapped over the devices; a replicated argument from the host goes whole to every device. The engine
        needs one mapped argument to count the devices by, so when there is none the first goes as a stack of
        copies."""
        found = entry.engines.get(resident)
        if found is None:
            mapped = [bool(spec.axes()) or stays for spec, stays in zip(specs, resident)]
            if specs and not any(mapped):
                mapped[0] = True
            mesh = [(a, int(n)) for a, n in self._mesh.shape.items()]
            leaf_axes = [0 if m else None for m in mapped]
            engine = _weft.ProgramPmap(entry.program, "", mesh, leaf_axes, [], list(self._mesh.devices.flat),
                                       self._name)
            found = entry.engines[resident] = (engine, mapped)
        return found

    def _read_result(self, sharded, spec, local, index):
        """Output `index` whole on the host: a replicated one is any device's block (one copy, not every
        device's), a split one its blocks put together."""
        if local is None and not spec.axes():
            return _np.array(sharded.shards()[0][1])
        return self._assemble(sharded.to_host(), spec, local, index)

    def _blocks_of(self, array, spec, mapped):
        """What the engine takes for a host argument: its blocks stacked by device (mapped), or the array
        itself (a replicated argument, the same on every device)."""
        array = _np.asarray(array)
        return self._split(array, spec) if mapped else array

    def _unaddressable(self, spec, local, output):
        """Why output `output` (spec `spec`) cannot be put together in this process, or None when it can:
        some coordinate of the axes its spec names has no device here."""
        if local is None or not spec.axes():
            return None
        names = list(self._mesh.axis_names)
        kept = [a for a in names if a in spec.axes()]
        have = set()
        for position in local:
            coords = _np.unravel_index(position, self._mesh.devices.shape)
            have.add(tuple(int(coords[names.index(a)]) for a in kept))
        total = int(_np.prod([self._mesh.shape[a] for a in kept], dtype=_np.int64))
        if len(have) == total:
            return None
        return (f"{self._name}: output {output}'s out_spec {spec!r} splits it over mesh axes {tuple(kept)}, whose "
                f"blocks are on other processes: process {_weft.current_runtime().process_index} holds "
                f"{len(have)} of its {total} blocks (JAX: not fully addressable). It stays on the devices as a "
                f"weft.BlockedArray that a shard_map on the same mesh and spec takes back; to read it whole, "
                f"replicate it over the axes that cross processes (all_gather it there) or keep those axes "
                f"within a process")

    def _local_positions(self):
        """The flat mesh positions of this process's devices, in mesh order (a pmap's results hold those
        replicas' shards, in that order); None when the process holds the whole mesh."""
        me = _weft.current_runtime().process_index
        positions = [k for k, d in enumerate(self._mesh.devices.flat) if d.process_index == me]
        return None if len(positions) == self._mesh.size else positions

    def lower(self, *args):
        """The program every device runs for these arguments (weft.make_program(shard_map(...))(*args) too)."""
        entry = self._entry(args)[0]
        return Program(entry.program, entry.out_def)

    def _entry(self, args):
        """The arguments' signature's _Traced (traced on first sight), the argument leaves, as arrays (numpy,
        or a MeshArray as it is), their specs, and which are resident: an argument this mesh's earlier call
        left on the devices with this spec goes in as it is (each device its own block, traced with the
        blocks' dtype); the rest go from the host, split by their specs."""
        if current_trace() is not None or _weft.in_replica():
            raise _weft.InvalidArgument(f"{self._name}: shard_map inside a traced function or a replica is not "
                                        "supported; call it at the top level")
        leaves, treedef, specs = self._leaves_and_specs(args)
        # Host arguments as JAX holds them: 64-bit narrowed with x64 off, Python numbers of its default types
        # (weft/_dtypes.py).
        arrays = [leaf if isinstance(leaf, MeshArray) else _np.asarray(leaf_value(leaf)) for leaf in leaves]
        types, resident = [], []
        for index, (array, spec) in enumerate(zip(arrays, specs)):
            self._check_spec(spec, array.ndim, f"argument {index}")
            resident.append(self._resident(array, spec, index))
            dtype = array._block_dtype if resident[-1] else array.dtype
            types.append((dtype, self._block_shape(array.shape, spec, index), leaf_weak(leaves[index])))
        key = (treedef, tuple(types), tuple(specs), _dtypes.x64_enabled())
        entry = self._traced.get(key)
        if entry is None:
            entry = self._trace(types, specs, treedef)
            self._traced[key] = entry
        return entry, leaves, arrays, specs, tuple(resident)

    def _leaves_and_specs(self, args):
        """The arguments' leaves, their treedef and each leaf's spec (in_specs broadcast over the pytrees)."""
        in_specs = self._in_specs if isinstance(self._in_specs, (tuple, list)) else (self._in_specs,) * len(args)
        if isinstance(self._in_specs, (tuple, list)) and len(self._in_specs) != len(args):
            raise _weft.InvalidArgument(f"{self._name}: in_specs has {len(self._in_specs)} entries for "
                                        f"{len(args)} arguments")
        leaves, treedef = _tree.flatten(tuple(args))
        specs = _spec_leaves(tuple(in_specs), tuple(args), "in_specs", self._name)
        if not leaves:
            # No argument with an array (f() itself, or empty containers): the engine counts the devices by a
            # mapped argument, so the program takes one placeholder the function never sees (_trace).
            leaves, specs = [_NO_ARGUMENTS], [P()]
        return leaves, treedef, specs

    # ---- specs and blocks --------------------------------------------------------------------------------
    def _check_spec(self, spec, rank, what):
        if not isinstance(spec, P):
            raise _weft.InvalidArgument(f"{self._name}: the spec of {what} must be a weft.P, got {spec!r}")
        if len(spec) > rank:
            raise _weft.InvalidArgument(f"{self._name}: {spec!r} names {len(spec)} dimensions but {what} has rank "
                                        f"{rank}")
        seen = set()
        for a in spec.axes():
            if a not in self._mesh.shape:
                raise _weft.InvalidArgument(f"{self._name}: {spec!r} of {what} names axis '{a}', which the mesh "
                                            f"{self._mesh!r} does not have")
            if a in seen:
                raise _weft.InvalidArgument(f"{self._name}: {spec!r} of {what} names axis '{a}' twice")
            seen.add(a)

    def _block_shape(self, shape, spec, index):
        block = list(shape)
        for d, part in enumerate(spec):
            n = int(_np.prod([self._mesh.shape[a] for a in part], dtype=_np.int64))
            if block[d] % n:
                raise _weft.InvalidArgument(
                    f"{self._name}: argument {index} of shape {tuple(shape)} cannot be split by {spec!r}: dimension "
                    f"{d} ({shape[d]}) is not a multiple of {n}, the size of mesh axes {part}")
            block[d] //= n
        return tuple(block)

    def _split(self, array, spec, xp=_np):
        """The blocks of `array` stacked by device: shape (*mesh sizes, *block), block [i, j, ...] the part
        of the device at mesh coordinates (i, j, ...). `xp`: numpy, or weft.numpy on a tracer (in a trace)."""
        sizes = list(self._mesh.devices.shape)
        names = list(self._mesh.axis_names)
        # array's dimension d becomes (sizes of spec[d]'s axes..., block d); then the mesh axes go first, in
        # mesh order, each named one taken from its place, each unnamed one broadcast.
        shape, axis_dims = [], {}
        for d in range(array.ndim):
            part = spec[d] if d < len(spec) else ()
            for a in part:
                axis_dims[a] = len(shape)
                shape.append(self._mesh.shape[a])
            shape.append(array.shape[d] // int(_np.prod([self._mesh.shape[a] for a in part], dtype=_np.int64)))
        split = xp.reshape(array, shape)
        block_dims = [k for k in range(len(shape)) if k not in axis_dims.values()]
        order = [axis_dims[a] for a in names if a in axis_dims] + block_dims
        moved = xp.transpose(split, order)
        # Unnamed mesh axes: a size-1 dimension broadcast to the axis' size.
        full_shape, expand = [], []
        for a, n in zip(names, sizes):
            full_shape.append(n)
            if a not in axis_dims:
                expand.append(names.index(a))
        for pos in expand:
            moved = xp.expand_dims(moved, pos)
        moved = xp.broadcast_to(moved, tuple(full_shape) + tuple(moved.shape[len(sizes):]))
        return _np.ascontiguousarray(moved) if xp is _np else moved

    def _assemble(self, stacked, spec, local=None, output=0, xp=_np):
        """The global array from the devices' blocks: the axes the spec names concatenated along their
        dimensions, the others read at any one coordinate (the same there by check_vma). `stacked` holds every
        device's block as (*mesh sizes, *block), or, across processes, only this process's (local: their
        flat mesh positions), which must then hold a block for every coordinate of the named axes."""
        names = list(self._mesh.axis_names)
        named = spec.axes()
        kept = [a for a in names if a in named]
        if local is None:
            index = tuple(slice(None) if a in named else 0 for a in names)
            blocks = stacked[index]  # (*kept mesh axes, *block)
        else:
            blocks = self._local_blocks(stacked, local, kept, spec, output)
        rank = blocks.ndim - len(kept)
        order, shape = [], []
        for d in range(rank):
            part = spec[d] if d < len(spec) else ()
            for a in part:
                order.append(kept.index(a))
            order.append(len(kept) + d)
            shape.append(blocks.shape[len(kept) + d] * int(_np.prod([self._mesh.shape[a] for a in part],
                                                                      dtype=_np.int64)))
        if xp is not _np:  # a tracer (in a trace)
            return xp.reshape(xp.transpose(blocks, order), shape)
        return _np.ascontiguousarray(blocks.transpose(order)).reshape(shape)

    def _local_blocks(self, stacked, local, kept, spec, output):
        """(*kept mesh axes, *block) from this process's blocks (stacked in the order of `local`)."""
        names = list(self._mesh.axis_names)
        sizes = [self._mesh.shape[a] for a in kept]
        blocks = _np.empty(sizes + list(stacked.shape[1:]), stacked.dtype)
        have = _np.zeros(sizes, bool)
        for k, position in enumerate(local):
            coords = _np.unravel_index(position, self._mesh.devices.shape)
            at = tuple(int(coords[names.index(a)]) for a in kept)
            if not have[at]:
                blocks[at] = stacked[k]
                have[at] = True
        if not have.all():  # (_unaddressable said it could: every coordinate has a device here)
            raise _weft.InvalidArgument(f"weft internal error: {self._name}: output {output} lacks blocks here")
        return blocks

    # ---- the program -------------------------------------------------------------------------------------
    def _trace(self, types, specs, treedef, captured=None):
        mesh = [(a, int(n)) for a, n in self._mesh.shape.items()]
        in_types = [(dtype, shape, tuple(sorted(spec.axes())), weak) for (dtype, shape, weak), spec in zip(types, specs)]
        fun = self._fun
        if _tree.count_leaves(treedef) != len(types):  # the placeholder of a call without arrays (_entry)
            empty, fun, treedef = treedef, (lambda _: self._fun(*_tree.unflatten(empty, []))), _tree.flat_tuple(1)
        program, out_def = trace_function(fun, in_types, treedef, mesh, self._name, captured,
                                          shard_map_rules=self._check_vma)
        out_types = program.output_types
        out_specs = _spec_leaves(self._out_specs, _tree.unflatten(out_def, list(range(len(out_types)))),
                                 "out_specs", self._name)
        for index, ((dtype, shape, varying), spec) in enumerate(zip(out_types, out_specs)):
            self._check_spec(spec, len(shape), f"output {index}")
            if self._check_vma:
                missing = [a for a in varying if a not in spec.axes()]
                if missing:
                    raise _weft.InvalidArgument(
                        f"{self._name}: output {index} ({_np.dtype(dtype).name}{list(shape)}) varies over mesh axes "
                        f"{tuple(missing)} but its out_spec {spec!r} does not name them: the result would be one "
                        f"device's block, not the same on every device (psum or all_gather it over "
                        f"{tuple(missing)}, or name the axes in out_specs)")
        return _Traced(program, out_def, out_specs)


class _Infer:
    """in_specs' default in jax.shard_map (jax.sharding.Infer): the specs read from the arguments' shardings."""

    def __repr__(self):
        return "weft.shard_map's Infer"


_INFER = _Infer()
_REQUIRED = object()


def shard_map(f=None, mesh=None, in_specs=_INFER, out_specs=_REQUIRED, check_vma=True, check_rep=None,
              auto=frozenset(), *, axis_names=frozenset()):
    """jax.shard_map and jax.experimental.shard_map.shard_map in one: `f` on every device of `mesh`, each seeing
    its block of every argument (in_specs), the blocks of its results put together by out_specs.

    Both JAX forms: shard_map(f, mesh, in_specs, out_specs) (the experimental one; `check_rep`, its older name
    of check_vma, and `auto` too) and jax.shard_map's keywords, shard_map(f, mesh=..., in_specs=...,
    out_specs=..., axis_names=..., check_vma=...), with `f` left out for the decorator
    @shard_map(mesh=..., in_specs=..., out_specs=...). weft has no context mesh (jax.set_mesh) and no explicit
    shardings to infer in_specs from, so both are required; axis_names may name every mesh axis or none (f
    manual over all of them); partially manual (auto) axes are refused."""
    if out_specs is _REQUIRED:
        raise TypeError("weft.shard_map: missing the required argument 'out_specs' (the PartitionSpecs that put the "
                        "results together)")
    if f is None:
        return functools.partial(shard_map, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma,
                                 check_rep=check_rep, auto=auto, axis_names=axis_names)
    if not callable(f):
        raise TypeError(f"shard_map requires a callable for its first argument, but got {f} of type {type(f)}.")
    label = getattr(f, "__name__", None) or "f"
    name = f"shard_map({label})"
    if mesh is None:
        raise _weft.InvalidArgument(f"{name}: mesh is required: weft has no context mesh (jax.set_mesh is not "
                                    "supported); pass mesh=weft.Mesh(...)")
    if in_specs is _INFER:
        raise _weft.InvalidArgument(f"{name}: in_specs is required: JAX infers it only from arguments sharded over "
                                    "Explicit mesh axes, which weft's meshes do not have; pass a weft.P per argument")
    if in_specs is None:
        raise _weft.InvalidArgument(f"{name}: in_specs=None (every argument static) is not supported; give each "
                                    "argument a weft.P, or close over static values")
    if not isinstance(axis_names, (set, frozenset)):
        raise TypeError(f"{name}: `axis_names` argument of shard_map should be of type `frozenset` or `set`. Got "
                        f"type: {type(axis_names)}")
    if isinstance(mesh, Mesh) and axis_names:
        if not set(axis_names) <= set(mesh.axis_names):
            raise _weft.InvalidArgument(f"{name}: jax.shard_map requires axis_names={set(axis_names)} to be a subset "
                                        f"of mesh.axis_names={set(mesh.axis_names)}")
        auto = frozenset(auto) | (frozenset(mesh.axis_names) - frozenset(axis_names))
    if auto:
        raise _weft.InvalidArgument(f"{name}: partially automatic axes ({sorted(auto)}: auto, or axis_names leaving "
                                    "them out) are not supported by weft; f is manual over every mesh axis")
    if check_rep is not None:
        check_vma = bool(check_rep)
    return _ShardMapped(f, mesh, in_specs, out_specs, bool(check_vma), name)
