"""weft.nn: jax.nn's names for weft's array math: relu, gelu, sigmoid, softmax, log_softmax, logsumexp,
one_hot; and layer_norm (flax's arithmetic, fused on tracers). On concrete numpy arrays: weft's kernels (the same as weft.ops), float32 stays float32; on tracers
(weft.jit, traced weft.pmap): program equations."""
from ._weft import array_ops as _array_ops
from ._trace import Tracer as _Tracer, bind as _bind
from . import _dtypes, _jnp

_canonical = _dtypes.canonical_array  # a concrete input as JAX holds it (64-bit narrowed with x64 off)


def relu(x):
    return _bind("relu", [x]) if isinstance(x, _Tracer) else _array_ops.relu(_canonical(x))


def sigmoid(x):
    return _bind("sigmoid", [x]) if isinstance(x, _Tracer) else _array_ops.sigmoid(_canonical(x))


def softmax(x, axis=-1):
    return _jnp.softmax_traced(x, axis) if isinstance(x, _Tracer) else _array_ops.softmax(_canonical(x), axis)


def log_softmax(x, axis=-1):
    return _jnp.log_softmax_traced(x, axis) if isinstance(x, _Tracer) else _array_ops.log_softmax(_canonical(x), axis)


def logsumexp(x, axis=-1, keepdims=False):
    if isinstance(x, _Tracer):
        return _jnp.logsumexp_traced(x, axis, keepdims)
    return _array_ops.logsumexp(_canonical(x), axis, keepdims)


def one_hot(x, num_classes, dtype=None):
    dtype = _dtypes.default_float() if dtype is None else _dtypes.requested(dtype, "one_hot")
    if isinstance(x, _Tracer):
        return _jnp.one_hot_traced(x, num_classes, dtype)
    return _array_ops.one_hot(x, num_classes, dtype)


def gelu(x, approximate=True):
    """jax.nn.gelu (tanh approximation by default, as JAX)."""
    if isinstance(x, _Tracer):
        return _jnp.gelu_traced(x, approximate)
    import numpy as np
    x = _jnp._to_inexact(_canonical(x))
    if approximate:
        c = np.sqrt(2.0 / np.pi).astype(x.dtype)
        return (0.5 * x * (1 + np.tanh(c * (x + x.dtype.type(0.044715) * x ** 3)))).astype(x.dtype)
    from math import erf
    return (0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2.0)))).astype(x.dtype)


def layer_norm(x, scale, bias, eps=1e-5):
    """Layer normalisation over the last axis: (x - mean) / sqrt(var + eps) * scale + bias, var the biased
    variance (flax.linen.LayerNorm's and torch.nn.functional.layer_norm's arithmetic; JAX has no jax.nn
    function of its own). On tracers one equation with a fused kernel and a fused VJP (the composed form is
    five array passes forward and about ten back); on numpy arrays numpy's arithmetic."""
    import numpy as np
    if any(isinstance(v, _Tracer) for v in (x, scale, bias)):
        dtype = x.dtype if isinstance(x, _Tracer) else np.asarray(x).dtype
        return _bind("layer_norm", [x, scale, bias, np.asarray(eps, dtype=dtype)])
    x = _jnp._to_inexact(_canonical(x))
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + eps) * scale + bias).astype(x.dtype)


__all__ = ["relu", "gelu", "layer_norm", "sigmoid", "softmax", "log_softmax", "logsumexp", "one_hot"]
