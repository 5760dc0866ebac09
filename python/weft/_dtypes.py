"""JAX's dtype rules for weft's Python layer, in one place: the type promotion lattice with weak types, and
jax_enable_x64 (64-bit types off unless asked for, as in JAX).

Promotion (docs.jax.dev, "Type promotion semantics"): the dtype two operands are computed in is their join
on a lattice in which a Python int or float (or a value computed from such numbers only) is *weak*, i* or
f*: it takes the other operand's dtype unless that is of a lower kind (an int array times 2.5 is float). A
result is weak when its join is i* or f*, so jnp.where(c, 1.0, 0.0) * bf16_array stays bfloat16.

64-bit types: with x64 off (the default, as JAX) a float64 / int64 value entering weft's JAX API (a numpy
array argument of jit / pmap / shard_map, a constant a trace captures, a weft.numpy operand) becomes float32
/ int32 and Python numbers default to 32 bits; a 64-bit dtype the user names explicitly is truncated with
JAX's UserWarning. weft.config.update("jax_enable_x64", True) or WEFT_ENABLE_X64=1 keeps 64 bits. PopXL
(weft.popxl) and C++ keep what the user wrote: neither is JAX.
"""
import warnings

import numpy as _np

from . import _weft

BF16 = _np.dtype(_weft.bfloat16)
# JAX's dtype of the tangent (and cotangent) of an integer or boolean value (jax.dtypes.float0): numpy's
# structured void dtype of zero bytes, as JAX's. Such values never enter a program: they are zeros by type.
FLOAT0 = _np.dtype([("float0", _np.void, 0)])


def is_differentiable(dtype):
    """Whether values of `dtype` have tangents of their own dtype (floating), not float0 (integer, bool)."""
    dtype = _np.dtype(dtype)
    return dtype.kind == "f" or dtype == BF16


def check_rev_input(name, dtype, allow_int):
    """JAX's check of a reverse-mode argument (grad, jacrev): integer and boolean ones need allow_int."""
    if not is_differentiable(dtype) and not allow_int:
        raise TypeError(f"{name} requires real- or complex-valued inputs (input dtype that is a sub-dtype of "
                        f"np.inexact), but got {_np.dtype(dtype).name}. If you want to use Boolean- or "
                        "integer-valued inputs, use vjp or set allow_int to True.")

# The lattice (each node: the nodes directly above it) restricted to weft's dtypes, plus int16, which weft
# lacks but which the join of uint8 and int8 is (it then computes in int32, the next integer type it has).
_ABOVE = {"b1": ("i*",), "i*": ("u1", "i1"), "u1": ("i2",), "i1": ("i2",), "i2": ("i4",), "i4": ("i8",),
          "i8": ("f*",), "f*": ("bf", "f2"), "bf": ("f4",), "f2": ("f4",), "f4": ("f8",), "f8": ()}
_NODE = {_np.dtype(_np.bool_): "b1", _np.dtype(_np.uint8): "u1", _np.dtype(_np.int8): "i1",
         _np.dtype(_np.int16): "i2", _np.dtype(_np.int32): "i4", _np.dtype(_np.int64): "i8", BF16: "bf",
         _np.dtype(_np.float16): "f2", _np.dtype(_np.float32): "f4", _np.dtype(_np.float64): "f8"}
_DTYPE = {node: dtype for dtype, node in _NODE.items()}
_DTYPE["i2"] = _np.dtype(_np.int32)  # weft has no int16


def _upward(node):
    seen, todo = {node}, [node]
    while todo:
        for up in _ABOVE[todo.pop()]:
            if up not in seen:
                seen.add(up)
                todo.append(up)
    return frozenset(seen)


_UP = {node: _upward(node) for node in _ABOVE}


def _join(a, b):
    """The least node above both `a` and `b`."""
    common = _UP[a] & _UP[b]
    return next(c for c in common if _UP[c] >= common)


# ---- jax_enable_x64 -----------------------------------------------------------------------------------
class _Config:
    """weft.config: JAX's jax.config for the one option weft reads, jax_enable_x64 (default: the environment's
    WEFT_ENABLE_X64, else off). weft.config.update("jax_enable_x64", True) as jax.config.update."""

    def __init__(self):
        # Read through weft's one parser of WEFT_* settings (src/core/settings.hpp): empty is unset, anything but
        # 0 or 1 an InvalidArgument naming the variable and what it accepts.
        self.jax_enable_x64 = _weft.setting_choice("WEFT_ENABLE_X64") == "1"

    def update(self, name, value):
        if name != "jax_enable_x64":
            raise _weft.InvalidArgument(f"weft.config.update: unknown option {name!r}; weft has 'jax_enable_x64'")
        self.jax_enable_x64 = bool(value)

    def read(self, name):
        if name != "jax_enable_x64":
            raise _weft.InvalidArgument(f"weft.config.read: unknown option {name!r}; weft has 'jax_enable_x64'")
        return self.jax_enable_x64


config = _Config()

# With x64 off, each 64-bit dtype's 32-bit stand-in (JAX's canonicalize_dtype).
_NARROW = {_np.dtype(_np.float64): _np.dtype(_np.float32), _np.dtype(_np.int64): _np.dtype(_np.int32),
           _np.dtype(_np.uint64): _np.dtype(_np.uint32)}


def x64_enabled():
    return config.jax_enable_x64


def canonical(dtype):
    """The dtype a value of `dtype` has in weft's JAX API: itself, or its 32-bit stand-in with x64 off."""
    dtype = _np.dtype(dtype)
    return dtype if config.jax_enable_x64 else _NARROW.get(dtype, dtype)


def requested(dtype, what):
    """A dtype the user asked for by name (dtype= of asarray, zeros, astype, ...): canonical, with JAX's
    warning when x64 is off and it is 64-bit."""
    dtype = _np.dtype(dtype)
    narrow = canonical(dtype)
    if narrow != dtype:
        warnings.warn(f"Explicitly requested dtype {dtype.name} requested in {what} is not available, and will be "
                      f"truncated to dtype {narrow.name}. weft follows JAX with 64-bit types off: "
                      "weft.config.update('jax_enable_x64', True) or WEFT_ENABLE_X64=1 keeps them "
                      "(docs/python.md, 'dtypes and x64').", UserWarning, stacklevel=3)
    return narrow


def default_int():
    return _np.dtype(_np.int64 if config.jax_enable_x64 else _np.int32)


def default_float():
    return _np.dtype(_np.float64 if config.jax_enable_x64 else _np.float32)


def canonical_array(x):
    """A numpy array (or anything numpy reads as one) as weft's JAX API holds it: 64-bit narrowed with x64
    off (no warning: JAX converts its inputs silently). Python numbers take their weak type's dtype."""
    if isinstance(x, (bool, int, float)):
        return _np.asarray(x, dtype=python_scalar_dtype(x))
    array = _np.asarray(x)
    dtype = canonical(array.dtype)
    return array if dtype == array.dtype else array.astype(dtype)


# ---- promotion ----------------------------------------------------------------------------------------
def is_python_scalar(x):
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, _np.generic)


def python_scalar_dtype(x):
    """A Python number's dtype (JAX's: bool, or the default int / float, weakly typed)."""
    if isinstance(x, bool):
        return _np.dtype(_np.bool_)
    if isinstance(x, int):
        return default_int()
    if isinstance(x, float):
        return default_float()
    raise _weft.InvalidArgument(f"weft has no complex dtypes (got {x!r})")


def dtype_and_weak(x):
    """(dtype, weak) of an operand: a tracer's own, a Python int / float weak (bool is strong, as in JAX),
    anything else an array of its canonical dtype."""
    if is_python_scalar(x):
        return python_scalar_dtype(x), not isinstance(x, bool)
    weak = getattr(x, "weak_type", False)
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        dtype = _np.asarray(x).dtype
    dtype = _np.dtype(dtype)
    if dtype not in _NODE:
        raise _weft.InvalidArgument(f"weft has no {dtype} dtype (it has {', '.join(sorted(_dtype_names()))})")
    return canonical(dtype), bool(weak)


def _dtype_names():
    return [d.name if d != BF16 else "bfloat16" for d in _NODE if d != _np.dtype(_np.int16)]


def _node(dtype, weak):
    if not weak or dtype == _np.dtype(_np.bool_):
        return _NODE[dtype]
    return "f*" if dtype.kind == "f" or dtype == BF16 else "i*"


def promote_types(a, b):
    """jnp.promote_types for two (strong) dtypes: their join on the lattice."""
    return _DTYPE[_join(_NODE[_np.dtype(a)], _NODE[_np.dtype(b)])]


def result_type(*operands):
    """(dtype, weak) the operands of an elementwise op are computed in (JAX's dtypes.result_type with its weak
    flag): their join, canonical; weak when it is i* or f*. Operands all weak join as their dtypes, weakly."""
    pairs = [dtype_and_weak(x) for x in operands]
    if all(weak for _, weak in pairs):
        node = _NODE[pairs[0][0]]
        for dtype, _ in pairs[1:]:
            node = _join(node, _NODE[dtype])
        dtype, weak = _DTYPE[node], True
    else:
        node = _node(*pairs[0])
        for pair in pairs[1:]:
            node = _join(node, _node(*pair))
        weak = node in ("i*", "f*")
        dtype = default_int() if node == "i*" else default_float() if node == "f*" else _DTYPE[node]
    dtype = canonical(dtype)
    return dtype, weak and dtype != _np.dtype(_np.bool_)
