#!/usr/bin/env bash
# bench/compare_transformer.sh: weft's transformer training (examples/transformer/train.py) against its PyTorch
# twin (bench/pytorch_transformer.py: the same weights, batches and AdamW) on this machine: tokens/s, step
# time, peak memory, and the weft/PyTorch ratios of the layouts that answer the same question. Frameworks
# alternate run by run so slow drifts of a shared machine hit both alike; each layout runs RUNS times for
# STEPS steps of train.py's default configuration (4 layers, d_model 128, 4 heads, context 128, global batch
# 32) and the report gives medians. Raw JSON lines and every run's stdout and stderr go to $OUT.
#
#   bench/compare_transformer.sh                        # needs the weft module in $BUILD/python
#   STEPS=200 RUNS=5 bench/compare_transformer.sh
#   LAYOUTS="weft-dp8 pt-1" bench/compare_transformer.sh
#   LAYOUTS=every bench/compare_transformer.sh          # the model-parallel layouts and weftrun's too
#
# Layouts: weft-dp8 (train.py --dp 8), weft-fsdp8 (--dp 8 --fsdp: parameters sharded, gathered at use),
# weft-dp8-bf16 and weft-fsdp8-bf16 (the same with --dtype bf16: products in bfloat16, parameters float32),
# weft-1 (one device), pt-1 (PyTorch, one process, float32, PT_THREADS threads), pt-1-bf16 (one process,
# torch.autocast('cpu', dtype=torch.bfloat16)), pt-ddp (DDP over gloo, DEVICES ranks, one thread each).
# The ratios: weft-dp8 / pt-1 and weft-fsdp8 / pt-1 (the machine's cores either way), the bf16 pair against
# pt-1-bf16, and weft-dp8 / pt-ddp, weft-fsdp8 / pt-ddp (the same data-parallel shape). LAYOUTS=every adds,
# on the same 8 devices: weft-tp4-dp2 (Megatron), weft-sp4-dp2 (and sequence parallel), weft-tp2-fsdp4,
# weft-pp2-dp4-gpipe and -1f1b (2 stages, 4 microbatches), weft-pp4-dp2-1f1b, weft-dp2-tp2-pp2 (and -1f1b;
# 2 microbatches), weft-2x4-dp8 and weft-2x4-fsdp8 (weftrun: 2 instances x 4 devices), weft-dp8-shared
# (weft-dp8 with WEFT_SHARED_PRODUCTS=1). Named only: weft-dp8-ftz (weft-dp8 with WEFT_FLUSH_DENORMALS=1,
# XLA:CPU's denormal modes; with STEPS=2000 against weft-dp8, the test of the long-run slowdown that
# docs/transformer.md suspects of denormals on Intel cores).
#
# Knobs (environment): BUILD (weft build dir holding python/, default build), OUT (default
# $BUILD/bench/transformer), STEPS (default 60), RUNS (default 3), DEVICES (default 8; also the DDP ranks),
# LAYOUTS (default all), SEED (default 0), EVAL_BATCHES (validation batches at the end of each run, default
# 8), EVAL_EVERY (a validation loss every N steps too, for bench/plot_transformer.py's curves; default 0),
# IDLE_WAIT (seconds to wait, before each run, for idle CPUs; default 120, 0 = don't wait), RUN_TIMEOUT
# (seconds a run may take before it is killed and recorded as failed; default 600 + STEPS), PT_BLAS and
# PT_CORETYPE (PyTorch's BLAS, as bench/compare_training.sh chooses it: OpenBLAS's OpenMP build with
# OPENBLAS_CORETYPE=SKYLAKEX, or HASWELL without AVX-512, by LD_LIBRARY_PATH; its header says why),
# PT_THREADS (threads of pt-1 and pt-1-bf16, default all cores). weft runs with the same OPENBLAS_CORETYPE, for the same reason as there.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
BUILD="${BUILD:-$ROOT/build}"
OUT="${OUT:-$BUILD/bench/transformer}"
STEPS="${STEPS:-60}"
RUNS="${RUNS:-3}"
DEVICES="${DEVICES:-8}"
SEED="${SEED:-0}"
EVAL_BATCHES="${EVAL_BATCHES:-8}"
EVAL_EVERY="${EVAL_EVERY:-0}"
IDLE_WAIT="${IDLE_WAIT:-120}"
RUN_TIMEOUT="${RUN_TIMEOUT:-$((600 + STEPS))}"
PT_BLAS="${PT_BLAS:-openblas-openmp}"
PT_CORETYPE="${PT_CORETYPE-$(default_coretype)}"  # bench/common.sh
PT_THREADS="${PT_THREADS:-$(nproc)}"
PY=/usr/bin/python3
WEFT_TRAIN="$ROOT/examples/transformer/train.py"
PT_TRAIN="$ROOT/bench/pytorch_transformer.py"
WEFT_ENV=(env PYTHONPATH="$BUILD/python")
[ -n "$PT_CORETYPE" ] && WEFT_ENV+=("OPENBLAS_CORETYPE=$PT_CORETYPE")
# The floors' layouts (the default) and, with LAYOUTS="$EVERY" or LAYOUTS=every, the model-parallel ones too.
FLOOR_LAYOUTS="weft-dp8 pt-1 weft-fsdp8 pt-ddp weft-dp8-bf16 pt-1-bf16 weft-fsdp8-bf16 weft-1"
EVERY_LAYOUTS="$FLOOR_LAYOUTS weft-tp4-dp2 weft-sp4-dp2 weft-tp2-fsdp4 weft-pp2-dp4-gpipe weft-pp2-dp4-1f1b
  weft-pp4-dp2-1f1b weft-dp2-tp2-pp2 weft-dp2-tp2-pp2-1f1b weft-2x4-dp8 weft-2x4-fsdp8 weft-dp8-shared"
ALL_LAYOUTS="$(echo $EVERY_LAYOUTS)"
LAYOUTS="${LAYOUTS:-$FLOOR_LAYOUTS}"
[ "$LAYOUTS" = every ] && LAYOUTS="$ALL_LAYOUTS"

log() { echo "compare_transformer.sh: $*" >&2; }

prepare() {
  "${WEFT_ENV[@]}" "$PY" -c 'import weft' 2>/dev/null ||
    { log "$PY cannot import weft from $BUILD/python: build it (cmake --build build --target _weft)"; exit 1; }
  "$PY" -c 'import torch, numpy' 2>/dev/null ||
    { log "$PY cannot import torch and numpy (Debian packages python3-torch, python3-numpy)"; exit 1; }
  [ "$PT_BLAS" != system ] && install_blas_dirs "$PT_BLAS"
  if [ "$PT_BLAS" != system ] && [ ! -e "$BENCH_LIBDIR/$PT_BLAS/libblas.so.3" ]; then
    log "$BENCH_LIBDIR/$PT_BLAS/libblas.so.3 missing: PyTorch runs on the system BLAS"
    PT_BLAS=system
  fi
  blas_env "$PT_BLAS" "$PT_CORETYPE"
}

layout_cmd() {  # layout_cmd LAYOUT -> CMD
  local common=(--steps "$STEPS" --seed "$SEED" --eval-batches "$EVAL_BATCHES" --eval-every "$EVAL_EVERY" --json)
  case "$1" in
    weft-1) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" "${common[@]}") ;;
    weft-dp8) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp "$DEVICES" "${common[@]}") ;;
    weft-dp8-shared)
      CMD=("${WEFT_ENV[@]}" WEFT_SHARED_PRODUCTS=1 "$PY" "$WEFT_TRAIN" --dp "$DEVICES" "${common[@]}") ;;
    weft-dp8-ftz)
      CMD=("${WEFT_ENV[@]}" WEFT_FLUSH_DENORMALS=1 "$PY" "$WEFT_TRAIN" --dp "$DEVICES" "${common[@]}") ;;
    weft-fsdp8) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp "$DEVICES" --fsdp "${common[@]}") ;;
    weft-dp8-bf16) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp "$DEVICES" --dtype bf16 "${common[@]}") ;;
    weft-fsdp8-bf16) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp "$DEVICES" --fsdp --dtype bf16 "${common[@]}") ;;
    weft-tp4-dp2) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp 2 --tp 4 "${common[@]}") ;;
    weft-sp4-dp2) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp 2 --tp 4 --sp "${common[@]}") ;;
    weft-tp2-fsdp4) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp 4 --tp 2 --fsdp "${common[@]}") ;;
    weft-pp2-dp4-gpipe) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp 4 --pp 2 --microbatches 4 "${common[@]}") ;;
    weft-pp2-dp4-1f1b) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp 4 --pp 2 --microbatches 4 --schedule 1f1b "${common[@]}") ;;
    weft-pp4-dp2-1f1b) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp 2 --pp 4 --microbatches 4 --schedule 1f1b "${common[@]}") ;;
    weft-dp2-tp2-pp2) CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp 2 --tp 2 --pp 2 --microbatches 2 "${common[@]}") ;;
    weft-dp2-tp2-pp2-1f1b)
      CMD=("${WEFT_ENV[@]}" "$PY" "$WEFT_TRAIN" --dp 2 --tp 2 --pp 2 --microbatches 2 --schedule 1f1b "${common[@]}") ;;
    weft-2x4-dp8 | weft-2x4-fsdp8)
      local flags=(--dp "$DEVICES"); [ "$1" = weft-2x4-fsdp8 ] && flags+=(--fsdp)
      CMD=("${WEFT_ENV[@]}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$BUILD/bin/weftrun"
           --num-instances 2 --num-replicas "$DEVICES" "$PY" "$WEFT_TRAIN" "${flags[@]}" "${common[@]}") ;;
    pt-1) CMD=("${BLAS_ENV[@]}" "$PY" "$PT_TRAIN" --threads "$PT_THREADS" "${common[@]}") ;;
    pt-1-bf16) CMD=("${BLAS_ENV[@]}" "$PY" "$PT_TRAIN" --threads "$PT_THREADS" --dtype bf16 "${common[@]}") ;;
    pt-ddp) CMD=("${BLAS_ENV[@]}" "$PY" "$PT_TRAIN" --ddp "$DEVICES" --threads 1 "${common[@]}") ;;
    *) log "unknown layout $1 (known: $ALL_LAYOUTS weft-dp8-ftz)"; exit 2 ;;
  esac
}

run_layout() {  # run_layout LAYOUT RUN: one JSON line appended to $OUT/runs.jsonl
  local layout="$1" run="$2" base="$OUT/$1-r$2"
  layout_cmd "$layout"
  wait_for_idle
  log "run $run/$RUNS $layout: ${CMD[*]}"
  # A run that outlives RUN_TIMEOUT is recorded as failed (exit 124) rather than stalling the whole report.
  run_measured "$base.out" "$base.err" timeout --kill-after=30 "$RUN_TIMEOUT" "${CMD[@]}"
  [ "$RC" = 0 ] || log "$layout run $run failed (exit $RC); stderr in $base.err"
  [ "$OTHER_PCT" -gt 10 ] && log "$layout run $run: other processes used $OTHER_PCT% of the CPUs meanwhile"
  "$PY" - "$base.out" "$layout" "$run" "$RC" "$WALL_S" "$PEAK_KIB" "$SUM_KIB" "$OTHER_PCT" >>"$OUT/runs.jsonl" <<'EOF'
import json, re, sys
out, layout, run, rc, wall, peak, total, other = sys.argv[1:]
result = None
# The result is the last JSON object printed; under weftrun on instance 0's stderr, as "[instance 0] {...}".
lines = list(open(out, errors="replace")) + list(open(out[:-len(".out")] + ".err", errors="replace"))
for line in lines:
    line = re.sub(r"^\[instance 0\] ", "", line)
    if line.strip().startswith("{"):
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
  "$PY" - "$OUT/runs.jsonl" "$LAYOUTS" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
layouts = sys.argv[2].split()
def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
def fmt(v, spec):
    return "-" if v is None else format(v, spec)
stats = {}
for layout in layouts:
    mine = [r for r in runs if r["layout"] == layout]
    ok = [r for r in mine if r["rc"] == 0 and r["result"]]
    res = [r["result"] for r in ok]
    shape = ""
    if res:
        x = res[0]
        shape = (f"{x['ddp']} ranks x {x['threads']} thread(s)" if x.get("ddp") else
                 f"1 process x {x['threads']} thread(s)" if x["framework"] == "pytorch" else
                 f"{x.get('instances', 1)} process(es), dp {x['dp']} tp {x['tp']}{' sp' if x['sp'] else ''} "
                 f"pp {x['pp']}{' fsdp' if x['fsdp'] else ''}"
                 f"{' ' + x['schedule'] + ' x' + str(x['microbatches']) if x['pp'] > 1 else ''}") + f", {x['dtype']}"
    stats[layout] = {"runs": len(mine), "ok": len(ok), "shape": shape,
                     "tps": med([x["tokens_per_s"] for x in res]), "ms": med([x["step_ms"] for x in res]),
                     "peak": med([r["peak_rss_kib"] / 1024 for r in ok]),
                     "sum": med([r["sum_rss_kib"] / 1024 for r in ok]),
                     "wall": med([r["wall_s"] for r in ok]),
                     "loss": med([x["losses"][-1] for x in res if x["losses"]]),
                     "valid": med([x["valid_loss"] for x in res]),
                     "other": max([r["other_cpu_pct"] for r in ok], default=None)}
print("| layout | shape | runs ok | tokens/s | step ms | peak RSS MiB (largest process) | RSS MiB (all processes) "
      "| wall s | last loss | valid loss | other load % (max) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for layout in layouts:
    s = stats[layout]
    print(f"| {layout} | {s['shape'] or 'failed'} | {s['ok']}/{s['runs']} | {fmt(s['tps'], '.0f')} "
          f"| {fmt(s['ms'], '.1f')} | {fmt(s['peak'], '.0f')} | {fmt(s['sum'], '.0f')} | {fmt(s['wall'], '.1f')} "
          f"| {fmt(s['loss'], '.4f')} | {fmt(s['valid'], '.4f')} "
          f"| {'-' if s['other'] is None or s['other'] < 0 else s['other']} |")
print()
print("| ratio (tokens/s) | value | peak RSS ratio |")
print("| --- | ---: | ---: |")
for a, b in [("weft-dp8", "pt-1"), ("weft-fsdp8", "pt-1"), ("weft-dp8-bf16", "pt-1-bf16"),
             ("weft-fsdp8-bf16", "pt-1-bf16"), ("weft-dp8", "pt-ddp"), ("weft-fsdp8", "pt-ddp"),
             ("weft-2x4-dp8", "pt-ddp"), ("weft-1", "pt-1")]:
    sa, sb = stats.get(a), stats.get(b)
    if not sa or not sb:
        continue
    tps = f"{sa['tps'] / sb['tps']:.2f}x" if sa["tps"] and sb["tps"] else "-"
    # Against DDP the memory to compare is all the ranks' together; against one process, the process's.
    key = "sum" if b == "pt-ddp" else "peak"
    rss = f"{sa[key] / sb[key]:.2f}x" if sa[key] and sb[key] else "-"
    print(f"| {a} / {b} | {tps} | {rss} |")
EOF
}

main() {
  prepare
  mkdir -p "$OUT"
  : >"$OUT/runs.jsonl"
  local before run layout
  before="$(cut -d' ' -f1-3 /proc/loadavg)"
  for run in $(seq "$RUNS"); do
    for layout in $LAYOUTS; do run_layout "$layout" "$run"; done
  done
  {
    echo "machine: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "PyTorch: torch $("$PY" -c 'import torch; print(torch.__version__)'), BLAS" \
         "$([ "$PT_BLAS" = system ] && readlink -f "$BENCH_LIBDIR/libblas.so.3" || echo "$BENCH_LIBDIR/$PT_BLAS")," \
         "OPENBLAS_CORETYPE=${PT_CORETYPE:-(unset)} (weft too); pt-1 with $PT_THREADS thread(s), pt-ddp $DEVICES ranks x 1 thread, gloo"
    echo "runs: $RUNS of each layout, alternating; $STEPS steps each (train.py's default configuration, global batch 32" \
         "x context 128), seed $SEED; tokens/s and step ms are each run's median step after 3 warmup steps, medians" \
         "over runs; peak RSS: GNU time's %M (the largest process) and the sum of every process's VmHWM (polled);" \
         "load average before: $before, after: $(cut -d' ' -f1-3 /proc/loadavg); runs started on a busy machine:" \
         "$BUSY_STARTS (IDLE_WAIT=$IDLE_WAIT)"
    echo
    summarize
  } | tee "$OUT/summary.md"
}

main "$@"
