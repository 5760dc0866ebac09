"""popxl.Session: runs an Ir's main graph on every replica, over the Ir's weft.Session.

The recorded graph is lowered once to a C++ program (_lower.py; weft/program.hpp: the same op names; its streams,
buffers and variables named by their popxl names), and `session.run(inputs)` runs that program on every
replica in C++ (weft::Session::run of a program: no Python and no GIL in the replicas). An error in an
equation names the equation, as the program prints it, and the user's line that recorded it.

Attach and detach as PopXL: entering `with session:` while detached attaches and sends the weights to the
replicas (weights_from_host); leaving that context fetches them (weights_to_host) and detaches. A `with
session:` entered while already attached (nested) changes nothing on entry or exit, so the session stays
attached until the context that attached it ends; run() needs the session attached. get_tensor_data,
weights_to_host / weights_from_host and write_variable_data are weft.Session's.
"""
import numpy as _np


from weft._session import _stream_input

from ._graph import Constant
from ._lower import SUPPORTED, all_equations, lower
from ._state import DeviceToHostStream, HostToDeviceStream, Variable

_DEVICES = ("ipu_hw", "ipu_model", "cpu")


class Session:
    """popxl.Session(ir, device_desc="ipu_hw" | "ipu_model" | "cpu"): every device is weft's CPU devices."""

    def __init__(self, ir, device_desc="ipu_hw", weights_to_host_on_exit=True):
        if device_desc not in _DEVICES:
            raise ValueError(f"popxl.Session: device_desc={device_desc!r} is none of {', '.join(_DEVICES)} (weft runs "
                             "every one on its CPU devices)")
        for eq in all_equations(ir.main_graph):
            if eq.op not in SUPPORTED:
                raise NotImplementedError(f"popxl.Session: the graph's op {eq.op!r} (recorded at {eq.where}) has no "
                                          "weft implementation")
        self.ir, self.device_desc = ir, device_desc
        self._session = ir._freeze()
        self._program, self._handles = lower(ir.main_graph, ir.replication_factor)
        self._weights_to_host_on_exit = weights_to_host_on_exit
        self._attached = False
        # One entry per `with session:` being run: whether the session was attached when it was entered (PopXL's
        # _was_attached_stack): only a context that attached the session detaches it.
        self._was_attached = []
        self._streams = {}  # weft HostStream -> popxl stream (run()'s keys)
        for handle, _ in ir._log:
            if isinstance(handle, (HostToDeviceStream, DeviceToHostStream)):
                self._streams[handle._weft] = handle

    # ---- attach / detach ---------------------------------------------------------------------------------
    is_attached = property(lambda self: self._attached)

    def __enter__(self):
        was_attached = self._attached
        if not was_attached:
            self._session.weights_from_host()
            self._attached = True
        self._was_attached.append(was_attached)
        return self

    def __exit__(self, *exc):
        if not self._was_attached.pop():
            if self._weights_to_host_on_exit and exc[0] is None:
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
