#!/usr/bin/env bash
# bench/traced_pmap.sh: issue 22's C++ floor, a traced pmap call with one psum (pmap(jit(f)), weft/jit.hpp)
# within 1.2x of the hand-called pmap. Alternates the two (weft-bench --op psum_call [--traced]) and prints
# each one's median over the runs and their ratio.
#
#   bench/traced_pmap.sh              # after building weft-bench (cmake --build build --target weft-bench)
#   BUILD=build-rel RUNS=21 DEVICES=8 bench/traced_pmap.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
RUNS="${RUNS:-11}"
DEVICES="${DEVICES:-8}"
BENCH="$BUILD/bin/weft-bench"
[ -x "$BENCH" ] || { echo "traced_pmap.sh: $BENCH is not built (cmake --build $BUILD --target weft-bench)" >&2; exit 2; }

time_of() { "$BENCH" --op psum_call --devices "$DEVICES" --json "$@" | sed -E 's/.*"time_us":([0-9.]+).*/\1/'; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

hand=()
traced=()
for _ in $(seq "$RUNS"); do
  hand+=("$(time_of)")
  traced+=("$(time_of --traced)")
done
h=$(printf '%s\n' "${hand[@]}" | median)
t=$(printf '%s\n' "${traced[@]}" | median)
echo "pmap call with one psum, $DEVICES devices, medians of $RUNS alternating runs:"
echo "  hand-called pmap(f):   $h us   (runs: ${hand[*]})"
echo "  traced pmap(jit(f)):   $t us   (runs: ${traced[*]})"
awk -v h="$h" -v t="$t" 'BEGIN {printf "  traced / hand:         %.3f (floor: 1.2)\n", t / h}'
