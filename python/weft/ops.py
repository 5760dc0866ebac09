"""weft.ops: PopXL's ops that move data on a replica, called inside a Session's program.

    host_load(stream) / host_store(stream, t)      popxl.ops.host_load / host_store
    remote_load(buffer, entry) / remote_store(...)  popxl.ops.remote_load / remote_store
    read(variable) / write(variable, value)         the replica's value of an on-device variable
    add_(variable, value)                           popxl.ops.add_ on a variable: variable += value

Values are numpy arrays; a variable's value is immutable, so in-place updates go through write / add_.
"""
import numpy as _np

from . import _weft
from . import collectives  # noqa: F401  (popxl.ops.collectives)


def host_load(stream, name=None):
    return _weft.host_load(stream)


def host_store(stream, t):
    _weft.host_store(stream, t)


def remote_load(buffer, entry=0, name=None):
    return _weft.remote_load(buffer, int(entry))


def remote_store(buffer, entry, t):
    _weft.remote_store(buffer, int(entry), t)


def read(variable):
    return _weft.variable_value(variable)


def write(variable, value):
    _weft.variable_assign(variable, _np.asarray(value, dtype=variable.dtype))


def add_(variable, value):
    """variable += value (broadcast), keeping the variable's dtype; returns the new value."""
    new = _np.asarray(read(variable) + _np.asarray(value), dtype=variable.dtype)
    write(variable, new)
    return read(variable)
