#!/usr/bin/env bash
# bench/compare_training.sh: weft's Fashion-MNIST MLP training (build/bin/train_fashion_mnist) against the same
# training in PyTorch (bench/pytorch_mlp.py) on this machine: samples/s, step time, peak memory. Frameworks
# alternate run by run so slow drifts of a shared machine hit both alike; each layout runs RUNS times for a
# fixed number of steps and the report gives medians and the weft/PyTorch ratios. Raw JSON lines, stderr
# of every run, the metrics CSVs and a training plot go to $OUT.
#
#   bench/compare_training.sh                           # after building weft (cmake --build build)
#   STEPS=600 RUNS=5 bench/compare_training.sh
#   LAYOUTS="pt-1 pt-ddp" bench/compare_training.sh     # a subset (names in the table below)
#
# Layouts: weft-1 (--devices 1), weft-dp8 (--devices 8; the sharded update), weft-dp8r (--devices 8
# --replicated-update: DDP's all-reduce and update on every replica), weft-dp4xmp2 (--devices 8 --model-parallel 2),
# weft-zero8 (--devices 8 --zero), weft-2x4 (weftrun --num-instances 2 --num-replicas 8; only when
# INSTANCES > 1), pt-1 (PyTorch, one process, every core), pt-ddp (PyTorch DDP over gloo, DEVICES ranks,
# one thread each), pt-ddp-cores (DDP with one rank per core: DDP's own recommendation, and on a machine
# with fewer cores than DEVICES much faster than pt-ddp), and mixed precision: weft-dp8-bf16 (--dtype bf16:
# float32 parameters, the passes in bfloat16) against pt-1-bf16 (one process, torch.autocast('cpu',
# dtype=torch.bfloat16), PyTorch's recommended CPU mixed precision). Named only (not in the default list):
# weft-dp8-autodiff (--backward autodiff) and weft-dp8-shared (the same with WEFT_SHARED_PRODUCTS=1).
#
# Knobs (environment): BUILD (weft build dir, default build), OUT (default $BUILD/bench/training), STEPS
# (default 300), EPOCHS (default: enough for STEPS), RUNS (default 3), DEVICES (default 8; also the DDP
# ranks), INSTANCES (weftrun instances for weft-2x4, default 2, 1 = skip), WEFTRUN_ARGS (extra program
# arguments under weftrun, default none: the instances learn their devices from WEFT_DEVICE_COUNT), LAYOUTS
# (default all), SEED (default 0), DATA (default /usr/share/datasets/fashion-mnist), IDLE_WAIT (seconds to
# wait, before each run, for idle CPUs; default 120, 0 = don't wait), SKIP_BUILD=1 (don't build weft),
# PT_BLAS and PT_CORETYPE (PyTorch's BLAS, below), PT_THREADS (threads of pt-1, default all cores).
#
# weft runs with the same OPENBLAS_CORETYPE as PyTorch: its matmul takes OpenBLAS (Debian's pthread build) for
# large products only when OpenBLAS runs kernels made for the CPU, which 0.3.21 does here only when told
# (src/array/blas.hpp); each run's JSON names the backend it used ("matmul").
#
# PyTorch's BLAS: Debian's torch 1.13 does its float32 matmuls in whatever libblas.so.3 the loader finds; the
# default alternative here is the reference BLAS (~3 GFLOP/s), and Debian's OpenBLAS 0.3.21 does not know
# newer CPUs: on an Intel family 6 model 207 it falls back to its Prescott kernels (~10x slower than its
# AVX-512 ones), on the AMD EPYC (Zen 5) VM to its Haswell (AVX2) ones (~1.5x slower at these shapes).
# bench/pytorch_blas_probe.sh measured the candidates (its header has the numbers); the fastest is the
# default here: OpenBLAS's OpenMP build with OPENBLAS_CORETYPE=SKYLAKEX (COOPERLAKE runs the same float32
# kernels and measured the same; 0.3.21 has no SAPPHIRERAPIDS) on a CPU with AVX-512, HASWELL on one without
# (SKYLAKEX's kernels die there with SIGILL; bench/common.sh's default_coretype), chosen per run with
# LD_LIBRARY_PATH (the system default stays as it is). Installed when missing (as root).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
BUILD="${BUILD:-$ROOT/build}"
OUT="${OUT:-$BUILD/bench/training}"
STEPS="${STEPS:-300}"
STEPS_PER_EPOCH=234  # 60000 // 256: the last partial batch is dropped
EPOCHS="${EPOCHS:-$(((STEPS + STEPS_PER_EPOCH - 1) / STEPS_PER_EPOCH))}"
RUNS="${RUNS:-3}"
DEVICES="${DEVICES:-8}"
INSTANCES="${INSTANCES:-2}"
WEFTRUN_ARGS="${WEFTRUN_ARGS:-}"
SEED="${SEED:-0}"
DATA="${DATA:-/usr/share/datasets/fashion-mnist}"
IDLE_WAIT="${IDLE_WAIT:-120}"
PT_BLAS="${PT_BLAS:-openblas-openmp}"
PT_CORETYPE="${PT_CORETYPE-$(default_coretype)}"  # bench/common.sh
PT_THREADS="${PT_THREADS:-$(nproc)}"
PY=/usr/bin/python3
WEFT_TRAIN="$BUILD/bin/train_fashion_mnist"
WEFT_ENV=(env)
[ -n "$PT_CORETYPE" ] && WEFT_ENV=(env "OPENBLAS_CORETYPE=$PT_CORETYPE")
WEFTRUN="$BUILD/bin/weftrun"
ALL_LAYOUTS="weft-1 pt-1 weft-dp8 pt-ddp weft-dp8r weft-dp4xmp2 pt-ddp-cores weft-zero8 weft-dp8-bf16 pt-1-bf16"
[ "$INSTANCES" -gt 1 ] && ALL_LAYOUTS="$ALL_LAYOUTS weft-2x4"
LAYOUTS="${LAYOUTS:-$ALL_LAYOUTS}"
# pt-ddp-cores: one rank per core, rounded down to a power of two so that the ranks divide the batch of 256.
CORE_RANKS=1
while [ $((CORE_RANKS * 2)) -le "$(nproc)" ] && [ "$CORE_RANKS" -lt 256 ]; do CORE_RANKS=$((CORE_RANKS * 2)); done

# Open MPI refuses to run as root without these (containers usually run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

log() { echo "compare_training.sh: $*" >&2; }

WEFT_OK=1
prepare_weft() {
  if [ "${SKIP_BUILD:-0}" != 1 ] && [ -f "$BUILD/CMakeCache.txt" ] && [ -d "$ROOT/examples/train_fashion_mnist" ]; then
    log "building train_fashion_mnist in $BUILD"
    cmake --build "$BUILD" --target train_fashion_mnist >&2 || log "build failed"
    case " $LAYOUTS " in *" weft-2x4 "*) cmake --build "$BUILD" --target weftrun >&2 || log "weftrun build failed" ;; esac
  fi
  if [ ! -x "$WEFT_TRAIN" ]; then
    WEFT_OK=0
    log "weft's trainer $WEFT_TRAIN does not exist (examples/train_fashion_mnist not built yet, or BUILD" \
        "points elsewhere): measuring the PyTorch side only; the weft rows say 'not built'"
  fi
}

prepare_pytorch() {
  [ -x "$PY" ] && "$PY" -c 'import torch, numpy' 2>/dev/null || {
    log "$PY cannot import torch and numpy (Debian packages python3-torch, python3-numpy)"; exit 1; }
  [ "$PT_BLAS" != system ] && install_blas_dirs "$PT_BLAS"
  if [ "$PT_BLAS" != system ] && [ ! -e "$BENCH_LIBDIR/$PT_BLAS/libblas.so.3" ]; then
    log "$BENCH_LIBDIR/$PT_BLAS/libblas.so.3 missing: PyTorch runs on the system BLAS ($(readlink -f "$BENCH_LIBDIR/libblas.so.3"))"
    PT_BLAS=system
  fi
  if [ ! -x /usr/bin/time ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    log "installing GNU time (peak RSS)"
    (apt-get install -y -qq time >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq time; }) >&2 || true
  fi
}

# The command line of one layout into CMD (empty when it cannot run here).
layout_cmd() {  # layout_cmd LAYOUT CSV
  local layout="$1" csv="$2"
  local common=(--epochs "$EPOCHS" --steps "$STEPS" --seed "$SEED" --data "$DATA" --metrics "$csv" --json)
  CMD=()
  case "$layout" in
    weft-*) [ "$WEFT_OK" = 1 ] || return 0 ;;
  esac
  case "$layout" in
    weft-1) CMD=("${WEFT_ENV[@]}" "$WEFT_TRAIN" --devices 1 "${common[@]}") ;;
    weft-dp8) CMD=("${WEFT_ENV[@]}" "$WEFT_TRAIN" --devices "$DEVICES" "${common[@]}") ;;
    weft-dp8r) CMD=("${WEFT_ENV[@]}" "$WEFT_TRAIN" --devices "$DEVICES" --replicated-update "${common[@]}") ;;
    weft-dp8-bf16) CMD=("${WEFT_ENV[@]}" "$WEFT_TRAIN" --devices "$DEVICES" --dtype bf16 "${common[@]}") ;;
    weft-dp8-autodiff) CMD=("${WEFT_ENV[@]}" "$WEFT_TRAIN" --devices "$DEVICES" --backward autodiff "${common[@]}") ;;
    weft-dp8-shared)
      CMD=("${WEFT_ENV[@]}" WEFT_SHARED_PRODUCTS=1 "$WEFT_TRAIN" --devices "$DEVICES" --backward autodiff "${common[@]}") ;;
    weft-dp4xmp2) CMD=("${WEFT_ENV[@]}" "$WEFT_TRAIN" --devices "$DEVICES" --model-parallel 2 "${common[@]}") ;;
    weft-zero8) CMD=("${WEFT_ENV[@]}" "$WEFT_TRAIN" --devices "$DEVICES" --zero "${common[@]}") ;;
    weft-2x4)
      [ -x "$WEFTRUN" ] || { log "$WEFTRUN missing: skipping weft-2x4"; return 0; }
      # shellcheck disable=SC2206
      CMD=("${WEFT_ENV[@]}" "$WEFTRUN" --num-instances "$INSTANCES" --num-replicas "$DEVICES"
           --only-output-from-instance 0 "$WEFT_TRAIN" $WEFTRUN_ARGS "${common[@]}") ;;
    pt-1)
      blas_env "$PT_BLAS" "$PT_CORETYPE"
      CMD=("${BLAS_ENV[@]}" "$PY" "$ROOT/bench/pytorch_mlp.py" --ranks 1 --threads "$PT_THREADS" "${common[@]}") ;;
    pt-1-bf16)
      blas_env "$PT_BLAS" "$PT_CORETYPE"
      CMD=("${BLAS_ENV[@]}" "$PY" "$ROOT/bench/pytorch_mlp.py" --ranks 1 --threads "$PT_THREADS" --autocast bf16
           "${common[@]}") ;;
    pt-ddp)
      blas_env "$PT_BLAS" "$PT_CORETYPE"
      CMD=("${BLAS_ENV[@]}" "$PY" "$ROOT/bench/pytorch_mlp.py" --ddp --ranks "$DEVICES" "${common[@]}") ;;
    pt-ddp-cores)
      blas_env "$PT_BLAS" "$PT_CORETYPE"
      CMD=("${BLAS_ENV[@]}" "$PY" "$ROOT/bench/pytorch_mlp.py" --ddp --ranks "$CORE_RANKS" "${common[@]}") ;;
    *) log "unknown layout $layout (known: $ALL_LAYOUTS weft-dp8-autodiff weft-dp8-shared)"; exit 2 ;;
  esac
}

# One run of one layout: its JSON result, wall time, RC and RSS appended as one line to $OUT/runs.jsonl.
run_layout() {  # run_layout LAYOUT RUN
  local layout="$1" run="$2" base="$OUT/$1-r$2"
  layout_cmd "$layout" "$OUT/csv/$layout-r$run.csv"
  [ ${#CMD[@]} -gt 0 ] || return 0
  wait_for_idle
  log "run $run/$RUNS $layout: ${CMD[*]}"
  run_measured "$base.out" "$base.err" "${CMD[@]}"
  [ "$RC" = 0 ] || log "$layout run $run failed (exit $RC); stderr in $base.err"
  # weftrun prefixes every line with "[instance 0] "; the result is the last JSON object printed.
  [ "$OTHER_PCT" -gt 10 ] && log "$layout run $run: other processes used $OTHER_PCT% of the CPUs meanwhile"
  "$PY" - "$base.out" "$layout" "$run" "$RC" "$WALL_S" "$PEAK_KIB" "$SUM_KIB" "$OTHER_PCT" >>"$OUT/runs.jsonl" <<'EOF'
import json, re, sys
out, layout, run, rc, wall, peak, total, other = sys.argv[1:]
result = None
for line in open(out, errors="replace"):
    line = re.sub(r"^\[instance \d+\] ", "", line.strip())
    if line.startswith("{"):
        try:
            result = json.loads(line)
        except ValueError:
            pass
print(json.dumps({"layout": layout, "run": int(run), "rc": int(rc), "wall_s": float(wall),
                  "peak_rss_kib": int(peak), "sum_rss_kib": int(total), "other_cpu_pct": int(other),
                  "result": result}))
EOF
}

summarize() {
  "$PY" - "$OUT/runs.jsonl" "$LAYOUTS" "$WEFT_OK" "$DEVICES" <<'EOF'
import json, statistics, sys
path, layouts, weft_ok, devices = sys.argv[1], sys.argv[2].split(), sys.argv[3] == "1", sys.argv[4]
runs = [json.loads(line) for line in open(path)]
def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
stats = {}
for layout in layouts:
    mine = [r for r in runs if r["layout"] == layout]
    ok = [r for r in mine if r["rc"] == 0 and r["result"]]
    res = [r["result"] for r in ok]
    stats[layout] = {
        "runs": len(mine), "ok": len(ok),
        "sps": med([x.get("samples_per_s") for x in res]), "ms": med([x.get("step_ms") for x in res]),
        "peak": med([r["peak_rss_kib"] for r in ok]), "sum": med([r["sum_rss_kib"] for r in ok]),
        "wall": med([r["wall_s"] for r in ok]), "loss": med([x.get("final_loss") for x in res]),
        "acc": med([x.get("test_accuracy") for x in res]),
        "other": max([r.get("other_cpu_pct", -1) for r in ok], default=None),
        "shape": (f"{res[0].get('instances', '?')} / {res[0].get('devices', '?')}"
                  f" (dp {res[0].get('data_parallel', '?')}, mp {res[0].get('model_parallel', '?')}"
                  f"{', zero' if res[0].get('zero') else ''})") if res else "",
    }
def fmt(v, spec):
    return "-" if v is None else format(v, spec)
def ratio(layout, peer):
    a, b = stats[layout]["sps"], stats.get(peer, {}).get("sps")
    return f"{a / b:.2f}x" if a and b else "-"
print("| layout | processes / devices | runs ok | samples/s | step ms | / pt-1 | / pt-ddp "
      "| peak RSS MiB (largest process) | RSS MiB (all processes) | wall s | final loss | test acc | other load % (max) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for layout in layouts:
    s = stats[layout]
    if s["runs"] == 0:
        why = "not built" if layout.startswith("weft") and not weft_ok else "not run"
        print(f"| {layout} | {why} | 0/0 | - | - | - | - | - | - | - | - | - | - |")
        continue
    print(f"| {layout} | {s['shape']} | {s['ok']}/{s['runs']} | {fmt(s['sps'], '.0f')} | {fmt(s['ms'], '.2f')} "
          f"| {ratio(layout, 'pt-1')} | {ratio(layout, 'pt-ddp')} "
          f"| {fmt(s['peak'] and s['peak'] / 1024, '.0f')} | {fmt(s['sum'] and s['sum'] / 1024, '.0f')} "
          f"| {fmt(s['wall'], '.1f')} | {fmt(s['loss'], '.4f')} | {fmt(s['acc'], '.4f')} "
          f"| {'-' if s['other'] is None or s['other'] < 0 else s['other']} |")
EOF
}

machine() {
  echo "machine: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)," \
       "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM; $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "PyTorch: torch $("$PY" -c 'import torch; print(torch.__version__)'), BLAS" \
       "$([ "$PT_BLAS" = system ] && readlink -f "$BENCH_LIBDIR/libblas.so.3" || echo "$BENCH_LIBDIR/$PT_BLAS")," \
       "OPENBLAS_CORETYPE=${PT_CORETYPE:-(unset)}; pt-1 with $PT_THREADS thread(s), pt-ddp $DEVICES ranks x 1 thread," \
       "pt-ddp-cores $CORE_RANKS ranks x 1 thread, gloo"
  echo "weft: ${WEFT_ENV[*]:1} matmul on $("${WEFT_ENV[@]}" "$WEFT_TRAIN" --devices 1 --steps 1 --train-limit 256 \
       --no-eval --data "$DATA" --json 2>/dev/null | tail -1 | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["matmul"])')"
  echo "load average before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg);" \
       "runs started on a busy machine: $BUSY_STARTS"
}

main() {
  prepare_weft
  prepare_pytorch
  mkdir -p "$OUT/csv"
  : >"$OUT/runs.jsonl"
  LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
  local run layout
  for run in $(seq "$RUNS"); do
    for layout in $LAYOUTS; do run_layout "$layout" "$run"; done
  done
  {
    machine
    echo "runs: $RUNS of each, alternating; $STEPS steps (global batch 256, epochs $EPOCHS), seed $SEED;" \
         "samples/s and step ms are each run's steady state (its JSON), medians over the runs;" \
         "ratios are weft (or the row's) samples/s over the peer's"
    echo "peak RSS: the largest process (GNU time %M, or polled VmHWM), and the sum of every process's peak" \
         "(polled VmHWM, 0.5 s) for multi-process runs; other load: the largest share of all CPUs that other" \
         "processes used during one of the layout's runs (above ~10% its timings are suspect)"
    echo
    summarize
  } | tee "$OUT/summary.md"
  if [ -f "$ROOT/scripts/plot_training.py" ]; then
    local csvs=() f
    for layout in $LAYOUTS; do
      f="$OUT/csv/$layout-r1.csv"
      [ -s "$f" ] && csvs+=("$layout=$f")
    done
    [ ${#csvs[@]} -gt 0 ] && "$PY" "$ROOT/scripts/plot_training.py" --out "$OUT/training.png" "${csvs[@]}" >&2 &&
      log "plot of the first run of each layout: $OUT/training.png"
  fi
  return 0
}

main "$@"
