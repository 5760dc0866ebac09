"""popxl.Session: runs an Ir's main graph on every replica, over the Ir's weft.Session.

The recorded graph is lowered once to a C++ program (weft/program.hpp: the same op names; its streams,
buffers and variables named by their popxl names), and `session.run(inputs)` runs that program on every
replica in C++ (weft::Session::run of a program: no Python and no GIL in the replicas). An error in an
equation names the equation, as the program prints it, and the user's line that recorded it.

Attach and detach as PopXL: entering `with session:` sends the weights to the replicas (weights_from_host),
leaving it fetches them (weights_to_host); run() needs the session attached. get_tensor_data,
weights_to_host / weights_from_host and write_variable_data are weft.Session's.
"""
import numpy as _np

import weft as _weft
from weft import _weft as _ext

from weft._session import _stream_input

from ._graph import Constant
from ._state import DeviceToHostStream, HostToDeviceStream, Variable

_DEVICES = ("ipu_hw", "ipu_model", "cpu")


# ---- lowering: the recorded graph as a C++ program ----------------------------------------------------------
# The graph's ops are the program layer's (its names and parameters); what the graph holds as Python objects
# (streams, buffers, variables, groupings) becomes names and index lists the program's equations carry.
_EFFECT_HANDLE = {"host_load": ("stream", "streams"), "host_store": ("stream", "streams"),
                  "remote_load": ("buffer", "buffers"), "remote_store": ("buffer", "buffers"),
                  "variable_read": ("variable", "variables"), "variable_update": ("variable", "variables")}
_COLLECTIVES = {"psum", "pmean", "pmax", "pmin", "pprod", "all_gather", "gather_shards", "replicated_reduce_scatter",
                "replica_sharded_slice"}
_ARRAY_OPS = {"add", "subtract", "multiply", "divide", "negative", "matmul"}
SUPPORTED = frozenset(_EFFECT_HANDLE) | _COLLECTIVES | _ARRAY_OPS


class _Handles:
    """The handles a program names, each under the user's name (made unique) of its popxl object."""

    def __init__(self):
        self.by_kind = {"streams": {}, "buffers": {}, "variables": {}}
        self._names = {}

    def name(self, kind, obj):
        known = self._names.get(id(obj))
        if known is not None:
            return known
        base = getattr(obj, "_name", None) or kind[:-1]
        name, k = base, 1
        while name in self.by_kind[kind]:
            name, k = f"{base}_{k}", k + 1
        self.by_kind[kind][name] = obj._weft
        self._names[id(obj)] = name
        return name


def lower(graph, replicas):
    """(weft._weft.Program, handles) for `graph` over `replicas` replicas (the session's mesh: ('replica',))."""
    builder = _ext.ProgramBuilder([("replica", int(replicas))])
    handles = _Handles()
    ids = {}
    for value, data in graph.constants.items():
        ids[value] = builder.constant(_np.ascontiguousarray(data) if _np.ndim(data) else _np.array(data))[0]
    for eq in graph.equations:
        p, params = eq.params, []
        if eq.op in _EFFECT_HANDLE:
            key, kind = _EFFECT_HANDLE[eq.op]
            params.append((key, "str", handles.name(kind, p[key])))
            if "shape" in p:
                params += [("shape", "ints", [int(d) for d in p["shape"]]), ("dtype", "dtype", _np.dtype(p["dtype"]))]
        elif eq.op in _COLLECTIVES:
            params.append(("axes", "strs", ["replica"]))
            groups = p.get("groups")
            if groups is not None:
                params.append(("groups", "groups", [[int(m) for m in g] for g in groups.groups]))
            if eq.op == "all_gather":
                params += [("axis", "int", int(p["axis"])), ("tiled", "bool", bool(p["tiled"]))]
            if eq.op == "gather_shards":
                params.append(("shape", "ints", [int(d) for d in p["shape"]]))
            if eq.op == "replicated_reduce_scatter":
                params.append(("op", "str", str(p["reduce"])))
        outs = builder.emit(eq.op, [ids[v] for v in eq.inputs], params, eq.where)
        for value, (ident, typ) in zip(eq.outputs, outs):
            if _np.dtype(typ[0]) != value.dtype:  # the graph's own dtype rule (popxl's) decides the stored type
                ident = builder.emit("astype", [ident], [("dtype", "dtype", value.dtype)], eq.where)[0][0]
            ids[value] = ident
    builder.set_outputs([])
    return builder.build(), handles.by_kind


class Session:
    """popxl.Session(ir, device_desc="ipu_hw" | "ipu_model" | "cpu"): every device is weft's CPU devices."""

    def __init__(self, ir, device_desc="ipu_hw", weights_to_host_on_exit=True):
        if device_desc not in _DEVICES:
            raise ValueError(f"popxl.Session: device_desc={device_desc!r} is none of {', '.join(_DEVICES)} (weft runs "
                             "every one on its CPU devices)")
        for eq in ir.main_graph.equations:
            if eq.op not in SUPPORTED:
                raise NotImplementedError(f"popxl.Session: the graph's op {eq.op!r} (recorded at {eq.where}) has no "
                                          "weft implementation")
        self.ir, self.device_desc = ir, device_desc
        self._session = ir._freeze()
        self._program, self._handles = lower(ir.main_graph, ir.replication_factor)
        self._weights_to_host_on_exit = weights_to_host_on_exit
        self._attached = False
        self._streams = {}  # weft HostStream -> popxl stream (run()'s keys)
        for handle, _ in ir._log:
            if isinstance(handle, (HostToDeviceStream, DeviceToHostStream)):
                self._streams[handle._weft] = handle

    # ---- attach / detach ---------------------------------------------------------------------------------
    is_attached = property(lambda self: self._attached)

    def __enter__(self):
        if not self._attached:
            self._session.weights_from_host()
            self._attached = True
        return self

    def __exit__(self, *exc):
        if self._attached and self._weights_to_host_on_exit and exc[0] is None:
            self._session.weights_to_host()
        self._attached = False
        return False

    # ---- running -----------------------------------------------------------------------------------------
    def run(self, inputs=None, downcast_inputs=True):
        """One run of the main graph on every replica. inputs: {h2d stream: array shaped (num_host_transfers if
        > 1) + (ir.instance_replication_factor if > 1) + stream shape}; returns {d2h stream: array} shaped alike."""
        if not self._attached:
            raise ValueError("popxl.Session.run: the session is not attached to its device: run inside `with session:`")
        given = {}
        for stream, data in dict(inputs or {}).items():
            if not isinstance(stream, HostToDeviceStream):
                raise ValueError(f"popxl.Session.run: input key {stream!r} is not a popxl.h2d_stream of this Ir")
            given[stream._weft] = data
        h = self._handles
        given = {stream: _stream_input(stream, data) for stream, data in given.items()}
        outs = self._session.run_program(self._program, h["variables"], h["buffers"], h["streams"], given)
        return {self._streams[stream]: data for stream, data in outs.items()}

    @property
    def program(self):
        """The C++ program every replica runs (prints like a jaxpr)."""
        return self._program

    def run_with_outputs(self, inputs, outputs):
        outputs.update(self.run(inputs))

    def expected_inputs(self):
        return [h for h, _ in self.ir._log if isinstance(h, HostToDeviceStream)]

    # ---- weights -----------------------------------------------------------------------------------------
    def weights_from_host(self):
        self._session.weights_from_host()

    def weights_to_host(self):
        self._session.weights_to_host()

    def get_tensor_data(self, tensor):
        """A variable's value as retrieval_mode says (weft.Session.get_tensor_data), or a constant's data."""
        if isinstance(tensor, Constant):
            return _np.array(self.ir.main_graph.constants[tensor._value])
        if not isinstance(tensor, Variable):
            raise TypeError(f"popxl.Session.get_tensor_data: {tensor!r} is neither a variable nor a constant "
                            "(other tensors exist only during a run: host_store them to a d2h_stream)")
        return self._session.get_tensor_data(tensor._variable._weft)

    def get_tensors_data(self, tensors):
        return {t: self.get_tensor_data(t) for t in tensors}

    def write_variable_data(self, tensor, data):
        if not isinstance(tensor, Variable):
            raise TypeError(f"popxl.Session.write_variable_data: {tensor!r} is not a variable")
        self._session.write_variable_data(tensor._variable._weft, _np.asarray(data))

    def write_variables_data(self, tensors_data):
        for tensor, data in tensors_data.items():
            self.write_variable_data(tensor, data)

    def __repr__(self):
        return f"popxl.Session({self.ir!r}, {self.device_desc!r})"
