"""`cmake --install` puts the module where Debian's python3 looks (P/lib/python3/dist-packages/weft, with its
weft.popxl subpackage), and the installed copy works on its own: imported from the prefix alone (not the build
tree), it runs a pmap with a psum and a weft.popxl graph, knows its version (weft.__version__ and
importlib.metadata, from the project version in CMakeLists.txt), and a script run from inside the installed
package still imports numpy and weft (weft/numpy.py does not shadow numpy). WEFT_BUILD_DIR and WEFT_CMAKE come
from ctest (tests/python/CMakeLists.txt).
"""
import os
import subprocess

import pytest

from conftest import PYTHON, install_python_package, project_version, run_python


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A prefix with the package installed; its dist-packages folder."""
    return install_python_package(tmp_path_factory.mktemp("prefix"))


def run_installed(site, args, cwd):
    """/usr/bin/python3 with only the prefix on PYTHONPATH (not the build tree)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([PYTHON, *args], capture_output=True, text=True, timeout=60, env=env, cwd=cwd)


def test_installed_module_runs_from_the_prefix(site, tmp_path):
    assert (site / "weft" / "__init__.py").exists() and list((site / "weft").glob("_weft*.so"))
    code = ("import weft, numpy as np; print(weft.__file__); "
            "print(np.asarray(weft.pmap(lambda v: weft.lax.psum(v, 'i'), axis_name='i')(np.arange(4.0)))[0])")
    run = run_installed(site, ["-c", code], tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [str(site / "weft" / "__init__.py"), "6.0"]


def test_installed_popxl_subpackage_runs_from_the_prefix(site, tmp_path):
    code = ("import numpy as np, weft.popxl as popxl, weft.popxl.ops as ops, weft.popxl.dtypes as dtypes\n"
            "ir = popxl.Ir(replication=2)\n"
            "with ir.main_graph:\n"
            "    w = popxl.variable(np.arange(3, dtype=np.int32))\n"
            "    ops.add_(w, popxl.constant(np.int32(1)))\n"
            "with popxl.Session(ir) as s:\n"
            "    s.run()\n"
            "print(popxl.__file__); print(s.get_tensor_data(w))\n")
    run = run_installed(site, ["-c", code], tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [str(site / "weft" / "popxl" / "__init__.py"), "[1 2 3]"]


def test_the_build_tree_knows_its_version():
    done, _ = run_python("import importlib.metadata, weft; print(weft.__version__, importlib.metadata.version('weft'))",
                         timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [project_version(), project_version()]


def test_installed_module_knows_its_version(site, tmp_path):
    version = project_version()
    assert (site / f"weft-{version}.dist-info" / "METADATA").exists()
    code = "import importlib.metadata, weft; print(weft.__version__); print(importlib.metadata.version('weft'))"
    run = run_installed(site, ["-c", code], tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [version, version]


@pytest.mark.parametrize("first", ["import weft", "import numpy"])
def test_a_script_inside_the_installed_package_imports_numpy_and_weft(site, first):
    # Its folder is sys.path[0], where weft/numpy.py is a file named numpy.py.
    script = site / "weft" / f"my_script_{first.split()[1]}.py"
    script.write_text(f"{first}\nimport numpy as np, weft\n"
                      "print(np.ndarray.__name__, np.__file__.endswith('weft/numpy.py'))\n"
                      "print(np.asarray(weft.pmap(lambda v: v * 2)(np.arange(2.0))).tolist())\n")
    try:
        run = run_installed(site, [str(script)], site / "weft")
    finally:
        script.unlink()
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["ndarray False", "[0.0, 2.0]"]


def test_weft_numpy_is_still_numpys_namespace(site, tmp_path):
    run = run_installed(site, ["-c", "import numpy, weft.numpy as jnp; print(jnp.ndarray is numpy.ndarray, "
                                     "jnp.sum(jnp.arange(4)))"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "6"]
