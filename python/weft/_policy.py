"""weft.Policy, weft.get_policy: mixed precision in the style of DeepMind's jmp (docs/python.md).

A policy names three dtypes: the parameters' (kept, and what their gradients and the optimizer state are
in), the computation's (what the parameters and activations are cast to at use) and the outputs'. Casting is
the whole mechanism: `policy.cast_to_compute(params)` inside a differentiated function makes the products
run in bfloat16 (oneDNN's bf16 kernels, float32 accumulation), and the casts' transposes hand the gradients
back in the parameters' dtype, so nothing else changes for the optimizer (docs/autodiff.md: astype's rule).
Only floating leaves are cast: integer labels and indices pass as they are, as jmp does.
"""
import dataclasses

import numpy as _np

from . import _tree
from ._trace import Tracer
from ._weft import bfloat16  # (weft.bfloat16 is this one)

_NAMES = {"float32": "float32", "f32": "float32", "float64": "float64", "f64": "float64",
          "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "f16": "float16", "half": "float16"}
_ROLES = {"params": "param_dtype", "param": "param_dtype", "p": "param_dtype",
          "compute": "compute_dtype", "c": "compute_dtype",
          "output": "output_dtype", "o": "output_dtype"}


def _dtype(d):
    """A numpy dtype from a dtype-like, 'bfloat16' and weft.bfloat16 included."""
    if isinstance(d, str):
        name = _NAMES.get(d.lower())
        if name is None:
            raise ValueError(f"weft.Policy: unknown dtype {d!r} (float32, float64, bfloat16, float16)")
        return bfloat16 if name == "bfloat16" else _np.dtype(name)
    return bfloat16 if _np.dtype(d) == bfloat16 else _np.dtype(d)


def _is_floating(x):
    dtype = x.dtype if isinstance(x, Tracer) else getattr(x, "dtype", None)
    if dtype is None:
        return isinstance(x, float)
    return dtype == bfloat16 or _np.dtype(dtype).kind == "f"


def _round_to_bfloat16(x):
    """A numpy array's values rounded to bfloat16 (to nearest even), kept as float32: outside a trace
    bfloat16 values live in float32 arrays (weft.bfloat16 is a stand-in dtype for traced values)."""
    bits = _np.ascontiguousarray(x, _np.float32).view(_np.uint32).astype(_np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(_np.uint32).view(_np.float32)
    nan = _np.isnan(x)
    return _np.where(nan, _np.float32("nan"), rounded) if nan.any() else rounded


def _cast_tree(tree, dtype):

    def cast(x):
        if not _is_floating(x):
            return x
        if isinstance(x, Tracer):
            return x if x.dtype == dtype else x.astype(dtype)
        if dtype == bfloat16:
            return _round_to_bfloat16(_np.asarray(x))
        return _np.asarray(x).astype(dtype)
    return _tree.tree_map(cast, tree)


@dataclasses.dataclass(frozen=True)
class Policy:
    """jmp.Policy: param_dtype, compute_dtype, output_dtype, and the casts between them (pytrees)."""
    param_dtype: object
    compute_dtype: object
    output_dtype: object

    def __post_init__(self):
        for field in ("param_dtype", "compute_dtype", "output_dtype"):
            object.__setattr__(self, field, _dtype(getattr(self, field)))

    def cast_to_param(self, x):
        return _cast_tree(x, self.param_dtype)

    def cast_to_compute(self, x):
        return _cast_tree(x, self.compute_dtype)

    def cast_to_output(self, x):
        return _cast_tree(x, self.output_dtype)

    def with_output_dtype(self, output_dtype):
        return dataclasses.replace(self, output_dtype=output_dtype)

    def __str__(self):
        name = lambda d: "bfloat16" if d == bfloat16 else d.name  # noqa: E731
        return f"params={name(self.param_dtype)},compute={name(self.compute_dtype)},output={name(self.output_dtype)}"


def get_policy(spec):
    """jmp.get_policy: 'params=float32,compute=bfloat16,output=float32' (also p=f32,c=bf16,o=f32; a role
    left out is float32), or one dtype name for all three."""
    spec = spec.strip()
    if "=" not in spec:
        d = _dtype(spec)
        return Policy(d, d, d)
    roles = {"param_dtype": "float32", "compute_dtype": "float32", "output_dtype": "float32"}
    for part in spec.split(","):
        key, _, value = part.partition("=")
        role = _ROLES.get(key.strip().lower())
        if role is None:
            raise ValueError(f"weft.get_policy: unknown role {key.strip()!r} in {spec!r} (params, compute, output)")
        roles[role] = value.strip()
    return Policy(**roles)
