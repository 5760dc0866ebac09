"""`cmake --install` puts the module where Debian's python3 looks (P/lib/python3/dist-packages/weft), and
the installed copy works on its own: imported from the prefix alone (not the build tree), it runs a pmap
with a psum. WEFT_BUILD_DIR and WEFT_CMAKE come from ctest (tests/python/CMakeLists.txt).
"""
import os
import pathlib
import subprocess

from conftest import PYTHON


def test_installed_module_runs_from_the_prefix(tmp_path):
    build = pathlib.Path(os.environ["WEFT_BUILD_DIR"])
    cmake = os.environ.get("WEFT_CMAKE", "cmake")
    done = subprocess.run([cmake, "--install", str(build / "python"), "--prefix", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "lib" / "python3" / "dist-packages"
    assert (site / "weft" / "__init__.py").exists() and list((site / "weft").glob("_weft*.so"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    code = ("import weft, numpy as np; print(weft.__file__); "
            "print(np.asarray(weft.pmap(lambda v: weft.lax.psum(v, 'i'), axis_name='i')(np.arange(4.0)))[0])")
    run = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [str(site / "weft" / "__init__.py"), "6.0"]
