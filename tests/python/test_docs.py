"""The Python docs a user reads (issue 25, item 6): docs/python.md's "The first hour" works as written from a
fresh install (its shell block, less the build that ctest has already done, then its Python block, whose
printed line must be the comment that follows it); no user-facing doc cites shared/spec/ (not part of the
repository); docs/python.md's claim about ShardedArray arithmetic is what the code does; docs/programs.md lists
every registered op, and docs/design.md the public headers of each layer as include/weft/layers.cmake places
them (issue 46).
"""
import os
import re
import subprocess

import numpy as np

import weft
from conftest import ROOT, build_dir, cmake, registry_ops

PYTHON_DOC = ROOT / "docs" / "python.md"


def first_hour():
    """(shell block, python block) of docs/python.md's first section, "## The first hour"."""
    text = PYTHON_DOC.read_text()
    section = text.split("## The first hour", 1)[1].split("\n## ", 1)[0]
    (shell,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    (python,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return shell, python


def test_the_first_hour_is_the_opening_section():
    text = PYTHON_DOC.read_text()
    assert re.findall(r"^## .*", text, re.M)[0] == "## The first hour"
    _, python = first_hour()
    code = [line for line in python.splitlines() if line.strip() and not line.startswith("#")]
    assert len(code) <= 11, f"the first hour's Python is {len(code)} lines"


def test_the_first_hour_runs_as_written(tmp_path):
    shell, python = first_hour()
    lines = shell.strip().splitlines()
    assert lines[0].startswith("cmake -S . -B build") and "--target _weft" in lines[0]
    # The build is ctest's; the rest runs as written, in a source tree whose build/ is this build, with a
    # HOME of its own (the prefix lands there).
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "build").symlink_to(build_dir())
    (tmp_path / "home").mkdir()
    (tmp_path / "first_hour.py").write_text(python)
    script = "set -e\n" + "\n".join(lines[1:]) + f"\n/usr/bin/python3 {tmp_path / 'first_hour.py'}\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HOME"] = str(tmp_path / "home")
    env["PATH"] = os.path.dirname(os.path.abspath(cmake())) + os.pathsep + env.get("PATH", "")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path / "src")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "home" / "weft-prefix" / "lib" / "python3" / "dist-packages" / "weft").is_dir()
    expected = [line[2:] for line in python.strip().splitlines()[::-1] if line.startswith("# ")]
    printed = [line for line in done.stdout.splitlines() if not line.startswith("-- ")]  # (cmake's lines)
    assert printed == expected[::-1], done.stdout
    # The expected line, computed here: w = 1 - 0.5 * mean over the 4 rows of x.
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert expected == [str(np.float32(1) - np.float32(0.5) * x.mean(0))]


def test_user_docs_do_not_cite_shared_spec():
    for name in ("python.md", "popxl.md", "reliability.md", "using-weft.md"):
        text = (ROOT / "docs" / name).read_text()
        assert "shared/spec" not in text and "spec §" not in text, name


def test_sharded_array_arithmetic_is_as_documented():
    text = PYTHON_DOC.read_text()
    assert "`ShardedArray` arithmetic assembles the array on the host and returns a plain numpy array" in text
    weft.init(device_count=4)
    y = weft.pmap(lambda v: v * 2)(np.arange(8, dtype=np.float32).reshape(4, 2))
    assert type(y + 1) is np.ndarray and type(np.negative(y)) is np.ndarray
    assert type(y[:, 0]) is weft.DeviceArray and type(y[::2]) is weft.DeviceArray


# ---- docs checked against the code's own lists (issue 46) -------------------------------------------------------


def programs_doc_ops():
    """The ops docs/programs.md's "The ops" section lists, one line each (- `name[params]`: what it is)."""
    text = (ROOT / "docs" / "programs.md").read_text()
    assert "\n## The ops\n" in text, "docs/programs.md has no section 'The ops'"
    section = text.split("\n## The ops\n", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^- `([a-z_0-9]+)(?:\[[^\]]*\])?`: \S", section, re.M)
    bullets = re.findall(r"^- ", section, re.M)
    assert len(items) == len(bullets), "a line of 'The ops' is not `- `name[params]`: what it is`"
    return items


def test_programs_doc_lists_every_registered_op_once():
    listed = programs_doc_ops()
    twice = sorted({op for op in listed if listed.count(op) > 1})
    assert not twice, f"listed twice in docs/programs.md: {twice}"
    registered = set(registry_ops())
    missing = registered - set(listed)
    assert not missing, f"registered ops docs/programs.md's 'The ops' does not list: {sorted(missing)}"
    stale = set(listed) - registered
    assert not stale, f"docs/programs.md lists ops the registry does not have: {sorted(stale)}"


def test_programs_doc_names_every_family_file():
    """"The ops" names each family's file (`ops/<family>.cc`); those are exactly src/program/ops/*.cc."""
    text = (ROOT / "docs" / "programs.md").read_text()
    section = text.split("\n## The ops\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`ops/([a-z_]+)\.cc`", section))
    on_disk = {p.stem for p in (ROOT / "src" / "program" / "ops").glob("*.cc")}
    assert named == on_disk, (f"docs/programs.md's 'The ops' names family files {sorted(named - on_disk)} that "
                              f"src/program/ops/ lacks, and not {sorted(on_disk - named)}")


def layer_manifest():
    """include/weft/layers.cmake: {layer: [header names]} from its set(weft_<layer>_public ...) lines."""
    text = (ROOT / "include" / "weft" / "layers.cmake").read_text()
    layers = {m.group(1): m.group(2).split() for m in re.finditer(r"^set\(weft_(\w+)_public ([^)]*)\)", text, re.M)}
    assert list(layers) == ["core", "array", "program", "runtime"], layers
    return layers


def test_every_public_header_is_in_one_layer_of_the_manifest():
    layers = layer_manifest()
    placed = [h for names in layers.values() for h in names]
    twice = sorted({h for h in placed if placed.count(h) > 1})
    assert not twice, f"in two layers of include/weft/layers.cmake: {twice}"
    on_disk = {p.stem for p in (ROOT / "include" / "weft").glob("*.hpp")}
    assert not on_disk - set(placed), \
        f"public headers in no layer of include/weft/layers.cmake (add each to its layer): {sorted(on_disk - set(placed))}"
    gone = set(placed) - on_disk
    assert not gone, f"include/weft/layers.cmake names headers include/weft/ does not have: {sorted(gone)}"


def test_design_doc_lists_the_public_headers_of_the_manifest():
    text = (ROOT / "docs" / "design.md").read_text()
    documented = {m.group(1): m.group(2).split() for m in re.finditer(r"^- (\w+): `([a-z_ ]+)`", text, re.M)}
    assert documented == layer_manifest(), "docs/design.md's public headers by layer differ from include/weft/layers.cmake"
