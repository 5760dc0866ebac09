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

from . import _jnp, nn as _nn  # noqa: E402
from ._trace import Tracer as _Tracer  # noqa: E402


def _traceable(concrete, traced):
    """`concrete` (weft's kernel) on concrete values; `traced` (program equations) when a tracer is given."""
    def fn(*args, **kwargs):
        if any(isinstance(a, _Tracer) for a in args) or any(isinstance(v, _Tracer) for v in kwargs.values()):
            return traced(*args, **kwargs)
        return concrete(*args, **kwargs)
    fn.__name__ = getattr(concrete, "__name__", "op")
    fn.__doc__ = getattr(concrete, "__doc__", None)
    return fn


def _traced_matmul(a, b, transpose_a=False, transpose_b=False):
    # The transposes stay flags of the equation (no copy), as weft::MatmulOptions.
    if not (transpose_a or transpose_b):
        return _jnp.matmul(a, b)
    params = [("transpose_a", True)] if transpose_a else []
    params += [("transpose_b", True)] if transpose_b else []
    return _jnp._traced("matmul", (a, b), params)


matmul = _traceable(_array_ops.matmul, _traced_matmul)
matmul_backend = _array_ops.matmul_backend
transpose = _traceable(_array_ops.transpose, lambda x, perm=None: _jnp.transpose(x, perm or None))
exp = _traceable(_array_ops.exp, _jnp.exp)
log = _traceable(_array_ops.log, _jnp.log)
log1p = _traceable(_array_ops.log1p, _jnp.log1p)
tanh = _traceable(_array_ops.tanh, _jnp.tanh)
sqrt = _traceable(_array_ops.sqrt, _jnp.sqrt)
rsqrt = _traceable(_array_ops.rsqrt, lambda x: _jnp.bind("rsqrt", [x]))
abs = _traceable(_array_ops.abs, _jnp.abs)  # noqa: A001
negative = _traceable(_array_ops.negative, _jnp.negative)
sign = _traceable(_array_ops.sign, _jnp.sign)
sigmoid = _traceable(_array_ops.sigmoid, _nn.sigmoid)
relu = _traceable(_array_ops.relu, _nn.relu)
maximum = _traceable(_array_ops.maximum, _jnp.maximum)
minimum = _traceable(_array_ops.minimum, _jnp.minimum)
where = _traceable(_array_ops.where, _jnp.where)
clip = _traceable(_array_ops.clip, _jnp.clip)
softmax = _traceable(_array_ops.softmax, _nn.softmax)
log_softmax = _traceable(_array_ops.log_softmax, _nn.log_softmax)
logsumexp = _traceable(_array_ops.logsumexp, _nn.logsumexp)
sum = _traceable(_array_ops.sum, lambda x, axis=None, keepdims=False: _jnp.sum(x, axis=axis, keepdims=keepdims))  # noqa: A001
mean = _traceable(_array_ops.mean, lambda x, axis=None, keepdims=False: _jnp.mean(x, axis=axis, keepdims=keepdims))
max = _traceable(_array_ops.max, lambda x, axis=None, keepdims=False: _jnp.max(x, axis=axis, keepdims=keepdims))  # noqa: A001
min = _traceable(_array_ops.min, lambda x, axis=None, keepdims=False: _jnp.min(x, axis=axis, keepdims=keepdims))  # noqa: A001
argmax = _traceable(_array_ops.argmax, lambda x, axis=None, keepdims=False: _jnp.argmax(x, axis, keepdims))
argmin = _traceable(_array_ops.argmin, lambda x, axis=None, keepdims=False: _jnp.argmin(x, axis, keepdims))
one_hot = _traceable(_array_ops.one_hot, _nn.one_hot)
take = _traceable(_array_ops.take, _jnp.take)
