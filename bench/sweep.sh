#!/usr/bin/env bash
# bench/sweep.sh: time against buffer size and device count for every op, weft (weft-bench --sweep, one
# process) and Open MPI at its best (bench/mpi_collectives, one mpirun per device count), as JSON lines in
# $OUT, then the two PNGs of docs/benchmarks.md (scripts/plot_benchmarks.py, with the host copy bandwidth for
# the roofline). Each point is a median of REPS repetitions of ~BUDGET_MS; points whose buffers would pass a
# third of the RAM are skipped on both sides.
#
#   bench/sweep.sh                                   # after building weft (cmake --build build)
#   OPS=allreduce SWEEP_DEVICES=2,4,8 SIZES=4K,1M bench/sweep.sh
#
# Knobs (environment): BUILD (default build), OUT (default $BUILD/bench/sweep), OPS (default: all five),
# SWEEP_DEVICES (default 2,4,8,16,32), SIZES (default 4K,64K,1M,16M,64M), BUDGET_MS (default 50), REPS
# (default 3), IDLE_WAIT (seconds to wait for idle CPUs before each run, default 30), PLOT_DIR (default $OUT).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
OUT="${OUT:-$BUILD/bench/sweep}"
OPS="${OPS:-allreduce all_gather reduce_scatter all_to_all ppermute}"
SWEEP_DEVICES="${SWEEP_DEVICES:-2,4,8,16,32}"
SIZES="${SIZES:-4K,64K,1M,16M,64M}"
BUDGET_MS="${BUDGET_MS:-50}"
REPS="${REPS:-3}"
IDLE_WAIT="${IDLE_WAIT:-30}"
PLOT_DIR="${PLOT_DIR:-$OUT}"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log() { echo "sweep.sh: $*" >&2; }

mkdir -p "$OUT"
cmake --build "$BUILD" --target weft-bench >&2
mpicc -O2 -std=c11 -Wall -Wextra -o "$OUT/mpi_collectives" "$ROOT/bench/mpi_collectives.c"
max_memory=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) * 1024 / 3))

: >"$OUT/weft.jsonl"
: >"$OUT/mpi.jsonl"
for op in $OPS; do
  wait_for_idle
  log "weft-bench --op $op --sweep --sweep-devices $SWEEP_DEVICES --sizes $SIZES"
  "$BUILD/bin/weft-bench" --op "$op" --sweep --sweep-devices "$SWEEP_DEVICES" --sizes "$SIZES" \
    --budget-ms "$BUDGET_MS" --reps "$REPS" --max-memory "$max_memory" >>"$OUT/weft.jsonl"
  for devices in ${SWEEP_DEVICES//,/ }; do
    # The sizes that fit, by the rule weft-bench applies (three buffers of devices x size).
    fit=""
    for size in ${SIZES//,/ }; do
      bytes=$(numfmt --from=iec "$size")
      [ $((3 * devices * bytes)) -le "$max_memory" ] && fit="${fit:+$fit,}$size"
    done
    [ -n "$fit" ] || continue
    wait_for_idle
    log "mpirun -np $devices mpi_collectives --op $op --sizes $fit"
    mpirun -np "$devices" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 "$OUT/mpi_collectives" \
      --op "$op" --sizes "$fit" --budget-ms "$BUDGET_MS" --reps "$REPS" --json >>"$OUT/mpi.jsonl"
  done
done
membw=$("$BUILD/bin/weft-bench" --op membw --json | sed -n 's/.*"busbw_GBps":\([0-9.]*\).*/\1/p' | head -1)
log "host copy bandwidth: $membw GB/s"
/usr/bin/python3 "$ROOT/scripts/plot_benchmarks.py" --weft "$OUT/weft.jsonl" --mpi "$OUT/mpi.jsonl" \
  --membw "${membw:-0}" --out-dir "$PLOT_DIR"
