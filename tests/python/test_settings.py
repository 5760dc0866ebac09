"""Every WEFT_* setting refuses a value it does not know (issue 45, item 13; docs/settings.md). The variables
come from docs/settings.md's tables, not from weft: for each one a fresh /usr/bin/python3 runs what reads it
(a pmap makes the runtime, matmul_backend() loads the matmul libraries, a jit runs fusion) with the variable set
to a bad value, and must fail with a message that names the variable, the value (a path: its folder) and,
where the doc gives a closed list of values, every one of them. (tests/unit/settings_table_test.cc checks that
weft's table of settings and the doc list the same variables and values.)
"""
import re

import pytest

from conftest import ROOT, run_python

SETTINGS_DOC = ROOT / "docs" / "settings.md"

# A value each kind of setting cannot take; "bogus" for all but paths, where any name could be a file.
BAD = {
    "WEFT_DEBUG_FILE": "/nonexistent-weft-dir/log-%p",
    "WEFT_TRACE": "/nonexistent-weft-dir/trace.json",
    "WEFT_OPENBLAS": "/nonexistent-weft-dir/libopenblas.so.0",
    "WEFT_JOB_DIR": "/nonexistent-weft-dir",
}

SCRIPT = """
import numpy as np
import weft, weft.ops
n = weft.device_count()
weft.pmap(lambda a: a * 2)(np.ones((n, 2), np.float32))
weft.ops.matmul_backend()
weft.jit(lambda a: a * 2 + 1)(np.ones(4, np.float32))
print("ran")
"""


def documented():
    """{variable: its values cell ("" where the table has none)} from every table of docs/settings.md."""
    rows = {}
    column = None
    for line in SETTINGS_DOC.read_text().splitlines():
        if line.startswith("| variable |"):
            header = [c.strip() for c in line.strip("|").split("|")]
            column = next((i for i, c in enumerate(header) if c in ("unit", "values")), None)
        m = re.match(r"\| `(WEFT_[A-Z0-9_]+)` \|", line)
        if m:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            rows.setdefault(m.group(1), cells[column] if column is not None else "")
    return rows


def closed_list(values):
    """The values of a cell that lists nothing but backticked values (remarks in parentheses aside), else None."""
    bare = re.sub(r"\([^)]*\)", "", values)
    if not re.fullmatch(r"\s*(`[^`]+`\s*(,|or)?\s*)+", bare):
        return None
    return re.findall(r"`([^`]+)`", values)


VARIABLES = documented()


def test_the_doc_lists_the_settings():
    assert len(VARIABLES) > 20 and "WEFT_FUSION" in VARIABLES and "WEFT_GEMM" in VARIABLES
    assert closed_list(VARIABLES["WEFT_FUSION"]) == ["auto", "off", "0"]
    assert closed_list(VARIABLES["WEFT_DEVICE_MEMORY"]) is None


@pytest.mark.parametrize("variable", sorted(VARIABLES))
def test_a_bad_value_is_refused_naming_the_setting_and_its_values(variable):
    bad = BAD.get(variable, "bogus")
    done, _ = run_python(SCRIPT, timeout=60, **{variable: bad})
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "ran" not in done.stdout, f"{variable}={bad} was accepted:\n{out}"
    message = done.stderr[done.stderr.find(variable):]
    assert variable in done.stderr and bad.split("%")[0] in message, out
    for value in closed_list(VARIABLES[variable]) or []:
        assert value in message.split(bad, 1)[1], f"{value!r} not named:\n{out}"
