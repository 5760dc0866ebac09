// The one source of weft_test_pch (tests/CMakeLists.txt): the target exists only to build GoogleTest's
// precompiled header, which every test program reuses (REUSE_FROM); it compiles nothing of its own.
