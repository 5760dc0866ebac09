"""The wrong interpreter (issue 25, item 2): `import weft` under a python3 that lacks numpy (the first one on
PATH here is a pyenv shim, not Debian's /usr/bin/python3) or has another ABI raises an ImportError naming the
interpreter weft was built for, instead of numpy's bare "No module named 'numpy'". The interpreter without
numpy is simulated with /usr/bin/python3 and an import hook that hides numpy; the other ABI with the recorded
version changed; and the real other interpreter, when the machine has one, is run as well.
"""
import os
import shutil
import subprocess

import pytest

from conftest import PYTHON, run_python

HIDE_NUMPY = """
import sys
class HideNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ModuleNotFoundError("No module named 'numpy'", name="numpy")
sys.meta_path.insert(0, HideNumpy())
"""


def test_an_interpreter_without_numpy_is_told_which_to_use():
    done, _ = run_python(HIDE_NUMPY + "import weft", timeout=60)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: weft needs numpy, and this interpreter (/usr/bin/python3) cannot import "
                           "it (No module named 'numpy'). weft was built for /usr/bin/python3 (Python 3."), last
    assert "run your script with it, e.g. `/usr/bin/python3 script.py`" in last


def test_another_python_abi_is_told_which_to_use():
    # (Importing weft._version imports weft first: the check is called again, with the recorded version changed.)
    code = ("import weft, weft._version as v; v.built_for_version = '2.7'\n"
            "try:\n    weft._interpreter.check()\nexcept ImportError as e:\n    print(e)\n")
    done, _ = run_python(code, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("weft cannot load in this interpreter (/usr/bin/python3, Python 3."), done.stdout
    assert "is for another Python ABI. weft was built for /usr/bin/python3 (Python 2.7)" in done.stdout


def other_python3():
    """The first python3 on PATH when it is not Debian's (here: a pyenv shim without numpy), else None."""
    found = shutil.which("python3")
    if found is None or os.path.realpath(found) == os.path.realpath(PYTHON):
        return None
    probe = subprocess.run([found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                           timeout=30)
    return found if probe.returncode == 0 and os.path.realpath(probe.stdout.strip()) != os.path.realpath(PYTHON) \
        else None


def test_the_first_python3_on_path_is_told_which_to_use():
    other = other_python3()
    if other is None:
        pytest.skip("the first python3 on PATH is Debian's: no other interpreter to try")
    # (PYTHONPATH, set by ctest or by hand, names the build tree's package, as for every child here.)
    done = subprocess.run([other, "-c", "import weft; print('imported')"], capture_output=True, text=True,
                          timeout=60)
    if done.returncode == 0:
        pytest.skip(f"{other} imports weft (it has numpy and the ABI): nothing to tell")
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(("ImportError: weft needs numpy", "ImportError: weft cannot load")), done.stderr
    assert "weft was built for /usr/bin/python3" in last, done.stderr

