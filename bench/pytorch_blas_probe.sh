#!/usr/bin/env bash
# bench/pytorch_blas_probe.sh: which BLAS makes Debian's PyTorch fastest here, so that bench/compare_training.sh
# measures weft against PyTorch at its best and not against a misconfigured one. Debian's torch 1.13 does its
# float32 matmuls in whatever libblas.so.3 the loader finds (BLAS_INFO=generic); the default alternative may
# be the reference BLAS (a few GFLOP/s), and Debian's OpenBLAS 0.3.21 does not know this CPU (family 6 model
# 207) and falls back to its Prescott kernels unless OPENBLAS_CORETYPE names a core it has. Each candidate is
# picked per run with LD_LIBRARY_PATH (the system alternative is left alone) and measured twice: a plain
# (256,784)@(784,512) float32 matmul in GFLOP/s and bench/pytorch_mlp.py single-process training samples/s.
#
#   bench/pytorch_blas_probe.sh                 # all candidates, 3 alternating rounds, markdown table on stdout
#   REPS=5 STEPS=100 THREADS=2 bench/pytorch_blas_probe.sh
#
# Knobs (environment): REPS (rounds, default 3), STEPS (training steps per run, default 60; the first 10 are
# warm-up), THREADS (intra-op threads, default 1: with one thread the CPU-time columns rank the kernels even
# on a machine busy with other work), CANDIDATES (space-separated LIB:CORETYPE, LIB a folder under
# /usr/lib/x86_64-linux-gnu holding a libblas.so.3 or "system", CORETYPE empty = unset), IDLE_WAIT (seconds
# to wait for idle CPUs before each run, default 60), OUT (raw results; default a temporary folder). Installs
# the OpenBLAS and BLIS packages when missing and run as root, keeping the system's default BLAS.
#
# Measured 2026-11-30 (2 CPUs, family 6 model 207, torch 1.13.1 Debian, THREADS=1, medians of 3 rounds, on a
# machine busy with compilers: the wall-clock columns are noise, the per-CPU-second ones are not):
#
# | BLAS (LD_LIBRARY_PATH) | OPENBLAS_CORETYPE | core used   | matmul GFLOP/s per CPU s | training samples per CPU s |
# | ---------------------- | ----------------- | ----------- | -----------------------: | -------------------------: |
# | system default (reference BLAS 3.11) | -   | -           |   4.5 |  1090 |
# | openblas-openmp        | (unset)           | Prescott    |  26.9 |  7989 |
# | openblas-openmp        | SAPPHIRERAPIDS    | Cooperlake  | 127.8 | 29932 |
# | openblas-openmp        | COOPERLAKE        | Cooperlake  | 136.8 | 30293 |
# | openblas-openmp        | SKYLAKEX          | SkylakeX    | 130.4 | 29053 |
# | openblas-openmp        | HASWELL           | Haswell     |  73.0 | 16049 |
# | openblas-openmp        | ZEN               | Zen         |  70.8 | 17757 |
# | openblas-openmp        | SANDYBRIDGE       | Sandybridge |  47.7 | 12240 |
# | openblas-pthread       | COOPERLAKE        | Cooperlake  | 128.6 | 19917 |
# | openblas-pthread       | SKYLAKEX          | SkylakeX    |  92.9 | 24809 |
# | blis-openmp            | -                 | -           |  67.9 | 17875 |
# | blis-pthread           | -                 | -           |  67.1 | 16022 |
#
# OpenBLAS 0.3.21 has no Sapphire Rapids core and does not match the name COOPERLAKE either (OPENBLAS_VERBOSE=2
# says "Core not found"), yet both land on its Cooperlake kernels, whose float32 GEMM is SkylakeX's: five
# more alternating head-to-head rounds of COOPERLAKE and SKYLAKEX training gave 26.0k and 26.5k samples per
# CPU s. bench/compare_training.sh therefore uses openblas-openmp with SKYLAKEX, the name 0.3.21 matches.
# With 2 threads on an idle machine that trains at ~53k samples/s (4.8 ms/step; compare_training.sh pt-1)
# against ~500 samples/s on the default reference BLAS.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=/usr/bin/python3
REPS="${REPS:-3}"
STEPS="${STEPS:-60}"
THREADS="${THREADS:-1}"
IDLE_WAIT="${IDLE_WAIT:-60}"
CANDIDATES="${CANDIDATES:-system: openblas-openmp: openblas-openmp:SAPPHIRERAPIDS openblas-openmp:COOPERLAKE \
openblas-openmp:SKYLAKEX openblas-openmp:HASWELL openblas-openmp:ZEN openblas-openmp:SANDYBRIDGE \
openblas-pthread:COOPERLAKE openblas-pthread:SKYLAKEX blis-openmp: blis-pthread:}"
OUT="${OUT:-$(mktemp -d)}"

# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"

log() { echo "pytorch_blas_probe.sh: $*" >&2; }

MATMUL_PY='
import os, sys, time, statistics
import torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.rand(256, 784), torch.rand(784, 512)
for _ in range(5):
    a @ b
rates, cpu_rates = [], []
for _ in range(5):
    n, t, c = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t < 0.3:
        a @ b
        n += 1
    flop = 2 * 256 * 784 * 512 * n
    rates.append(flop / (time.perf_counter() - t) / 1e9)
    cpu_rates.append(flop / (time.process_time() - c) / 1e9)
print(statistics.median(rates), statistics.median(cpu_rates))
'

run_candidate() {  # run_candidate LIB CORETYPE -> appends "gflops samples core" to $OUT/LIB:CORETYPE
  local lib="$1" core="$2" gflops sps seen
  if [ "$lib" != system ] && [ ! -e "$BENCH_LIBDIR/$lib/libblas.so.3" ]; then
    log "skipping $lib: $BENCH_LIBDIR/$lib/libblas.so.3 missing"
    return 0
  fi
  blas_env "$lib" "$core"
  local env=("${BLAS_ENV[@]}")
  wait_for_idle
  seen="$("${env[@]}" OPENBLAS_VERBOSE=2 "$PY" -c "$MATMUL_PY" "$THREADS" 2>&1 | sed -n 's/^Core: //p' | head -n 1)"
  gflops="$("${env[@]}" "$PY" -c "$MATMUL_PY" "$THREADS")"
  wait_for_idle
  sps="$("${env[@]}" "$PY" "$ROOT/bench/pytorch_mlp.py" --steps "$STEPS" --threads "$THREADS" --no-eval --json \
         2>/dev/null | tail -n 1 | "$PY" -c 'import json, sys; r = json.load(sys.stdin)
print(r["samples_per_s"], 256e3 / r["step_cpu_ms"])')"
  echo "$gflops $sps ${seen:--}" >>"$OUT/$lib:$core"
  log "$lib ${core:-(unset)}: matmul GFLOP/s, per CPU s: $gflops; training samples/s, per CPU s: $sps; OpenBLAS core ${seen:--}"
}

main() {
  local c dirs=()
  for c in $CANDIDATES; do [ "${c%%:*}" != system ] && dirs+=("${c%%:*}"); done
  install_blas_dirs "${dirs[@]}"
  log "results in $OUT; $REPS rounds of: $CANDIDATES"
  local load_before round
  load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
  for round in $(seq "$REPS"); do
    for c in $CANDIDATES; do run_candidate "${c%%:*}" "${c#*:}"; done
  done
  echo "machine: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)" \
       "(family $(awk -F': ' '/cpu family/ {print $2; exit}' /proc/cpuinfo) model $(awk -F': ' '/^model\t/ {print $2; exit}' /proc/cpuinfo));" \
       "torch $("$PY" -c 'import torch; print(torch.__version__)'), $THREADS thread(s); $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "system libblas.so.3: $(readlink -f "$BENCH_LIBDIR/libblas.so.3"); load before: $load_before, after:" \
       "$(cut -d' ' -f1-3 /proc/loadavg); runs started on a busy machine: $BUSY_STARTS"
  echo "medians of $REPS alternating rounds; training = bench/pytorch_mlp.py --steps $STEPS (steady state);" \
       "'per CPU s' divides by the process's CPU time instead of wall time (robust to other load when THREADS=1)"
  echo
  echo "| BLAS (LD_LIBRARY_PATH) | OPENBLAS_CORETYPE | OpenBLAS core used | matmul GFLOP/s | per CPU s" \
       "| training samples/s | per CPU s |"
  echo "| --- | --- | --- | ---: | ---: | ---: | ---: |"
  for c in $CANDIDATES; do
    [ -f "$OUT/$c" ] || continue
    "$PY" - "$OUT/$c" "${c%%:*}" "${c#*:}" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
m = [statistics.median(float(r[i]) for r in rows) for i in range(4)]
lib = "system default" if sys.argv[2] == "system" else sys.argv[2]
print(f"| {lib} | {sys.argv[3] or '(unset)'} | {rows[0][4]} | {m[0]:.1f} | {m[1]:.1f} | {m[2]:.0f} | {m[3]:.0f} |")
EOF
  done
}

main "$@"
