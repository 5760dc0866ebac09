"""The reference notebook ported to Python (examples/pmap_quickstart.py) against its golden transcript.

The golden transcript is the one the C++ port is checked against (tests/data/pmap_quickstart.expected: the
notebook's outputs, with our device names); the only line that differs is the type of a pmap result, which
Python prints as <class 'weft.ShardedArray'> where C++ prints <class 'weft::ShardedArray'>. The Rule 30 board
is also compared with the notebook's own board (tests/data/notebook-rule30.txt). One test per cell, so a
failure names the cell.
"""
import re

import pytest

from conftest import DATA, ROOT, run_python

EXAMPLE = ROOT / "examples" / "pmap_quickstart.py"


def cells(text):
    """{cell number: its output} of a transcript of '# cell N' sections."""
    parts = re.split(r"^# cell (\d+)\n", text, flags=re.M)
    assert parts[0] == "", f"output before the first cell: {parts[0]!r}"
    return {int(n): body for n, body in zip(parts[1::2], parts[2::2])}


def expected_transcript():
    text = (DATA / "pmap_quickstart.expected").read_text()
    assert text.count("<class 'weft::ShardedArray'>") == 1
    return text.replace("<class 'weft::ShardedArray'>", "<class 'weft.ShardedArray'>")


EXPECTED = cells(expected_transcript())


@pytest.fixture(scope="module")
def transcript():
    done, seconds = run_python([str(EXAMPLE)], timeout=120)
    assert done.returncode == 0, f"{EXAMPLE.name} exited with {done.returncode}:\n{done.stderr}"
    assert done.stderr == "", f"{EXAMPLE.name} wrote to stderr:\n{done.stderr}"
    return done.stdout


def test_same_cells(transcript):
    assert list(cells(transcript)) == list(EXPECTED)


@pytest.mark.parametrize("cell", list(EXPECTED))
def test_cell(transcript, cell):
    got = cells(transcript).get(cell)
    assert got == EXPECTED[cell], f"cell {cell}:\n--- got ---\n{got}--- expected ---\n{EXPECTED[cell]}"


def test_rule30_is_the_notebooks(transcript):
    board = cells(transcript)[22].splitlines()
    notebook = (DATA / "notebook-rule30.txt").read_text().splitlines()
    assert len(board) == 21 and board == notebook
