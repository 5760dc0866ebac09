#!/usr/bin/env bash
# bench/compare.sh: weft's in-process collectives (every op weft-bench measures) against an Open MPI baseline
# at its best on the same machine (bench/mpi_collectives.c: iterations planned by a time budget, warm-up,
# median over repetitions, max over ranks; weft-bench times itself the same way), plus the cost of a pmap
# call, the host copy bandwidth that bounds both, and weft's peak RSS. Results and raw JSON lines go to $OUT.
#
#   bench/compare.sh                 # after building weft (cmake --build build)
#   BUILD=build-rel RUNS=5 bench/compare.sh
#   INSTANCES=2 bench/compare.sh     # weft as 2 instances x 4 devices under weftrun, against 8 MPI ranks
#
# Knobs (environment): BUILD (weft build dir, default build), OUT (default $BUILD/bench), SIZES (default
# 4K,1M,64M), OPS (default: allreduce all_gather reduce_scatter all_to_all ppermute), DEVICES (replicas =
# MPI ranks, default 8), RUNS (alternating runs of each, default 3), BUDGET_MS (one repetition's planned
# time, default 200), IDLE_WAIT (seconds to wait, before each run, for the CPUs to be idle; default 120,
# 0 = don't wait).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
OUT="${OUT:-$BUILD/bench}"
SIZES="${SIZES:-4K,1M,64M}"
OPS="${OPS:-allreduce all_gather reduce_scatter all_to_all ppermute}"
BUDGET_MS="${BUDGET_MS:-200}"
DEVICES="${DEVICES:-8}"
RUNS="${RUNS:-3}"
INSTANCES="${INSTANCES:-1}"
IDLE_WAIT="${IDLE_WAIT:-120}"
BUSY_STARTS=0  # runs started on a busy machine (IDLE_WAIT ran out)
WEFT_BENCH="$BUILD/bin/weft-bench"
MPI_BENCH="$OUT/mpi_collectives"

# Open MPI refuses to run as root without these (containers usually run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 8 ranks on however many cores: oversubscribed ranks must yield instead of spinning on each other.
MPIRUN=(mpirun -np "$DEVICES" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)

log() { echo "compare.sh: $*" >&2; }

build() {
  log "building weft-bench in $BUILD"
  if ! cmake --build "$BUILD" --target weft-bench >&2; then
    [ -x "$WEFT_BENCH" ] || exit 1
    log "build failed; measuring the existing $WEFT_BENCH"
  fi
  mkdir -p "$OUT"
  log "building the MPI baseline: $MPI_BENCH"
  mpicc -O2 -std=c11 -Wall -Wextra -o "$MPI_BENCH" "$ROOT/bench/mpi_collectives.c"
}

# Percentage of CPU time, over all CPUs, spent busy during one second (from /proc/stat).
cpu_busy_percent() {
  local -a a b
  read -r -a a </proc/stat
  sleep 1
  read -r -a b </proc/stat
  local total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  local idle=$((b[4] - a[4] + b[5] - a[5]))
  echo $((100 * (total - idle) / (total > 0 ? total : 1)))
}

# On a shared machine (parallel builds) timings are noise: wait for the CPUs to be idle, at most IDLE_WAIT s.
wait_for_idle() {
  local waited=0
  while [ "$waited" -lt "$IDLE_WAIT" ]; do
    [ "$(cpu_busy_percent)" -le 10 ] && return 0
    waited=$((waited + 1))
  done
  [ "$IDLE_WAIT" -gt 0 ] && log "CPUs still busy after ${IDLE_WAIT}s; measuring anyway"
  BUSY_STARTS=$((BUSY_STARTS + 1))
}

# Alternates weft and MPI, op by op, so slow drifts of the machine (other load, thermal) hit both alike.
run_ops() {
  : >"$OUT/weft.jsonl"
  : >"$OUT/mpi.jsonl"
  local run op
  for run in $(seq "$RUNS"); do
    for op in $OPS; do
      wait_for_idle
      if [ "$INSTANCES" -gt 1 ]; then
        # Every instance prints the same timing (the slowest process's); keep instance 0's lines.
        log "run $run/$RUNS: weftrun --num-instances $INSTANCES --num-replicas $DEVICES weft-bench --op $op --sizes $SIZES"
        "$BUILD/bin/weftrun" --num-instances "$INSTANCES" --num-replicas "$DEVICES" "$WEFT_BENCH" --op "$op" \
          --sizes "$SIZES" --budget-ms "$BUDGET_MS" --json | sed -n 's/^\[instance 0\] //p' >>"$OUT/weft.jsonl"
      else
        log "run $run/$RUNS: weft-bench --op $op --devices $DEVICES --sizes $SIZES"
        "$WEFT_BENCH" --op "$op" --devices "$DEVICES" --sizes "$SIZES" --budget-ms "$BUDGET_MS" --json >>"$OUT/weft.jsonl"
      fi
      wait_for_idle
      log "run $run/$RUNS: ${MPIRUN[*]} mpi_collectives --op $op --sizes $SIZES"
      "${MPIRUN[@]}" "$MPI_BENCH" --op "$op" --sizes "$SIZES" --budget-ms "$BUDGET_MS" --json >>"$OUT/mpi.jsonl"
    done
    if [ "$INSTANCES" -eq 1 ]; then
      wait_for_idle
      log "run $run/$RUNS: weft-bench --op dispatch --devices $DEVICES"
      "$WEFT_BENCH" --op dispatch --devices "$DEVICES" --budget-ms "$BUDGET_MS" --json >>"$OUT/weft.jsonl"
    fi
  done
}

run_membw() {
  : >"$OUT/membw.jsonl"
  for run in $(seq "$RUNS"); do
    wait_for_idle
    log "run $run/$RUNS: weft-bench --op membw"
    "$WEFT_BENCH" --op membw --json >>"$OUT/membw.jsonl"
  done
}

# Sets RSS_KIB to the peak RSS of one 64 MiB allreduce run: GNU time's if there (installed if we can),
# else the benchmark's own getrusage report (--verbose).
measure_rss() {
  local cmd=("$WEFT_BENCH" --op allreduce --devices "$DEVICES" --sizes 64M --json)
  if [ ! -x /usr/bin/time ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    log "installing GNU time"
    (apt-get install -y -qq time >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq time; }) >&2 || true
  fi
  wait_for_idle
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -v "${cmd[@]}" 2>"$OUT/rss.txt" >/dev/null
    RSS_KIB="$(awk -F': ' '/Maximum resident set size/ {print $2}' "$OUT/rss.txt")"
  else
    "${cmd[@]}" --verbose 2>"$OUT/rss.txt" >/dev/null
    RSS_KIB="$(awk '/max RSS/ {print $(NF-1)}' "$OUT/rss.txt")"
  fi
}

# Medians per size, ratios against the targets, bandwidth as % of membw, RSS: a markdown report.
summarize() {
  local rss_kib="$1"
  awk -v rss_kib="$rss_kib" -v devices="$DEVICES" -v instances="$INSTANCES" '
    function field(line, key,    start) {
      if (!match(line, "\"" key "\":[^,}]*")) return ""
      start = length(key) + 3
      value = substr(line, RSTART + start, RLENGTH - start)
      gsub(/"/, "", value)
      return value
    }
    function median(list,    n, a, i, j, t) {
      n = split(list, a, " ")
      for (i = 2; i <= n; ++i) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; --j) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function human(bytes) {
      if (bytes >= 1048576) return bytes / 1048576 " MiB"
      if (bytes >= 1024) return bytes / 1024 " KiB"
      return bytes " B"
    }
    FNR == 1 { source = FILENAME; sub(/.*\//, "", source); sub(/\.jsonl$/, "", source) }
    {
      op = field($0, "op"); bytes = field($0, "bytes") + 0; t = field($0, "time_us") + 0
      if (field($0, "wrong") != 0) wrong[source] += field($0, "wrong")
      times[source, op, bytes] = times[source, op, bytes] " " t
      if (source == "weft" && !((op, bytes) in seen)) { seen[op, bytes] = 1; order[++nrows] = op SUBSEP bytes }
    }
    # The floors of issue 9 (MPI time / weft time), by op and reported size.
    function floor_of(op, bytes) {
      if (instances > 1) return op == "allreduce" && (bytes == 4096 || bytes == 1048576 || bytes == 67108864) ? 4 : 0
      if (bytes == 4096 || bytes == 1048576 || (op == "all_gather" && (bytes == 4096 * devices || bytes == 1048576 * devices))) return 8
      if ((op == "allreduce" || op == "reduce_scatter") && bytes == 67108864) return 8
      if (op == "all_gather" && bytes == 67108864 * devices) return 6
      return 0
    }
    END {
      print "| op | size | weft median (us) | MPI median (us) | MPI/weft | floor | met |"
      print "| --- | ---: | ---: | ---: | ---: | ---: | :---: |"
      for (i = 1; i <= nrows; ++i) {
        split(order[i], key, SUBSEP); op = key[1]; b = key[2]
        w = median(times["weft", op, b])
        if (op == "dispatch") {
          printf "| dispatch (empty pmap call) | - | %.1f | - | - | <= 10 us | %s |\n", w, (w <= 10 ? "yes" : "no")
          continue
        }
        m = median(times["mpi", op, b])
        ratio = w > 0 ? m / w : 0; goal = floor_of(op, b)
        printf "| %s | %s | %.1f | %.1f | %.2fx | %s | %s |\n", op, human(b), w, m, ratio,
               (goal ? ">= " goal "x" : "-"), (goal ? (ratio >= goal ? "yes" : "no") : "-")
        if (op == "allreduce" && b == 67108864) big_time = w
      }
      membw = median(times["membw", "membw", 536870912])
      membw_GBps = 2 * 536870912 / (membw * 1e3)
      print ""
      printf "membw (2 threads, 512 MiB, bytes read + written): median %.1f us per copy = %.2f GB/s\n", membw, membw_GBps
      if (big_time) {
        eff = 2 * devices * 67108864 / (big_time * 1e3)
        printf "allreduce 64 MiB effective bandwidth 2*%d*size/time: %.2f GB/s = %.1f%% of membw (target >= 75%%: %s)\n",
               devices, eff, 100 * eff / membw_GBps, (100 * eff / membw_GBps >= 75 ? "met" : "missed")
      }
      if (rss_kib != "")
        printf "peak RSS of weft-bench --op allreduce --devices %d --sizes 64M: %.1f MiB (target < 1.3 GiB = 1331.2 MiB: %s)\n",
               devices, rss_kib / 1024, (rss_kib / 1024 < 1331.2 ? "met" : "missed")
      printf "wrong elements: weft %d, MPI %d, membw %d\n", wrong["weft"], wrong["mpi"], wrong["membw"]
    }' "$OUT/weft.jsonl" "$OUT/mpi.jsonl" "$OUT/membw.jsonl"
}

machine() {
  echo "machine: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)," \
       "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM; $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "mpirun: $(mpirun --version 2>/dev/null | head -n 1)"
  echo "load average before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg);" \
       "runs started on a busy machine: $BUSY_STARTS"
}

main() {
  build
  [ "$INSTANCES" -gt 1 ] && cmake --build "$BUILD" --target weftrun >&2
  # Timings on a shared machine are only as good as its idleness: record the load next to the results.
  LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
  run_ops
  run_membw
  measure_rss
  {
    machine
    echo "runs: $RUNS alternating, ops $OPS, sizes $SIZES (one replica's input; all_gather reports the gathered" \
         "buffer), $DEVICES replicas / ranks, weft as $INSTANCES instance(s); each number a median of 5" \
         "repetitions of ~${BUDGET_MS} ms, the table the median over runs"
    echo
    summarize "$RSS_KIB"
  } | tee "$OUT/summary.md"
}

main "$@"
