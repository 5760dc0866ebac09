"""A Tracer's operators and array methods (x + y, x @ w, x.sum(), x[1:], x.T, numpy's ufuncs on it), each the
weft.numpy function of that name (weft/_jnp.py).

They are set on weft._trace.Tracer here, when the package is imported (weft/__init__.py), rather than defined
in its class: the numpy layer builds on the tracing layer (_jnp imports _trace), so the tracing layer cannot
import it back without a circle (JAX sets its tracers' array methods from jax.numpy the same way).
"""
from . import _jnp
from ._trace import Tracer, conversion_error

# Binary operators: dunder stem -> weft.numpy function; each has its reflected twin (tracer on the right).
_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "pow": "power",
           "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor"}
# Comparisons: dunder stem -> weft.numpy function (Python reflects them itself: a < t is t > a).
_COMPARISONS = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal", "eq": "equal",
                "ne": "not_equal"}
_UNARY = {"neg": "negative", "abs": "abs", "invert": "bitwise_not"}

# numpy ufuncs a Tracer takes part in as an operand (np_array * tracer), by their weft.numpy names.
_UFUNCS = {"add": "add", "subtract": "subtract", "multiply": "multiply", "true_divide": "divide", "divide": "divide",
           "power": "power", "matmul": "matmul", "maximum": "maximum", "minimum": "minimum", "equal": "equal",
           "not_equal": "not_equal", "less": "less", "less_equal": "less_equal", "greater": "greater",
           "greater_equal": "greater_equal", "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or",
           "bitwise_xor": "bitwise_xor", "negative": "negative"}


def _binary(function):
    return (lambda self, other: function(self, other)), (lambda self, other: function(other, self))


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    name = _UFUNCS.get(ufunc.__name__)
    if method != "__call__" or name is None or kwargs:
        raise conversion_error(f"numpy.{ufunc.__name__}")
    return getattr(_jnp, name)(*inputs)


def _reshape(self, *shape, order="C"):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return _jnp.reshape(self, shape, order=order)


def _transpose(self, *axes):
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    return _jnp.transpose(self, axes or None)


_METHODS = {
    "__array_ufunc__": _array_ufunc,
    "__pos__": lambda self: self,
    "__getitem__": lambda self, index: _jnp._getitem(self, index),
    "T": property(lambda self: _jnp.transpose(self)),
    "reshape": _reshape,
    "transpose": _transpose,
    "sum": lambda self, axis=None, dtype=None, keepdims=False: _jnp.sum(self, axis=axis, dtype=dtype, keepdims=keepdims),
    "mean": lambda self, axis=None, dtype=None, keepdims=False: _jnp.mean(self, axis=axis, dtype=dtype, keepdims=keepdims),
    "max": lambda self, axis=None, keepdims=False: _jnp.max(self, axis=axis, keepdims=keepdims),
    "min": lambda self, axis=None, keepdims=False: _jnp.min(self, axis=axis, keepdims=keepdims),
    "argmax": lambda self, axis=None, keepdims=False: _jnp.argmax(self, axis=axis, keepdims=keepdims),
    "argmin": lambda self, axis=None, keepdims=False: _jnp.argmin(self, axis=axis, keepdims=keepdims),
    "astype": lambda self, dtype: _jnp.asarray(self, dtype=dtype, what="astype"),
    "squeeze": lambda self, axis=None: _jnp.squeeze(self, axis),
    "swapaxes": lambda self, a, b: _jnp.swapaxes(self, a, b),
    "ravel": lambda self: _jnp.reshape(self, (-1,)),
    "flatten": lambda self: _jnp.reshape(self, (-1,)),
}


def _install():
    for stem, name in _BINARY.items():
        forward, reflected = _binary(getattr(_jnp, name))
        setattr(Tracer, f"__{stem}__", forward)
        setattr(Tracer, f"__r{stem}__", reflected)
    for stem, name in _COMPARISONS.items():
        setattr(Tracer, f"__{stem}__", _binary(getattr(_jnp, name))[0])
    for stem, name in _UNARY.items():
        function = getattr(_jnp, name)
        setattr(Tracer, f"__{stem}__", lambda self, function=function: function(self))
    for name, method in _METHODS.items():
        setattr(Tracer, name, method)


_install()
