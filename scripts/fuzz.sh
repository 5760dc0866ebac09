#!/usr/bin/env bash
# A long fuzz campaign on one or all of weft's fuzz targets (tests/fuzz/; docs/testing.md, "Fuzzing").
# ./test runs each target briefly with a fixed seed; this runs them for as long as you like.
#
#   scripts/fuzz.sh [TARGET|all] [SECONDS per target, default 600] [extra libFuzzer flags...]
#   targets: npy weftrun_args mpirun_output (clang's libFuzzer, coverage-guided)
#            checkpoint case_file settings  (the seeded driver, a new seed per round)
#
# Why two engines: Debian 12's clang is clang 14, which lacks std::source_location (weft's public headers use
# it), so it cannot compile code that includes weft/weft.hpp. The targets whose parsers do not (the .npy
# reader, weftrun's command line and mpirun parsers) are built with clang++-14 -fsanitize=fuzzer,address,
# undefined (packages clang-14, libclang-rt-14-dev) and linked with the g++-built core library; the others
# run under the deterministic driver (g++, AddressSanitizer + UBSan) with ever new seeds.
#
# Everything goes to $WEFT_FUZZ_BUILD (default build-fuzz): the g++ build in gcc/, libFuzzer binaries in
# libfuzzer/, what libFuzzer learns in corpus/<target>/ (reused by the next campaign; tests/data/fuzz/<target>/
# is read as seeds, never written), and crashes in artifacts/<target>/ (libFuzzer: crash-<sha1>; the driver:
# fuzz-crash-*.bin). Reproduce with the target's binary and the file, fix the parser, then copy the file to
# tests/data/fuzz/<target>/crash-<what-it-was> so that ./test replays it from then on.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEFT_FUZZ_BUILD:-$root/build-fuzz}"
target="${1:-all}"
seconds="${2:-600}"
shift $(( $# > 2 ? 2 : $# ))
libfuzzer_targets=(npy weftrun_args mpirun_output)
driver_targets=(checkpoint case_file settings)
if [ "$target" = all ]; then targets=("${libfuzzer_targets[@]}" "${driver_targets[@]}"); else targets=("$target"); fi
jobs="$(nproc)"
data="$root/tests/data/fuzz"

cmake -S "$root" -B "$build/gcc" -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TOOLS=OFF >/dev/null

is_libfuzzer() { local t; for t in "${libfuzzer_targets[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }

build_libfuzzer() {  # build_libfuzzer TARGET: the target and its parser sources, instrumented, into libfuzzer/
  local t="$1" cxx="${CXX:-clang++-14}" sources=() libs=()
  command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx not found (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 2; }
  case "$t" in
    npy) sources=("$root/src/array/npy.cc"); cmake --build "$build/gcc" -j "$jobs" --target weft_array >/dev/null
         libs=("$build/gcc/lib/libweft_array.a" "$build/gcc/lib/libweft_core.a") ;;
    weftrun_args) sources=("$root/tools/weftrun/options.cc") ;;
    mpirun_output) sources=("$root/tools/weftrun/tagged_output.cc" "$root/tools/weftrun/mpirun_report.cc") ;;
  esac
  mkdir -p "$build/libfuzzer"
  "$cxx" -std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
         -I"$root/include" -I"$root/src" -I"$root/tools/weftrun" "$root/tests/fuzz/${t}_fuzz.cc" "${sources[@]}" \
         "${libs[@]}" -o "$build/libfuzzer/weft_fuzz_$t"
}

for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  dict=()
  if is_libfuzzer "$t"; then
    build_libfuzzer "$t"
    [ -f "$data/$t.dict" ] && dict=(-dict="$data/$t.dict")
    echo "fuzz.sh: $t (libFuzzer) for $seconds s"
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}" \
      "$build/libfuzzer/weft_fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
        -artifact_prefix="$build/artifacts/$t/" "${dict[@]}" "$@" "$build/corpus/$t" "$data/$t"
  else
    cmake --build "$build/gcc" -j "$jobs" --target "weft_fuzz_$t" >/dev/null
    [ -f "$data/$t.dict" ] && dict=(--dict "$data/$t.dict")
    echo "fuzz.sh: $t (seeded driver) for $seconds s"
    end=$((SECONDS + seconds))
    while [ "$SECONDS" -lt "$end" ]; do
      seed="$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"
      (cd "$build/artifacts/$t" &&
        ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:max_allocation_size_mb=2048:allocator_may_return_null=1}" \
        "$build/gcc/bin/weft_fuzz_$t" --runs 20000 --seed "$seed" "${dict[@]}" "$data/$t") ||
        { echo "fuzz.sh: $t failed with --seed $seed; the input is in $build/artifacts/$t/" >&2; exit 1; }
    done
  fi
done
