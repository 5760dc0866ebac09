"""weft.ops: PopXL's ops that move data on a replica, called inside a Session's program.

    host_load(stream) / host_store(stream, t)      popxl.ops.host_load / host_store
    remote_load(buffer, entry) / remote_store(...)  popxl.ops.remote_load / remote_store
    read(variable) / write(variable, value)         the replica's value of an on-device variable
    add_(variable, value)                           popxl.ops.add_ on a variable: variable += value

Values are numpy arrays; a variable's value is immutable, so in-place updates go through write / add_.

And weft's array math (include/weft/ops.hpp), as PopXL's ops module has it: matmul (transpose_a/b) and matmul_backend(),
transpose, exp log log1p tanh sqrt rsqrt abs negative sign sigmoid relu, maximum minimum where clip,
softmax log_softmax logsumexp, sum mean max min (axis: int, tuple or None; keepdims), argmax argmin, one_hot,
take. numpy in, numpy out (read-only); JAX's dtype rules (float32 stays float32, a Python number takes the
array's dtype); computed by weft's Eigen kernels with the GIL released, so the replicas of a pmap that call
them run in parallel. Errors are weft.InvalidArgument naming the op and the rule.
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


# The array math (defined last: it shadows the builtins abs, sum, max and min in this module only).
from ._weft import array_ops as _array_ops  # noqa: E402

matmul = _array_ops.matmul
matmul_backend = _array_ops.matmul_backend
transpose = _array_ops.transpose
exp = _array_ops.exp
log = _array_ops.log
log1p = _array_ops.log1p
tanh = _array_ops.tanh
sqrt = _array_ops.sqrt
rsqrt = _array_ops.rsqrt
abs = _array_ops.abs  # noqa: A001
negative = _array_ops.negative
sign = _array_ops.sign
sigmoid = _array_ops.sigmoid
relu = _array_ops.relu
maximum = _array_ops.maximum
minimum = _array_ops.minimum
where = _array_ops.where
clip = _array_ops.clip
softmax = _array_ops.softmax
log_softmax = _array_ops.log_softmax
logsumexp = _array_ops.logsumexp
sum = _array_ops.sum  # noqa: A001
mean = _array_ops.mean
max = _array_ops.max  # noqa: A001
min = _array_ops.min  # noqa: A001
argmax = _array_ops.argmax
argmin = _array_ops.argmin
one_hot = _array_ops.one_hot
take = _array_ops.take
