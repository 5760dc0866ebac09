"""weft-conformance's JAX cases driven from Python: every case of tests/data/jax-cases.json (inputs and
expected outputs computed by JAX) run through weft.pmap (nested for multi-axis meshes) and weft.lax, and
each replica's result compared with JAX's: exact cases bit for bit, the others within rtol 1e-5, atol 1e-6.
Each case runs twice: traced (weft.pmap's default: the function traced once into a program every replica
runs in C++, written with weft.numpy) and eager (weft.pmap(f, eager=True): Python per replica, numpy).
Also run as `weftrun --num-instances 2 --num-replicas 8 /usr/bin/python3 -m pytest ...` (python_jax_cases_2x4):
meshes over the first global devices, 8-device meshes spanning both instances, each instance checking its
own replicas' shards.
"""
import numpy as np
import pytest

import weft
import weft.numpy as jnp
from weft import lax

from conftest import compare, json_array, load_json

# 64-bit types on (JAX's jax_enable_x64; conftest.py): JAX computed these cases with them on (jax-cases.json's meta).
pytestmark = pytest.mark.usefixtures("jax_enable_x64")

CASES = load_json("jax-cases.json")["cases"]


def op_function(case, xnp=np):
    """The mapped function of a case: its op applied to the replica's slice, as collective_cases.cc does;
    `xnp` is the array module the function is written with (weft.numpy when traced)."""
    op, p = case["op"], case["params"]
    axes = p.get("axes")
    axes = tuple(axes) if isinstance(axes, list) else axes
    if axes is not None and len(axes) == 1:
        axes = axes[0]
    groups = p.get("axis_index_groups")
    if op in ("psum", "pmean", "pmax", "pmin"):
        fn = getattr(lax, op)
        return lambda x: fn(x, axes, axis_index_groups=groups)
    if op == "all_gather":
        return lambda x: lax.all_gather(x, axes, axis=p.get("axis", 0), tiled=p.get("tiled", False))
    if op == "psum_scatter":
        return lambda x: lax.psum_scatter(x, axes, scatter_dimension=p.get("scatter_dimension", 0),
                                          tiled=p.get("tiled", False))
    if op == "all_to_all":
        return lambda x: lax.all_to_all(x, axes, p["split_axis"], p["concat_axis"], tiled=p.get("tiled", False))
    if op == "ppermute":
        return lambda x: lax.ppermute(x, axes, perm=[tuple(pair) for pair in p["perm"]])
    if op == "axis_index":
        return lambda x: xnp.full(x.shape, lax.axis_index(axes), dtype=x.dtype)
    if op == "program:square":
        return lambda x: x ** 2
    if op == "program:normalize":
        return lambda x: x / lax.psum(x, "i")
    if op == "program:normalize_pmean":
        return lambda x: x / lax.pmean(x, "i")
    if op == "program:rows_cols":
        return lambda x: xnp.stack([x / lax.psum(x, "rows"), x / lax.psum(x, "cols"),
                                    x / lax.psum(x, ("rows", "cols"))])
    raise AssertionError(f"unknown op {op!r} in jax-cases.json")


def nested_pmap(fn, axes, size, eager=False):
    """pmap(pmap(fn, axes[-1]), ...) with the outermost axis first: the notebook's nesting. Under weftrun a
    1-d pmap names its devices (the first `size` global ones), as a multi-process JAX program does: without
    them, an argument as long as the local device count is taken as this process's part (JAX's convention)."""
    if len(axes) == 1 and weft.process_count() > 1:
        return weft.pmap(fn, axis_name=axes[0], devices=weft.devices()[:size], eager=eager)
    for name in reversed(axes):
        fn = weft.pmap(fn, axis_name=name, eager=eager)
    return fn


def test_case_count():
    assert len(CASES) == 339


@pytest.mark.parametrize("mode", ["traced", "eager"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_jax_case(case, mode):
    mesh_axes, mesh_shape = case["mesh"]["axes"], case["mesh"]["shape"]
    x = json_array(case["input"])
    want = json_array(case["expected"])
    n = int(np.prod(mesh_shape))
    eager = mode == "eager"
    got = nested_pmap(op_function(case, np if eager else jnp), mesh_axes, n, eager)(x)
    if weft.process_count() == 1:
        assert isinstance(got, weft.ShardedArray)
        assert got.shape == want.shape, f"{case['name']}: result shape {got.shape}, JAX's {want.shape}"
    elif not any(d.id < n for d in weft.local_devices()):
        # Under weftrun the mesh lies over the first n global devices: this instance holds none of them.
        assert got == [], f"{case['name']}: an instance without replicas got {got!r}"
        return
    # Each replica's shard (on its device) against its slice of JAX's result; under weftrun, this instance's.
    per_replica = want.reshape((n,) + want.shape[len(mesh_shape):])
    assert got.shards, f"{case['name']}: no shards"
    for shard in got.shards:
        replica = shard.device().id
        failure = compare(shard, per_replica[replica], case["exact"])
        assert failure is None, f"{case['name']}: replica {replica}: {failure}"
