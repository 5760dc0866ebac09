"""weft leaves its host process as it found it (issue 45, item 15; docs/settings.md, "The process's malloc"):
in a fresh /usr/bin/python3, every process-wide setting is read before `import weft` and again after a pmap, a
traced pmap and a jit with matmuls large enough for the matmul libraries, and each must be unchanged.
glibc malloc's tuning is observed (whether freeing an mmap'ed block lets the next one of that size come from
the heap, glibc's dynamic threshold, which a process-wide mallopt turns off), the rest read through libc:
every signal's disposition, the thread's signal stack and blocked signals, the rounding mode, the C
environment, locale, umask, resource limits, and the thread counts of OpenMP (libgomp, which oneDNN and
PyTorch use) and of OpenBLAS (the one numpy uses here). Python's own view of the state is no help (it
caches os.environ, and signal.getsignal sees Python-level handlers only).
"""
import json
import os

import pytest

from conftest import run_python

SCRIPT = r'''
import ctypes, ctypes.util, json, os, resource, sys
import numpy as np

libc = ctypes.CDLL(None, use_errno=True)

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.setlocale.restype = ctypes.c_char_p

def malloc_threshold():
    """"dynamic" (glibc's default: a freed mmap'ed block raises the threshold to its size) or "fixed" (a
    process-wide mallopt): doubles a size from 256 KiB until malloc mmaps it, frees it, allocates it again."""
    size = 256 << 10
    while size <= 32 << 20:
        before = libc.mallinfo2().hblks
        p = libc.malloc(size); first = libc.mallinfo2().hblks > before; libc.free(p)
        if first:
            q = libc.malloc(size); second = libc.mallinfo2().hblks > before; libc.free(q)
            return "fixed" if second else "dynamic"
        size *= 2
    return "dynamic (at its maximum)"

def optional(name, symbol):
    try:
        return getattr(ctypes.CDLL(name), symbol)
    except (OSError, AttributeError):
        return None

omp_get = optional("libgomp.so.1", "omp_get_max_threads")
omp_set = optional("libgomp.so.1", "omp_set_num_threads")
blas_get = optional("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0", "openblas_get_num_threads")
blas_set = optional("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0", "openblas_set_num_threads")
# The host's own choices, other than weft's 1, so that a change shows.
if omp_set: omp_set(3)
if blas_set: blas_set(3)

def snapshot():
    s = {"malloc's mmap threshold": malloc_threshold()}
    SIGRTMAX = libc.__libc_current_sigrtmax()
    for sig in range(1, SIGRTMAX + 1):
        buf = ctypes.create_string_buffer(256)  # struct sigaction: handler, mask, flags, restorer
        if libc.sigaction(sig, None, buf) == 0:
            handler = ctypes.c_void_p.from_buffer(buf, 0).value
            flags = ctypes.c_int.from_buffer(buf, 8 + 128).value & ~0x04000000  # glibc adds SA_RESTORER
            s[f"signal {sig} disposition"] = f"{handler} flags {flags}"
    stack = ctypes.create_string_buffer(24)  # stack_t: ss_sp, ss_flags, ss_size
    libc.sigaltstack(None, stack)
    s["thread's signal stack"] = "none" if ctypes.c_int.from_buffer(stack, 8).value & 2 else str(ctypes.c_void_p.from_buffer(stack, 0).value)
    mask = ctypes.create_string_buffer(128)
    libc.pthread_sigmask(0, None, mask)
    s["thread's blocked signals"] = mask.raw.hex()
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    s["fegetround"] = libm.fegetround()
    environ = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
    entries, i = [], 0
    while environ[i]:
        entries.append(environ[i].decode(errors="replace")); i += 1
    s["environment"] = sorted(entries)
    s["locale"] = libc.setlocale(6, None).decode()  # LC_ALL
    mask_now = os.umask(0o22); os.umask(mask_now)
    s["umask"] = mask_now
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            s[name] = list(resource.getrlimit(getattr(resource, name)))
    if omp_get: s["thread's omp_get_max_threads"] = omp_get()
    if blas_get: s["openblas_get_num_threads"] = blas_get()
    return s

np.ones((64, 64)) @ np.ones((64, 64))  # numpy's BLAS loaded and started before the first snapshot
before = snapshot()

import weft
x = np.ones((weft.device_count(), 64, 64), np.float32)
weft.pmap(lambda a: a @ a)(x)
weft.pmap(lambda a: (a @ a, a.astype(np.float64) @ a.astype(np.float64)))(x)
weft.jit(lambda a: a @ a + 1)(x[0])
weft.jit(lambda a: a @ a + 1)(x[0].astype(np.float64))
after = snapshot()
print(json.dumps({"before": before, "after": after}))
'''


@pytest.mark.parametrize("gemm", ["auto", "openblas"])
def test_import_and_a_pmap_leave_the_process_as_they_found_it(gemm):
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", "") or any(
            v in os.environ for v in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        pytest.skip("the environment tunes malloc")
    done, _ = run_python(SCRIPT, timeout=120, WEFT_GEMM=gemm)
    assert done.returncode == 0, done.stdout + done.stderr
    states = json.loads(done.stdout.strip().splitlines()[-1])
    before, after = states["before"], states["after"]
    # glibc's default, which weft must leave in place.
    assert before["malloc's mmap threshold"].startswith("dynamic")
    assert sorted(after) == sorted(before)
    changed = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    assert changed == {}, f"weft changed the process's state (before, after): {changed}"
