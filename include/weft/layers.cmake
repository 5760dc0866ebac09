# The public headers (include/weft/<name>.hpp) by layer, bottom up: the one list. The include check
# (tests/layering/check_includes.cmake) reads it, and tests/python/test_docs.py holds docs/design.md's layer
# paragraph and the headers in include/weft/ to it, so a new public header is placed in a layer here or fails.
# Not installed (the package installs *.hpp only).
#
# core: values and pure functions, no arrays, no runtime.
set(weft_core_public call_site dtype error groups program_params reduce_op settings)
# array: arrays, their memory accounting, operations, random numbers, npy.
set(weft_array_public array memory npy ops random)
# program: SSA programs (docs/programs.md).
set(weft_program_public program)
# runtime: the replica API, pmap, sessions, tracing and the transformations; `weft` includes them all.
set(weft_runtime_public autodiff checkpoint control_flow custom_vjp jit pmap replica runtime session sharded_array transforms weft)
