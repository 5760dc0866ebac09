#!/usr/bin/python3
# numpy interop of weft's .npy files and checkpoints (run by ctest with Debian's /usr/bin/python3 + numpy):
#  1. numpy reads what weft wrote (npy_tool write): dtype, shape, every value, format version 1.0;
#  2. weft reads what numpy wrote (npy_tool check): every dtype weft supports, big-endian, Fortran order,
#     format versions 1.0, 2.0 and 3.0, 0-d and empty arrays, non-contiguous sources;
#  3. a checkpoint written by save_checkpoint (npy_tool checkpoint) is a valid safetensors file, read here
#     with nothing but json and numpy.
# The values follow the formula documented in npy_tool.cc, computed here independently.
# Usage: numpy_interop.py NPY_TOOL WORKDIR. Exit status 0 when everything matched.
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

failures = []


def fail(what):
    failures.append(what)
    print("MISMATCH", what)


def formula(dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    i = np.arange(n, dtype=np.int64)
    if dtype in ("float16", "float32", "float64"):
        v = ((i % 17) - 8) / 4.0
    elif dtype == "int8":
        v = (37 * i) % 256 - 128
    elif dtype == "uint8":
        v = (37 * i) % 256
    elif dtype == "int32":
        v = np.array([(2654435761 * int(k)) % 2**32 - 2**31 for k in range(n)], dtype=np.int64)
    elif dtype == "int64":
        v = np.array([(0x9E3779B97F4A7C15 * int(k)) % 2**64 - 2**63 for k in range(n)], dtype=np.int64)
    elif dtype == "bool":
        v = i % 3 == 0
    else:
        raise ValueError(dtype)
    return v.astype(dtype).reshape(shape)


SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, np.float32(1.4e-45), np.finfo(np.float32).max], dtype=np.float32)


def numpy_reads_weft(tool, directory):
    subprocess.run([tool, "write", directory], check=True)
    expected = {  # file -> (numpy dtype, shape); bfloat16 is written as float32
        "f16_2x3": ("float16", (2, 3)), "f32_5": ("float32", (5,)), "f64_2x3x4": ("float64", (2, 3, 4)),
        "bf16_4": ("float32", (4,)), "i8_300": ("int8", (300,)), "i32_3x7": ("int32", (3, 7)),
        "i64_2x2": ("int64", (2, 2)), "u8_256": ("uint8", (256,)), "bool_9": ("bool", (9,)),
        "f32_scalar": ("float32", ()), "i32_empty": ("int32", (0,)), "f64_empty_3x0": ("float64", (3, 0)),
        "f32_large": ("float32", (1000, 1000)),
    }
    for name, (dtype, shape) in expected.items():
        path = os.path.join(directory, name + ".npy")
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
        if version != (1, 0):
            fail("%s: format version %s, expected (1, 0)" % (name, version))
        a = np.load(path)
        if a.dtype != np.dtype(dtype) or a.shape != shape:
            fail("%s: %s %s, expected %s %s" % (name, a.dtype, a.shape, dtype, shape))
            continue
        if not np.array_equal(a, formula(dtype, shape)):
            fail("%s: values differ" % name)
    a = np.load(os.path.join(directory, "f32_special.npy"))
    if a.dtype != np.float32 or a.tobytes()[4:] != SPECIALS.tobytes()[4:] or not np.isnan(a[0]):
        fail("f32_special: %r" % a)
    print("numpy read %d files weft wrote" % (len(expected) + 1))


def weft_reads_numpy(tool, directory):
    manifest = []

    def put(name, array, dtype_name, version=None):
        path = os.path.join(directory, name + ".npy")
        with open(path, "wb") as f:
            np.lib.format.write_array(f, array, version=version)
        manifest.append("%s.npy %s %s" % (name, dtype_name, " ".join(str(d) for d in array.shape)))

    for dtype in ("float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"):
        c = formula(dtype, (2, 3, 4))
        put(dtype + "_c", c, dtype)
        put(dtype + "_fortran", np.asfortranarray(c), dtype)
        if np.dtype(dtype).itemsize > 1:
            be = c.astype(np.dtype(dtype).newbyteorder(">"))
            put(dtype + "_big_endian", be, dtype)
            put(dtype + "_big_endian_fortran", np.asfortranarray(be), dtype)
        put(dtype + "_v2", c, dtype, version=(2, 0))
        put(dtype + "_v3", c, dtype, version=(3, 0))
        put(dtype + "_scalar", formula(dtype, ()), dtype)
        put(dtype + "_empty", formula(dtype, (0, 5)), dtype)
    # A non-contiguous view: numpy writes it in C order; values must still follow the formula.
    wide = np.zeros((3, 8), dtype=np.int32)
    wide[:, ::2] = formula("int32", (3, 4))
    put("int32_strided_source", wide[:, ::2], "int32")
    big = formula("float64", (300, 700))
    put("float64_large_fortran", np.asfortranarray(big), "float64")
    put("float32_special", SPECIALS, "float32")
    with open(os.path.join(directory, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    result = subprocess.run([tool, "check", directory], stdout=subprocess.PIPE, text=True)
    print(result.stdout, end="")
    if result.returncode != 0:
        fail("npy_tool check exited with %d" % result.returncode)
    if ("checked %d files, 0 mismatches" % len(manifest)) not in result.stdout:
        fail("npy_tool did not check all %d files" % len(manifest))


SAFETENSORS_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I8": "i1", "I32": "<i4", "I64": "<i8", "U8": "u1",
                      "BOOL": "?"}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    if n % 8 != 0:
        fail("checkpoint header length %d is not a multiple of 8" % n)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    metadata = header.pop("__metadata__")
    tensors = {}
    end = 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = info["data_offsets"]
        if begin != end:
            fail("checkpoint tensor %s starts at %d, not where the previous ended (%d)" % (name, begin, end))
        end = stop
        if info["dtype"] == "BF16":
            raw = np.frombuffer(body[begin:stop], dtype="<u2").astype(np.uint32) << 16
            tensors[name] = raw.view(np.float32).reshape(info["shape"])
        else:
            tensors[name] = np.frombuffer(body[begin:stop], dtype=SAFETENSORS_DTYPES[info["dtype"]]).reshape(info["shape"])
    if end != len(body):
        fail("checkpoint data holds %d bytes but the tensors cover %d" % (len(body), end))
    return metadata, tensors


def read_checkpoint(tool, directory):
    path = os.path.join(directory, "session.safetensors")
    subprocess.run([tool, "checkpoint", path], check=True)
    metadata, tensors = read_safetensors(path)
    if metadata.get("step") != "7" or metadata.get("note") != "written by npy_tool":
        fail("checkpoint user metadata: %r" % metadata)
    layout = json.loads(metadata["weft"])
    if layout.get("replicas") != 4 or [v["name"] for v in layout["variables"]] != ["w", "layer.0/bias", "scale"]:
        fail("checkpoint layout: %r" % layout)
    grouped = np.stack([formula("int32", (3,)), formula("int32", (3,)) + 1000])
    entry = np.stack([formula("uint8", (5,)) + r for r in range(4)])
    expected = {"w": formula("float32", (2, 3)), "layer.0/bias": grouped, "scale": formula("float32", (4,)),
                "remote_buffer_1/entry_0": entry}
    if sorted(tensors) != sorted(expected):
        fail("checkpoint tensors %s, expected %s" % (sorted(tensors), sorted(expected)))
        return
    for name, want in expected.items():
        got = tensors[name]
        if got.shape != want.shape or not np.array_equal(got, want):
            fail("checkpoint tensor %s: %r, expected %r" % (name, got, want))
    print("read the checkpoint's %d tensors with numpy" % len(tensors))


def main():
    tool, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    for sub in ("from_weft", "from_numpy", "checkpoint"):
        os.makedirs(os.path.join(work, sub))
    numpy_reads_weft(tool, os.path.join(work, "from_weft"))
    weft_reads_numpy(tool, os.path.join(work, "from_numpy"))
    read_checkpoint(tool, os.path.join(work, "checkpoint"))
    if failures:
        print("%d mismatches" % len(failures))
        return 1
    print("all matched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
