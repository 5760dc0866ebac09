"""Program parameters cross from Python by the C++ registry's schemas (issue 46 item 1).

ProgramBuilder.emit takes (name, value) pairs and converts each value by the op's schema (weft::op_schema), so
Python spells no kind: each case's pairs must give the parameters they mean, written out as a jaxpr prints them
(`sum[axes=(1,)]`, `psum[axes=('i',) groups=((0, 1), (2, 3))]`). The older (name, kind, value) triples, and
anything else that is not a pair, are a TypeError naming the pair. A value of another kind, a parameter the op
does not have and an unknown op are refused with their texts (the registry's own kind check, which C++ callers
meet, is tests/unit/program_registry_test.cc's).
"""
import numpy as np
import pytest

import weft
from weft import _weft


def program_text(op, shape, params, mesh=(), dtype=np.float32):
    b = _weft.ProgramBuilder(list(mesh))
    x = b.input(dtype, list(shape), ["i"] if mesh else [])
    outs = b.emit(op, [x], params, "")
    b.set_outputs([outs[0][0]] if outs else [])
    return str(b.build())


MESH2 = [("i", 2)]
MESH4 = [("i", 4)]
# (op, operand shape, mesh, pairs, the parameters they mean as a jaxpr prints them, sorted by name). An empty
# list is ints for sum and axis names for psum; a list of pairs a permutation for ppermute and groups for psum:
# the schema decides.
CASES = [
    ("sum", (2, 3), (), [("axes", []), ("keepdims", True)], "axes=() keepdims=True"),
    ("sum", (2, 3), (), [("axes", [1])], "axes=(1,)"),
    ("transpose", (2, 3), (), [("perm", [1, 0])], "perm=(1, 0)"),
    ("astype", (2,), (), [("dtype", np.float64)], "dtype=float64"),
    ("astype", (2,), (), [("dtype", np.dtype("int32"))], "dtype=int32"),
    ("integer_pow", (2,), (), [("y", 3)], "y=3"),
    ("slice", (4,), (), [("start", [0]), ("limit", [4]), ("step", [2])], "limit=(4,) start=(0,) step=(2,)"),
    ("cumsum", (3,), (), [("axis", 0), ("reverse", True)], "axis=0 reverse=True"),
    ("psum", (2,), MESH2, [("axes", ["i"])], "axes=('i',)"),
    ("psum", (2,), MESH4, [("axes", ["i"]), ("groups", [[0, 1], [2, 3]])], "axes=('i',) groups=((0, 1), (2, 3))"),
    ("ppermute", (2,), MESH2, [("axes", ["i"]), ("perm", [(0, 1), (1, 0)])], "axes=('i',) perm=((0, 1), (1, 0))"),
    ("all_gather", (2,), MESH2, [("axes", ["i"]), ("axis", 0), ("tiled", True)], "axes=('i',) axis=0 tiled=True"),
    ("host_store", (2,), (), [("stream", "out")], "stream='out'"),
]


@pytest.mark.parametrize("op,shape,mesh,pairs,printed", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_pairs_convert_by_the_schema(op, shape, mesh, pairs, printed):
    assert f" {op}[{printed}] a" in program_text(op, shape, pairs, mesh)


def test_the_checkpoint_marker_is_an_int():
    assert "checkpoint=7" in program_text("sum", (2, 3), [("axes", [0]), ("keepdims", True), ("checkpoint", 7)])


# Entries that are not (name, value) pairs: the older triples first.
NOT_PAIRS = [
    ("sum", [("axes", "ints", [0])]),
    ("sum", [("axes", [0]), ("keepdims", "bool", True)]),
    ("integer_pow", [("y", "int", 3)]),
    ("sum", [["axes", [0]]]),  # a list, not a tuple
    ("sum", [("axes",)]),
    ("sum", [(0, [0])]),  # the name is not a string
]


@pytest.mark.parametrize("op,params", NOT_PAIRS, ids=[f"{c[0]}-{k}" for k, c in enumerate(NOT_PAIRS)])
def test_anything_but_a_pair_is_a_type_error_naming_the_pair(op, params):
    b = _weft.ProgramBuilder([])
    x = b.input(np.float32, [2, 3], [])
    with pytest.raises(TypeError) as e:
        b.emit(op, [x], params, "")
    bad = next(p for p in params if not (isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)))
    assert str(e.value) == (f"ProgramBuilder.emit: {op}'s parameter {bad!r} is not a (name, value) pair; the op's "
                            "schema gives each value's kind (_weft.op_schema), so (name, kind, value) triples are "
                            "not taken")
    assert b.num_equations == 0


# (op, shape, mesh, params, the refusal), each refused while its value is converted by the schema.
REFUSALS = [
    ("sum", (2, 3), (), [("axes", "i")], "parameter 'axes' = 'i' is not a tuple of ints"),
    ("sum", (2, 3), (), [("axis", 0)], "sum has no parameter 'axis'"),
    ("integer_pow", (2,), (), [("y", "3")], "parameter 'y' = '3' is not an int"),
    ("ppermute", (2,), MESH2, [("axes", ["i"]), ("perm", [0, 1])],
     "parameter 'perm' = [0, 1] is not a tuple of (source, destination) pairs"),
    ("host_store", (2,), (), [("stream", 3)], "parameter 'stream' = 3 is not a string"),
    ("psum", (2,), MESH2, [("axes", [0])], "parameter 'axes' = [0] is not a tuple of axis names"),
    ("sum", (2, 3), (), [("axes", ["i"])], "parameter 'axes' = ['i'] is not a tuple of ints"),
    ("add", (2,), (), [("checkpoint", "r")], "parameter 'checkpoint' = 'r' is not an int"),
]


@pytest.mark.parametrize("op,shape,mesh,params,message", REFUSALS, ids=[f"{c[0]}-{k}" for k, c in enumerate(REFUSALS)])
def test_refusals_name_the_parameter_and_its_kind(op, shape, mesh, params, message):
    if op == "add":
        b = _weft.ProgramBuilder([])
        x = b.input(np.float32, [2], [])
        with pytest.raises(weft.InvalidArgument) as e:
            b.emit(op, [x, x], params, "")
        assert message in str(e.value)
        return
    with pytest.raises(weft.InvalidArgument) as e:
        program_text(op, shape, params, mesh)
    assert message in str(e.value)


def test_an_unknown_op_is_refused_where_it_is_emitted():
    b = _weft.ProgramBuilder([])
    x = b.input(np.float32, [2], [])
    with pytest.raises(weft.InvalidArgument, match=r"^program builder: unknown op 'frobnicate' \(f.py:1\)$"):
        b.emit("frobnicate", [x], [], "f.py:1")
    with pytest.raises(weft.InvalidArgument, match=r"unknown op 'frobnicate'"):
        b.emit("frobnicate", [x], [("y", 1)], "f.py:1")
    assert b.num_equations == 0


def test_op_schema_is_what_emit_accepts():
    """Every parameter op_schema lists converts and is accepted by the registry; one it does not list is not."""
    for name, kind, required in _weft.op_schema("all_to_all"):
        assert kind in ("bool", "int", "str", "dtype", "ints", "strs", "perm", "groups"), (name, kind)
    assert [n for n, _, r in _weft.op_schema("all_to_all") if r] == ["axes", "split_axis", "concat_axis"]
    with pytest.raises(weft.InvalidArgument, match="unknown op 'frobnicate'"):
        _weft.op_schema("frobnicate")
