"""weft.nn: jax.nn's names for weft's array math (the same kernels as weft.ops): relu, sigmoid, softmax,
log_softmax, logsumexp, one_hot. numpy in, numpy out; float32 stays float32."""
from ._weft import array_ops as _array_ops

relu = _array_ops.relu
sigmoid = _array_ops.sigmoid
softmax = _array_ops.softmax
log_softmax = _array_ops.log_softmax
logsumexp = _array_ops.logsumexp
one_hot = _array_ops.one_hot

__all__ = ["relu", "sigmoid", "softmax", "log_softmax", "logsumexp", "one_hot"]
