#!/usr/bin/python3
# Generates array-cases-extra.json: array-op cases that shared/conformance/array-cases.json lacks (int32
# batched matmul with broadcasting and wrap-around, 1-D matmul operands, transposed operands, take with
# negative indices, reductions over every axis, NaN in argmax/max, out-of-range one_hot labels, the scalar
# overloads of maximum/where, integer dtypes of the elementwise ops, large logits). Expectations come from
# numpy in float64 (or int64 reduced modulo 2^32 for int32 wrap-around) rounded once to the case's dtype,
# never from weft. Run with Debian's numpy:  /usr/bin/python3 tests/data/array-cases-extra.py
import json
import math
import os

import numpy as np

rng = np.random.default_rng(20240607)
cases = []


def enc(a):
    a = np.asarray(a)
    def value(v):
        if a.dtype == np.bool_:
            return bool(v)
        if np.issubdtype(a.dtype, np.integer):
            return int(v)
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": [value(v) for v in a.reshape(-1)]}


def add(name, op, params, inputs, expected, exact, rtol=None, atol=None):
    case = {"name": name, "op": op, "params": params, "inputs": [enc(x) for x in inputs],
            "expected": enc(expected), "exact": exact}
    if not exact:
        case["rtol"], case["atol"] = rtol, atol
    cases.append(case)


def f32(shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def wide(x):  # float32/int32 inputs -> float64/int64 for the reference computation
    return x.astype(np.int64) if np.issubdtype(x.dtype, np.integer) else x.astype(np.float64)


# ---- matmul ---------------------------------------------------------------------------------------------
a = rng.integers(-50, 51, (2, 1, 3, 4)).astype(np.int32)
b = rng.integers(-50, 51, (3, 4, 2)).astype(np.int32)
add("extra-matmul-int32-batch-broadcast", "matmul", {}, [a, b], (wide(a) @ wide(b)).astype(np.int32), True)
a = np.array([[1 << 30, 3], [-7, 1 << 29]], np.int32)
b = np.array([[4, 1], [1 << 30, 5]], np.int32)
# int64 products reduced modulo 2^32: two's-complement wrap-around, as int32 arithmetic does.
add("extra-matmul-int32-wrapping", "matmul", {}, [a, b], (wide(a) @ wide(b)).astype(np.int32), True)
a, b = rng.standard_normal(5), rng.standard_normal(5)
add("extra-matmul-1d-1d-f64", "matmul", {}, [a, b], np.array(np.dot(a, b)), False, 1e-12, 1e-12)
a, b = f32((4,)), f32((2, 4, 3))
add("extra-matmul-1d-batched", "matmul", {}, [a, b], (wide(a) @ wide(b)).astype(np.float32), False, 1e-5, 1e-5)
a, b = f32((2, 3, 4)), f32((4,))
add("extra-matmul-batched-1d", "matmul", {}, [a, b], (wide(a) @ wide(b)).astype(np.float32), False, 1e-5, 1e-5)
a, b = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 4, 5))
add("extra-matmul-transpose-a-b-f64", "matmul", {"transpose_a": True, "transpose_b": True}, [a, b],
    np.swapaxes(a, -1, -2) @ np.swapaxes(b, -1, -2), False, 1e-12, 1e-12)

# ---- transpose --------------------------------------------------------------------------------------------
x = f32((2, 3, 4))
add("extra-transpose-no-perm-reverses", "transpose", {}, [x], np.transpose(x), True)

# ---- take -------------------------------------------------------------------------------------------------
x = f32((3, 4))
i = np.array([-1, 0, -4, 2], np.int32)
add("extra-take-negative-indices", "take", {"axis": 1}, [x, i], np.take(x, i, axis=1), True)
x = np.arange(6, dtype=np.int32).reshape(2, 3) * 10
i = np.array([[5, -6], [0, 3]], np.int32)
add("extra-take-flattened-2d-indices", "take", {}, [x, i], np.take(x, i), True)
x = rng.standard_normal((2, 3, 2))
i = np.array([2, -3], np.int32)
add("extra-take-negative-axis-f64", "take", {"axis": -2}, [x, i], np.take(x, i, axis=-2), True)

# ---- reductions -------------------------------------------------------------------------------------------
x = f32((2, 3, 4))
add("extra-sum-every-axis-default", "sum", {}, [x], np.array(wide(x).sum()).astype(np.float32), False, 1e-5, 1e-5)
add("extra-sum-every-axis-listed", "sum", {"axes": [0, 1, 2], "keepdims": False}, [x],
    np.array(wide(x).sum()).astype(np.float32), False, 1e-5, 1e-5)
add("extra-mean-axes-null-keepdims", "mean", {"axes": None, "keepdims": True}, [x],
    wide(x).mean(keepdims=True).astype(np.float32), False, 1e-5, 1e-6)
x = f32((2, 3, 4))
x[1, 2, 0] = np.nan
add("extra-max-negative-axes-nan", "max", {"axes": [-1, 0]}, [x], x.max(axis=(-1, 0)), True)
x = rng.integers(-1000, 1000, (3, 3)).astype(np.int32)
add("extra-min-int32-every-axis", "min", {"keepdims": False}, [x], np.array(x.min()), True)

# ---- argmax / argmin (int32, first occurrence, NaN counts as the extreme) --------------------------------
x = np.array([[1, 5, 2], [np.nan, 7, np.nan]], np.float32)
add("extra-argmax-flattened-nan", "argmax", {}, [x], np.array(np.argmax(x), np.int32), True)
x = np.array([[3, 1, 1, 2], [0, 4, 0, -1]], np.float32)
add("extra-argmin-ties-keepdims", "argmin", {"axis": 1, "keepdims": True}, [x],
    np.argmin(x, axis=1).astype(np.int32).reshape(2, 1), True)

# ---- one_hot (jax.nn.one_hot: labels outside [0, n) give rows of zeros) -----------------------------------
labels = np.array([0, -1, 3, 2], np.int32)
add("extra-one_hot-out-of-range", "one_hot", {"num_classes": 3}, [labels],
    (labels[:, None] == np.arange(3)).astype(np.float32), True)
labels = np.array([[1, 0], [2, 2]], np.int32)
add("extra-one_hot-int32-dtype", "one_hot", {"num_classes": 3, "dtype": "int32"}, [labels],
    (labels[..., None] == np.arange(3)).astype(np.int32), True)

# ---- elementwise with two or three operands ---------------------------------------------------------------
x = np.array([np.nan, -1, 2, -np.inf], np.float32)
add("extra-maximum-scalar-nan", "maximum", {"b": 0.5}, [x], np.maximum(x, np.float32(0.5)), True)
a, b = rng.standard_normal((3, 1)), rng.standard_normal((1, 4))
add("extra-minimum-broadcast-both-f64", "minimum", {}, [a, b], np.minimum(a, b), True)
cond = rng.integers(0, 2, (2, 3)).astype(np.bool_)
x = f32((2, 3))
add("extra-where-scalar-b", "where", {"b": 0.0}, [cond, x], np.where(cond, x, np.float32(0)), True)
cond = np.array([0, 5, -1], np.int32)
a, b = f32((3,)), f32((1,))
add("extra-where-int32-condition", "where", {}, [cond, a, b], np.where(cond != 0, a, b), True)
x = np.array([-2, -0.25, 0.75, np.nan, np.inf], np.float32)
add("extra-clip-min-only", "clip", {"min": -0.5}, [x], np.maximum(x, np.float32(-0.5)), True)

# ---- softmax family with large logits (a naive exp overflows) ---------------------------------------------
x = np.array([[1000, 1001, 1002], [-1000, 0, 1000]], np.float32)
m = wide(x).max(axis=1, keepdims=True)
lse = m + np.log(np.exp(wide(x) - m).sum(axis=1, keepdims=True))
add("extra-logsumexp-keepdims-large", "logsumexp", {"axis": 1, "keepdims": True}, [x], lse.astype(np.float32),
    False, 1e-6, 1e-6)
add("extra-softmax-default-axis-large", "softmax", {}, [x], np.exp(wide(x) - lse).astype(np.float32), False,
    1e-5, 1e-6)
x = f32((3, 2), 30.0)
m = wide(x).max(axis=-2, keepdims=True)
lse = m + np.log(np.exp(wide(x) - m).sum(axis=-2, keepdims=True))
add("extra-log_softmax-axis-minus-2", "log_softmax", {"axis": -2}, [x], (wide(x) - lse).astype(np.float32), False,
    1e-5, 1e-5)

# ---- elementwise, one operand ------------------------------------------------------------------------------
x = np.array([4, 0.25, 0, np.inf, -1, np.nan], np.float32)
with np.errstate(divide="ignore", invalid="ignore"):
    add("extra-rsqrt-special", "rsqrt", {}, [x], (1 / np.sqrt(wide(x))).astype(np.float32), False, 2e-6, 1e-6)
x = np.array([-2, 0, 3.5, -np.inf, np.inf, np.nan], np.float32)
add("extra-sign-special", "sign", {}, [x], np.sign(x), False, 0.0, 0.0)
x = np.array([-3, 0, 7, -2147483647], np.int32)
add("extra-abs-int32", "abs", {}, [x], np.abs(x), True)
x = np.array([-2147483648, 5, 0], np.int32)
# -(-2^31) wraps to -2^31 in int32 (computed in int64, reduced modulo 2^32).
add("extra-negative-int32-wrapping", "negative", {}, [x], (-wide(x)).astype(np.int32), True)
x = np.array([-3, 0, 4], np.int32)
add("extra-relu-int32", "relu", {}, [x], np.maximum(x, 0), True)
x = np.array([-1000, 1000, 0, -20], np.float32)
with np.errstate(over="ignore"):  # exp(1000) = inf gives sigmoid(-1000) = 0, the exact answer
    add("extra-sigmoid-large", "sigmoid", {}, [x], (1 / (1 + np.exp(-wide(x)))).astype(np.float32), False, 2e-6, 1e-30)
x = np.array([1e-20, -0.5, 1e-10], np.float64)
add("extra-log1p-tiny-f64", "log1p", {}, [x], np.log1p(x), False, 1e-15, 0.0)

meta = {
    "oracle": "numpy " + np.__version__ + " (Debian's /usr/bin/python3), float64 / int64 rounded once to the case's dtype",
    "generator": "tests/data/array-cases-extra.py (run it to regenerate this file)",
    "compare": "exact: bitwise (NaN equals NaN); else |got-exp| <= atol + rtol*|exp|, NaN/inf must match exactly",
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "array-cases-extra.json")
with open(path, "w") as out:
    json.dump({"meta": meta, "cases": cases}, out, indent=None, separators=(", ", ": "))
    out.write("\n")
print(f"{len(cases)} cases -> {path}")
