#!/usr/bin/env bash
# bench/compare_python_training.sh: the Fashion-MNIST training step written in Python with weft.numpy and
# traced by weft.pmap (examples/train_fashion_mnist.py) against the C++ trainer (build/bin/train_fashion_mnist)
# on this machine: samples/s of each, and the Python/C++ ratios (issue 22's floor: >= 0.9x). Both train the
# same MLP (784-512-512-10) on the same data, global batch 256 over 8 data-parallel replicas, in the two
# layouts both have:
#
#   cc-dp8   C++, the default sharded update          py-sharded     Python --update sharded (the same layout)
#   cc-dp8r  C++ --replicated-update (DDP's)          py-replicated  Python --update replicated (lax.pmean)
#   cc-dp8-ad  C++ sharded, --backward autodiff       py-sharded-ad  Python --update sharded-autodiff (issue 23)
#
# The layouts alternate run by run (RUNS rounds of all four) so that a shared machine's drifts hit all
# alike; before each run the script waits for idle CPUs (bench/common.sh). Each run is a fresh process of
# STEPS steps; its samples/s is its own steady state (the median step after the first 5, the same rule in
# both programs), the table gives medians over runs. Raw JSON lines and each run's output go to $OUT.
#
#   bench/compare_python_training.sh                    # needs build/bin/train_fashion_mnist and build/python
#   STEPS=600 RUNS=5 IDLE_WAIT=60 bench/compare_python_training.sh
#   LAYOUTS="cc-dp8 py-sharded" bench/compare_python_training.sh
#
# Knobs (environment): BUILD (default build), OUT (default $BUILD/bench/python_training), STEPS (default
# 300), RUNS (default 3), DEVICES (default 8), SEED (default 0), DATA (default
# /usr/share/datasets/fashion-mnist), IDLE_WAIT (seconds to wait for idle CPUs before each run, default 120;
# 0 = don't wait), LAYOUTS (default all four), CORETYPE (OPENBLAS_CORETYPE for both, default SKYLAKEX, or
# HASWELL without AVX-512, as in bench/compare_training.sh; only float64 products use OpenBLAS).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
BUILD="${BUILD:-$ROOT/build}"
OUT="${OUT:-$BUILD/bench/python_training}"
STEPS="${STEPS:-300}"
RUNS="${RUNS:-3}"
DEVICES="${DEVICES:-8}"
SEED="${SEED:-0}"
DATA="${DATA:-/usr/share/datasets/fashion-mnist}"
IDLE_WAIT="${IDLE_WAIT:-120}"
CORETYPE="${CORETYPE-$(default_coretype)}"  # bench/common.sh
LAYOUTS="${LAYOUTS:-cc-dp8 py-sharded cc-dp8r py-replicated}"
PY=/usr/bin/python3
CC_TRAIN="$BUILD/bin/train_fashion_mnist"
PY_TRAIN="$ROOT/examples/train_fashion_mnist.py"
ENV=(env)
[ -n "$CORETYPE" ] && ENV=(env "OPENBLAS_CORETYPE=$CORETYPE")

log() { echo "compare_python_training.sh: $*" >&2; }

[ -x "$CC_TRAIN" ] || { log "$CC_TRAIN missing: build it (cmake --build build --target train_fashion_mnist)"; exit 1; }
PYTHONPATH="$BUILD/python" "$PY" -c 'import weft' 2>/dev/null ||
  { log "$PY cannot import weft from $BUILD/python: build it (cmake --build build --target _weft)"; exit 1; }

layout_cmd() {  # layout_cmd LAYOUT -> CMD
  local epochs=$(((STEPS + 233) / 234))
  local common=(--devices "$DEVICES" --epochs "$epochs" --steps "$STEPS" --seed "$SEED" --data "$DATA" --no-eval --json)
  case "$1" in
    cc-dp8) CMD=("${ENV[@]}" "$CC_TRAIN" "${common[@]}") ;;
    cc-dp8r) CMD=("${ENV[@]}" "$CC_TRAIN" --replicated-update "${common[@]}") ;;
    py-sharded) CMD=("${ENV[@]}" PYTHONPATH="$BUILD/python" "$PY" "$PY_TRAIN" --update sharded "${common[@]}") ;;
    py-replicated) CMD=("${ENV[@]}" PYTHONPATH="$BUILD/python" "$PY" "$PY_TRAIN" --update replicated "${common[@]}") ;;
    cc-dp8-ad) CMD=("${ENV[@]}" "$CC_TRAIN" --backward autodiff "${common[@]}") ;;
    py-sharded-ad) CMD=("${ENV[@]}" PYTHONPATH="$BUILD/python" "$PY" "$PY_TRAIN" --update sharded-autodiff "${common[@]}") ;;
    *) log "unknown layout $1 (known: cc-dp8 cc-dp8r py-sharded py-replicated cc-dp8-ad py-sharded-ad)"; exit 2 ;;
  esac
}

run_layout() {  # run_layout LAYOUT RUN: one JSON line appended to $OUT/runs.jsonl
  local layout="$1" run="$2" base="$OUT/$1-r$2"
  layout_cmd "$layout"
  wait_for_idle
  log "run $run/$RUNS $layout: ${CMD[*]}"
  run_measured "$base.out" "$base.err" "${CMD[@]}"
  [ "$RC" = 0 ] || log "$layout run $run failed (exit $RC); stderr in $base.err"
  [ "$OTHER_PCT" -gt 10 ] && log "$layout run $run: other processes used $OTHER_PCT% of the CPUs meanwhile"
  "$PY" - "$base.out" "$layout" "$run" "$RC" "$WALL_S" "$PEAK_KIB" "$OTHER_PCT" >>"$OUT/runs.jsonl" <<'EOF'
import json, sys
out, layout, run, rc, wall, peak, other = sys.argv[1:]
result = None
for line in open(out, errors="replace"):
    if line.strip().startswith("{"):
        try:
            result = json.loads(line)
        except ValueError:
            pass
print(json.dumps({"layout": layout, "run": int(run), "rc": int(rc), "wall_s": float(wall), "peak_rss_kib": int(peak),
                  "other_cpu_pct": int(other), "result": result}))
EOF
}

summarize() {
  "$PY" - "$OUT/runs.jsonl" "$LAYOUTS" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
layouts = sys.argv[2].split()
peer = {"py-sharded": "cc-dp8", "py-replicated": "cc-dp8r", "py-sharded-ad": "cc-dp8-ad"}
stats = {}
for layout in layouts:
    ok = [r for r in runs if r["layout"] == layout and r["rc"] == 0 and r["result"]]
    sps = [r["result"]["samples_per_s"] for r in ok]
    stats[layout] = {"ok": len(ok), "runs": sum(r["layout"] == layout for r in runs), "sps": sps,
                     "median": statistics.median(sps) if sps else None,
                     "ms": statistics.median([r["result"]["step_ms"] for r in ok]) if ok else None,
                     "loss": statistics.median([r["result"]["final_loss"] for r in ok]) if ok else None,
                     "peak": statistics.median([r["peak_rss_kib"] for r in ok]) / 1024 if ok else None,
                     "other": max([r["other_cpu_pct"] for r in ok], default=-1)}
print("| layout | runs ok | samples/s (median) | per run | step ms | Python / C++ | final loss | peak RSS MiB | other load % (max) |")
print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
for layout in layouts:
    s = stats[layout]
    if not s["ok"]:
        print(f"| {layout} | 0/{s['runs']} | - | - | - | - | - | - | - |")
        continue
    p = stats.get(peer.get(layout, ""), {}).get("median")
    ratio = f"**{s['median'] / p:.2f}x** (/ {peer[layout]})" if p else "-"
    print(f"| {layout} | {s['ok']}/{s['runs']} | {s['median']:.0f} | {', '.join(f'{x / 1000:.1f}k' for x in s['sps'])} "
          f"| {s['ms']:.2f} | {ratio} | {s['loss']:.4f} | {s['peak']:.0f} | {s['other']} |")
EOF
}

main() {
  mkdir -p "$OUT"
  : >"$OUT/runs.jsonl"
  local before run layout
  before="$(cut -d' ' -f1-3 /proc/loadavg)"
  for run in $(seq "$RUNS"); do
    for layout in $LAYOUTS; do run_layout "$layout" "$run"; done
  done
  {
    echo "machine: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "runs: $RUNS of each layout, alternating; $STEPS steps each (global batch 256, $DEVICES replicas), seed $SEED;" \
         "OPENBLAS_CORETYPE=${CORETYPE:-(unset)}; load average before: $before, after: $(cut -d' ' -f1-3 /proc/loadavg);" \
         "runs started on a busy machine: $BUSY_STARTS (IDLE_WAIT=$IDLE_WAIT)"
    echo
    summarize
  } | tee "$OUT/summary.md"
}

main "$@"
