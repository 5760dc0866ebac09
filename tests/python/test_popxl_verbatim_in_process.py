"""The verbatim PopXL reference test (test_multi_instance_vs_rts_verbatim.py, only its imports changed) in one
process: each of its tests builds its `poprun` command line as written, and instead of a launcher this file
runs the command's `run_model_and_test` here, every replica in one runtime of --num-replicas devices (the
instance count is what a launcher would add). The reference's own assertions decide; under poprun the same
file runs as python_popxl_verbatim.
"""
import subprocess
import sys

import pytest

import weft
import test_multi_instance_vs_rts_verbatim as verbatim
from test_multi_instance_vs_rts_verbatim import *  # noqa: F401,F403  (its tests and fixtures, collected here)


@pytest.fixture(autouse=True)
def without_a_launcher(monkeypatch):
    ran = []

    def run(command, check=True, **kwargs):
        assert command[0] == "poprun", command
        at = command.index("run_model_and_test")
        weft.init(device_count=int(command[command.index("--num-replicas") + 1]))
        monkeypatch.setattr(sys, "argv", list(command[at - 1:]))  # argv[2:] are the model's flags
        verbatim.run_model_and_test()
        ran.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(subprocess, "run", run)
    yield
    assert ran, "the test ran no model"
