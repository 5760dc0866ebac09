"""Shared helpers of the Python test tier (tests/python/, run by ctest through /usr/bin/python3 -m pytest).

Every test compares weft with an independent expectation: the JAX cases (tests/data/jax-cases.json, computed
by JAX), the PopXL reference test's cases (tests/data/rts-cases.json), the reference notebook's outputs
(tests/data/pmap_quickstart.expected), the PyTorch transformer twin's losses
(tests/data/transformer_torch_losses.json). Paths come from here, never from ../shared.
"""
import json
import os
import pathlib
import re
import subprocess
import time

import numpy as np
import pytest

TESTS = pathlib.Path(__file__).resolve().parent.parent
DATA = TESTS / "data"
ROOT = TESTS.parent
PYTHON = "/usr/bin/python3"


def project_version():
    """The version CMakeLists.txt declares (project(weft VERSION x.y.z)), read from the file, not from CMake."""
    return re.search(r"project\(weft VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)


def load_json(name):
    with open(DATA / name) as f:
        return json.load(f)


def json_array(spec):
    """A {"dtype", "shape", "data"} object of the case files as a numpy array."""
    return np.asarray(spec["data"], dtype=np.dtype(spec["dtype"])).reshape(spec["shape"])


def compare(got, want, exact, rtol=1e-5, atol=1e-6):
    """None when `got` matches `want` (dtype, shape, then bit for bit or within tolerance), else why not;
    the same rule as weft-conformance's compare.cc."""
    got = np.asarray(got)
    if got.dtype != want.dtype:
        return f"dtype: got {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape: got {got.shape}, expected {want.shape}"
    if exact:
        if want.dtype.kind == "f":
            bits = np.dtype(f"u{want.dtype.itemsize}")
            same = (got.view(bits) == want.view(bits)) | (np.isnan(got) & np.isnan(want))
        else:
            same = got == want
    else:
        same = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if np.all(same):
        return None
    bad = np.argwhere(~same)
    listed = "; ".join(f"{tuple(i)} got {got[tuple(i)]!r}, expected {want[tuple(i)]!r}" for i in bad[:3])
    return f"{len(bad)} of {want.size} elements differ ({'exact' if exact else f'rtol {rtol}, atol {atol}'}): {listed}"


def python_env(**extra):
    """The environment for a child /usr/bin/python3 that imports weft from this build."""
    env = dict(os.environ)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_python(code_or_args, timeout, **env):
    """Runs /usr/bin/python3 (-c code, or a list of arguments) in a child; returns (completed, seconds)."""
    args = [PYTHON, "-c", code_or_args] if isinstance(code_or_args, str) else [PYTHON, *code_or_args]
    start = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=python_env(**env))
    return done, time.monotonic() - start


def build_dir():
    """The build tree ctest runs for (WEFT_BUILD_DIR, set in tests/python/CMakeLists.txt)."""
    return pathlib.Path(os.environ["WEFT_BUILD_DIR"])


def cmake():
    return os.environ.get("WEFT_CMAKE", "cmake")


def registry_ops():
    """Every op of the C++ op registry, printed by the weft_registry_ops tool (tests/python/registry_ops.cc)."""
    path = os.environ.get("WEFT_REGISTRY_OPS") or os.path.join(os.environ.get("WEFT_BUILD_DIR", "build"), "bin",
                                                               "weft_registry_ops")
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: build the target weft_registry_ops (tests/python/CMakeLists.txt)")
    return subprocess.run([path], check=True, capture_output=True, text=True).stdout.split()


def install_python_package(prefix):
    """`cmake --install` of the build tree's Python package into `prefix`; its dist-packages folder."""
    done = subprocess.run([cmake(), "--install", str(build_dir() / "python"), "--prefix", str(prefix)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return pathlib.Path(prefix) / "lib" / "python3" / "dist-packages"


# ---- autodiff: independent references (test_autodiff.py, test_shard_map.py) ----------------------------------
def numeric_grad(f, params, eps=1e-6):
    """Central differences of the scalar numpy function f(params) for each entry of the dict `params`."""
    grads = {}
    for name, value in params.items():
        g = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            up = {k: v.copy() for k, v in params.items()}
            down = {k: v.copy() for k, v in params.items()}
            up[name][i] += eps
            down[name][i] -= eps
            g[i] = (f(up) - f(down)) / (2 * eps)
        grads[name] = g
    return grads


def assert_close(got, want, rtol=1e-7):
    """Max absolute error within rtol of the largest |want|."""
    scale = max(np.abs(want).max(), 1e-30)
    assert np.abs(np.asarray(got) - want).max() <= rtol * scale, (got, want)


@pytest.fixture(scope="module")
def jax_enable_x64():
    """64-bit types on (JAX's jax_enable_x64) for a test module whose expectations are float64 / int64 (numpy
    float64 references, central differences, JAX cases computed with x64), restored after. A module asks for
    it with `pytestmark = pytest.mark.usefixtures("jax_enable_x64")`; test_dtypes.py tests the default."""
    import weft
    before = weft.config.read("jax_enable_x64")
    weft.config.update("jax_enable_x64", True)
    yield
    weft.config.update("jax_enable_x64", before)
