"""Program parameters cross from Python by the C++ registry's schemas (issue 46 item 1).

ProgramBuilder.emit takes (name, value) pairs and converts each value by the op's schema (weft::op_schema), so
Python spells no kind: each case's program is compared with the one the (name, kind, value) triples build (the
form weft/lax.py still writes, converted by the kind it names). A value of another kind, a parameter the op
does not have and an unknown op are refused with their texts, and the registry refuses a parameter of the wrong
kind even where the op's type rule never reads it.
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
# (op, operand shape, mesh, pairs, the same parameters as triples). An empty list is ints for sum and axis
# names for psum; a list of pairs a permutation for ppermute and groups for psum: the schema decides.
CASES = [
    ("sum", (2, 3), (), [("axes", []), ("keepdims", True)], [("axes", "ints", []), ("keepdims", "bool", True)]),
    ("sum", (2, 3), (), [("axes", [1])], [("axes", "ints", [1])]),
    ("transpose", (2, 3), (), [("perm", [1, 0])], [("perm", "ints", [1, 0])]),
    ("astype", (2,), (), [("dtype", np.float64)], [("dtype", "dtype", np.float64)]),
    ("astype", (2,), (), [("dtype", np.dtype("int32"))], [("dtype", "dtype", np.dtype("int32"))]),
    ("integer_pow", (2,), (), [("y", 3)], [("y", "int", 3)]),
    ("slice", (4,), (), [("start", [0]), ("limit", [4]), ("step", [2])],
     [("start", "ints", [0]), ("limit", "ints", [4]), ("step", "ints", [2])]),
    ("cumsum", (3,), (), [("axis", 0), ("reverse", True)], [("axis", "int", 0), ("reverse", "bool", True)]),
    ("psum", (2,), MESH2, [("axes", ["i"])], [("axes", "strs", ["i"])]),
    ("psum", (2,), MESH4, [("axes", ["i"]), ("groups", [[0, 1], [2, 3]])],
     [("axes", "strs", ["i"]), ("groups", "groups", [[0, 1], [2, 3]])]),
    ("ppermute", (2,), MESH2, [("axes", ["i"]), ("perm", [(0, 1), (1, 0)])],
     [("axes", "strs", ["i"]), ("perm", "perm", [(0, 1), (1, 0)])]),
    ("all_gather", (2,), MESH2, [("axes", ["i"]), ("axis", 0), ("tiled", True)],
     [("axes", "strs", ["i"]), ("axis", "int", 0), ("tiled", "bool", True)]),
    ("host_store", (2,), (), [("stream", "out")], [("stream", "str", "out")]),
]


@pytest.mark.parametrize("op,shape,mesh,pairs,triples", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_pairs_convert_by_the_schema(op, shape, mesh, pairs, triples):
    assert program_text(op, shape, pairs, mesh) == program_text(op, shape, triples, mesh)


def test_pairs_and_triples_mix_and_the_checkpoint_marker_is_an_int():
    mixed = [("axes", "ints", [0]), ("keepdims", True), ("checkpoint", 7)]
    assert "checkpoint=7" in program_text("sum", (2, 3), mixed)


# (op, shape, mesh, params, the refusal): pairs refused while converting, triples by the registry.
REFUSALS = [
    ("sum", (2, 3), (), [("axes", "i")], "parameter 'axes' = 'i' is not a tuple of ints"),
    ("sum", (2, 3), (), [("axis", 0)], "sum has no parameter 'axis'"),
    ("integer_pow", (2,), (), [("y", "3")], "parameter 'y' = '3' is not an int"),
    ("ppermute", (2,), MESH2, [("axes", ["i"]), ("perm", [0, 1])],
     "parameter 'perm' = [0, 1] is not a tuple of (source, destination) pairs"),
    # The registry checks each kind against the schema even where the type rule never reads the parameter
    # (host_store's stream is the executor's): once only the run refused it.
    ("host_store", (2,), (), [("stream", "int", 3)], "parameter 'stream' must be a string"),
    ("psum", (2,), MESH2, [("axes", "ints", [0])], "parameter 'axes' must be a tuple of axis names"),
    ("sum", (2, 3), (), [("axes", "strs", ["i"])], "parameter 'axes' must be a tuple of ints"),
    ("add", (2,), (), [("checkpoint", "str", "r")], "parameter 'checkpoint' must be an int"),
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
