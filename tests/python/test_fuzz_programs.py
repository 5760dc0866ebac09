"""The differential fuzzer (fuzz_programs.py; docs/testing.md, "Differential fuzzer"): random typed programs
in every mode (eager, jit, traced pmap with and without groups, shard_map; WEFT_SHARED_RUNS 0/1/2; WEFT_FUSION
auto/off; threads and fibers) against each other bitwise and against numpy in float64 with JAX's dtypes; every
differentiable op's VJP against central differences; and the fuzzer's coverage of the C++ op registry.

WEFT_FUZZ_SEED (default 1) and WEFT_FUZZ_COUNT (default 300) choose the programs; a failure prints each
failing program with the line that replays it alone (WEFT_FUZZ_SEED=<seed> WEFT_FUZZ_COUNT=1).
"""
import os
import time

import numpy as np
import pytest

import fuzz_programs as fz
from conftest import registry_ops

FIRST = int(os.environ.get("WEFT_FUZZ_SEED", "1"))
COUNT = int(os.environ.get("WEFT_FUZZ_COUNT", "300"))
SHOWN = 8  # failing programs printed in full


def test_every_registry_op_is_generated_or_excluded_with_a_reason():
    ops = set(registry_ops())
    covered, excluded = set(fz.covered_ops()), set(fz.EXCLUDED)
    assert not (ops - covered - excluded), \
        f"registry ops the fuzzer neither generates nor excludes (add them to fuzz_programs.OPS or EXCLUDED with a reason): {sorted(ops - covered - excluded)}"
    assert not (covered & excluded), f"ops both generated and excluded: {sorted(covered & excluded)}"
    assert not ((covered | excluded) - ops), f"ops the registry no longer has: {sorted((covered | excluded) - ops)}"
    assert all(reason.strip() for reason in fz.EXCLUDED.values())


# Rows of JAX's promotion table ("Type promotion semantics", docs.jax.dev), read off the page, against the
# lattice the fuzzer computes them from; int16 is int32 in weft (include/weft/dtype.hpp).
@pytest.mark.parametrize("a, b, want", [
    (("uint8", False), ("int8", False), ("int32", False)),      # JAX: int16
    (("uint8", False), ("int32", False), ("int32", False)),
    (("int8", False), ("int", True), ("int8", False)),
    (("uint8", False), ("int", True), ("uint8", False)),
    (("int32", False), ("float", True), ("float32", True)),
    (("bool", False), ("int", True), ("int32", True)),
    (("bool", False), ("float", True), ("float32", True)),
    (("bfloat16", False), ("float", True), ("bfloat16", False)),
    (("bfloat16", False), ("float16", False), ("float32", False)),
    (("int64", False), ("float16", False), ("float16", False)),
    (("int8", False), ("bfloat16", False), ("bfloat16", False)),
    (("float32", False), ("float64", False), ("float64", False)),
    (("float32", False), ("float", True), ("float32", False)),
    (("int", True), ("int", True), ("int32", True)),
    (("float", True), ("float", True), ("float32", True)),
    (("int", True), ("float", True), ("float32", True)),
    (("bool", False), ("bool", False), ("bool", False)),
])
def test_promotion_table_matches_jax(a, b, want):
    def typ(t):
        return ("int32", True) if t == ("int", True) else ("float32", True) if t == ("float", True) else t
    with fz.x64_model(any(t[0] in ("int64", "float64") for t in (a, b))):  # (64-bit rows: x64 on, the table's)
        assert fz.result_type(typ(a), typ(b)) == want


# The model's x64 rules, from JAX's documentation ("Type promotion semantics": weak types take the default int /
# float, which jax_enable_x64 makes 64-bit; jnp.sum promotes integers narrower than the default int to it;
# jnp.mean, true division and transcendental functions of integers give the default float; argmax the default
# int; a 64-bit dtype is its 32-bit one with x64 off).
@pytest.mark.parametrize("x64, got, want", [
    (False, lambda: fz.result_type(("int64", True), ("float64", True)), ("float32", True)),
    (True, lambda: fz.result_type(("int64", True), ("float64", True)), ("float64", True)),
    (True, lambda: fz.result_type(("int64", True), ("int64", True)), ("int64", True)),
    (True, lambda: fz.result_type(("float16", False), ("float64", True)), ("float16", False)),
    (True, lambda: fz.result_type(("int8", False), ("int64", True)), ("int8", False)),
    (True, lambda: fz.result_type(("bool", False), ("int64", True)), ("int64", True)),
    (True, lambda: fz.result_type(("int32", False), ("float64", True)), ("float64", True)),
    (False, lambda: fz.result_type(("int32", False), ("float32", True)), ("float32", True)),
    (True, lambda: fz.result_type(("float32", False), ("float64", False)), ("float64", False)),
    (False, lambda: fz.scalar_ref(2.5).dt, "float32"),
    (True, lambda: fz.scalar_ref(2.5).dt, "float64"),
    (True, lambda: fz.scalar_ref(3).dt, "int64"),
    (False, lambda: [fz.sum_dtype(d) for d in ("bool", "int8", "uint8", "int32")], ["int32"] * 4),
    (True, lambda: [fz.sum_dtype(d) for d in ("bool", "int8", "uint8", "int32", "int64")], ["int64"] * 5),
    (True, lambda: fz.sum_dtype("float16"), "float16"),
    (False, lambda: [fz.canon(d) for d in ("float64", "int64", "float16", "uint8")],
     ["float32", "int32", "float16", "uint8"]),
    (True, lambda: [fz.canon(d) for d in ("float64", "int64")], ["float64", "int64"]),
])
def test_x64_rules_match_jax(x64, got, want):
    with fz.x64_model(x64):
        assert got() == want


@pytest.mark.parametrize("x64, want", [(False, ("float32", "int32", "float32", "float32")),
                                       (True, ("float64", "int64", "float64", "float64"))])
def test_x64_reference_ops_use_the_defaults(x64, want):
    # mean of int8, argmax, int / int, exp of an int: JAX's default float / int under either setting
    with fz.x64_model(x64):
        a = fz.R(np.arange(fz.N * 3, dtype=np.int8).reshape(fz.N, 3), "int8")
        b = fz.R(np.full((fz.N, 3), 2, dtype=np.int8), "int8")
        got = (fz.ref_reduce("mean", a, None, False).dt, fz.ref_arg("argmax", a, None, False).dt,
               fz.ref_binary("divide", a, b).dt, fz.ref_unary("exp", a).dt)
    assert got == want


def test_x64_off_rounds_64_bit_inputs_to_32_bits():
    # float64 1 + 2**-30 entering the API with x64 off is float32 1.0 (round to nearest); with x64 on it stays
    v = np.full((fz.N,), 1 + 2.0 ** -30)
    with fz.x64_model(False):
        off = fz.canonical_ref(fz.R(v, "float64"))
    with fz.x64_model(True):
        on = fz.canonical_ref(fz.R(v, "float64"))
    assert (off.dt, on.dt) == ("float32", "float64")
    assert np.all(off.v == 1.0) and np.all(on.v == v)


def test_programs_run_under_both_x64_settings():
    seeds = range(1, 1 + fz.X64_EVERY)
    assert {fz.generate(s).x64 for s in seeds} == {False, True}
    assert all(fz.generate(s).x64 == fz.x64_of(s) for s in seeds)


@pytest.mark.parametrize("dt", ["bfloat16", "float16", "float32"])
def test_reference_rounding_is_round_to_nearest_even(dt):
    # Halfway cases between two representable numbers round to the even one; others to the nearest.
    bits = {"bfloat16": 8, "float16": 11, "float32": 24}[dt]
    one_ulp = 2.0 ** (1 - bits)
    v = np.array([1 + one_ulp / 2, 1 + 1.5 * one_ulp, 1 + one_ulp * 0.49, -(1 + one_ulp * 0.51)])
    want = np.array([1.0, 1 + 2 * one_ulp, 1.0, -(1 + one_ulp)])
    assert np.array_equal(fz.rnd(dt, v), want)


def test_bfloat16_rounding_from_float64_rounds_once():
    # 1 + 2**-8 + 2**-30 is above the tie between bfloat16's 1 and 1 + 2**-7: once rounded, 1 + 2**-7; through
    # float32 it would become the tie 1 + 2**-8 and then 1 (round to even). Also the top and overflow, the
    # subnormals' step 2**-133, signed zero and NaN.
    top = (2 - 2.0 ** -7) * 2.0 ** 127
    v = np.array([1 + 2.0 ** -8 + 2.0 ** -30, -(1 + 2.0 ** -8 + 2.0 ** -30), top, top * (1 + 2.0 ** -8),
                  3 * 2.0 ** -134, -0.0, np.nan])
    got = fz.rnd("bfloat16", v)
    want = np.array([1 + 2.0 ** -7, -(1 + 2.0 ** -7), top, np.inf, 2 * 2.0 ** -133, -0.0, np.nan])
    assert np.array_equal(got, want, equal_nan=True) and np.signbit(got[5])


def test_random_programs_agree_across_modes_and_with_numpy():
    start = time.monotonic()
    stats, failures, child_problems = fz.run_programs(FIRST, COUNT)
    elapsed = time.monotonic() - start
    print(f"\n{stats['programs']} programs (seeds {FIRST}..{FIRST + COUNT - 1}; {stats['large']} with a value of >= "
          f"{fz.LARGE} elements ({stats['huge']} of >= {fz.HUGE}), {stats['groups']} with axis_index_groups) in "
          f"{elapsed:.1f} s; ops generated: " + ", ".join(f"{k} {v}" for k, v in sorted(stats["ops"].items())))
    message = [failures[seed] for seed in sorted(failures)[:SHOWN]]
    if len(failures) > SHOWN:
        message.append(f"... and {len(failures) - SHOWN} more failing seeds: {sorted(failures)[SHOWN:]}")
    assert not child_problems, "\n".join(child_problems)
    assert not failures, f"{len(failures)} of {stats['programs']} programs failed (seeds {sorted(failures)})\n\n" \
        + "\n\n".join(message)


VJP_CASES = max(len(fz.VJP_OPS) * 3, COUNT // 4)


def test_vjps_match_central_differences():
    problems, ran = [], {}
    for seed in range(FIRST, FIRST + VJP_CASES):
        name, checked, problem = fz.vjp_case(seed)
        ran[name] = ran.get(name, 0) + checked
        if problem:
            problems.append(f"seed {seed} ({name}): {problem}")
    print(f"\nVJPs checked: {ran}")
    assert not [n for n in fz.VJP_OPS if not ran.get(n)], f"differentiable ops never checked: {ran}"
    assert not problems, "\n".join(problems[:20])
