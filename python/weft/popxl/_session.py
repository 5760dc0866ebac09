"""popxl.Session: runs an Ir's main graph on every replica, over the Ir's weft.Session.

`session.run(inputs)` is one weft.Session.run whose program, on each replica, interprets the recorded
equations in order: the transfers, variable reads and updates and collectives call weft.ops /
weft.collectives (the same C++ paths a weft.Session program uses); the elementwise ops and matmul compute
with numpy on the replica's values. An error in an equation is raised again with the equation's text and
the user's line that recorded it.

Attach and detach as PopXL: entering `with session:` sends the weights to the replicas (weights_from_host),
leaving it fetches them (weights_to_host); run() needs the session attached. get_tensor_data,
weights_to_host / weights_from_host and write_variable_data are weft.Session's.
"""
import numpy as _np

import weft as _weft
from weft import _weft as _ext

from ._graph import Constant
from ._state import DeviceToHostStream, HostToDeviceStream, Variable

_DEVICES = ("ipu_hw", "ipu_model", "cpu")


# ---- the interpreter: one function per op, (replica values of the inputs, params) -> outputs --------------
def _reduce(op):
    return lambda ins, p: [_weft.collectives.replicated_all_reduce(ins[0], op, p["groups"])]


def _elementwise(fn):
    def run(ins, p, out_types):
        return [_np.asarray(fn(*ins), dtype=out_types[0].dtype)]
    run.typed = True
    return run


def _all_gather(ins, p):
    return [_ext.all_gather_groups(ins[0], p["groups"], p["axis"], p["tiled"])]


_RUN = {
    "host_load": lambda ins, p: [_weft.ops.host_load(p["stream"]._weft)],
    "host_store": lambda ins, p: _weft.ops.host_store(p["stream"]._weft, ins[0]) or [],
    "remote_load": lambda ins, p: [_weft.ops.remote_load(p["buffer"]._weft, int(ins[0]))],
    "remote_store": lambda ins, p: _weft.ops.remote_store(p["buffer"]._weft, int(ins[1]), ins[0]) or [],
    "variable_read": lambda ins, p: [_weft.ops.read(p["variable"]._weft)],
    "variable_update": lambda ins, p: _weft.ops.write(p["variable"]._weft, ins[0]) or [],
    "add": _elementwise(_np.add),
    "subtract": _elementwise(_np.subtract),
    "multiply": _elementwise(_np.multiply),
    "divide": _elementwise(_np.divide),
    "negative": _elementwise(_np.negative),
    "matmul": lambda ins, p: [_weft.ops.matmul(ins[0], ins[1])],
    "psum": _reduce("add"),
    "pmean": _reduce("mean"),
    "pmax": _reduce("max"),
    "pmin": _reduce("min"),
    "pprod": _reduce("mul"),
    "all_gather": _all_gather,
    "gather_shards": lambda ins, p: [_weft.collectives.replicated_all_gather(ins[0], p["groups"], p["shape"])],
    "replicated_reduce_scatter": lambda ins, p: [
        _weft.collectives.replicated_reduce_scatter(ins[0], p["reduce"], p["groups"])],
    "replica_sharded_slice": lambda ins, p: [_weft.collectives.replica_sharded_slice(ins[0], p["groups"])],
}


def _annotated(error, graph, index, eq):
    where = (f"{eq.op}: in popxl graph {graph.name!r}, equation {index} `{eq.text()}` (recorded at {eq.where}): "
             f"{error}")
    try:
        again = type(error)(where)
    except Exception:  # an exception type that cannot be made from one message
        error.add_note(where)
        return error
    return again


def interpret(graph):
    """The program one replica runs for `graph`: its equations in order over this replica's values."""
    equations, constants = list(graph.equations), dict(graph.constants)

    def program():
        env = dict(constants)
        for index, eq in enumerate(equations):
            fn = _RUN[eq.op]
            ins = [env[v] for v in eq.inputs]
            try:
                outs = fn(ins, eq.params, eq.outputs) if getattr(fn, "typed", False) else fn(ins, eq.params)
            except Exception as error:
                again = _annotated(error, graph, index, eq)
                if again is error:
                    raise
                raise again from error
            for value, data in zip(eq.outputs, outs):
                env[value] = data
    return program


class Session:
    """popxl.Session(ir, device_desc="ipu_hw" | "ipu_model" | "cpu"): every device is weft's CPU devices."""

    def __init__(self, ir, device_desc="ipu_hw", weights_to_host_on_exit=True):
        if device_desc not in _DEVICES:
            raise ValueError(f"popxl.Session: device_desc={device_desc!r} is none of {', '.join(_DEVICES)} (weft runs "
                             "every one on its CPU devices)")
        for eq in ir.main_graph.equations:
            if eq.op not in _RUN:
                raise NotImplementedError(f"popxl.Session: the graph's op {eq.op!r} (recorded at {eq.where}) has no "
                                          "weft implementation")
        self.ir, self.device_desc = ir, device_desc
        self._session = ir._freeze()
        self._program = interpret(ir.main_graph)
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
        outs = self._session.run(given, program=self._program)
        return {self._streams[stream]: data for stream, data in outs.items()}

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
